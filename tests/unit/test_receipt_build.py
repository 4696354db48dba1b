"""`build_receipt`: a pure function of a run's record, tested on hand-made records."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from pybox._adapters.cgroups import empty_observation
from pybox._adapters.confinement import confinement
from pybox._boxes.receipt import build_receipt, run_duration_s
from pybox._boxes.record import RunRecord
from pybox._core import wire
from pybox._core.capture import HeadTailCapture
from pybox._core.images import ImageRecord
from pybox._core.limits import LimitRequest, Policy
from pybox._core.posture import RunBoxSpec as BoxSpec
from pybox._core.receipt import EngineFacts, Status, Unknown
from pybox._core.request import RunRequest
from pybox._core.seal import PostureReport

IMAGE = ImageRecord(
    name="stdlib",
    image_id="sha256:" + "12" * 32,
    recipe_hash="sha256:" + "34" * 32,
    python_path="/usr/bin/python3",
    built_at="2026-01-01T00:00:00Z",
)
LIMITS = Policy().resolve(LimitRequest(timeout_s=5))


def _stream(data: bytes) -> Any:
    capture = HeadTailCapture(LIMITS.output_bytes)
    capture.feed(data)
    return capture.report()


def _state(**changes: Any) -> dict[str, Any]:
    state = {
        "Status": "exited",
        "Running": False,
        "ExitCode": 0,
        "OOMKilled": False,
        "StartedAt": "2026-01-01T00:00:01Z",
        "FinishedAt": "2026-01-01T00:00:02Z",
    }
    state.update(changes)
    return {"Created": "2026-01-01T00:00:00Z", "State": state}


def record(**changes: Any) -> RunRecord:
    """A fresh one-shot box whose program printed 42 and exited 0."""
    spec = BoxSpec(
        run_id="abc",
        image_id=IMAGE.image_id,
        python_path=IMAGE.python_path,
        bootstrap_source="",
        limits=LIMITS,
        owner="host:1:1",
        expires_at=0,
        pybox_version="test",
        confinement=confinement({}, local_host=True),
        uid=1_600_000_123,
    )
    values: dict[str, Any] = dict(
        run_id="abc",
        started_at="2026-01-01T00:00:00.000Z",
        pybox_version="test",
        engine=EngineFacts("/fake.sock", "1.41", "fake"),
        spec=spec,
        image=IMAGE,
        limits=LIMITS,
        request=RunRequest(code=b"print(6*7)\n"),
        collect_outputs=False,
        box_source="fresh",
        box_created_at="2026-01-01T00:00:00.000Z",
        box_waited_s=None,
        create_sent=True,
        container_id="c" * 64,
        posture=PostureReport(checked=("Config.User", "HostConfig.Privileged"), mismatches=()),
        box_started=True,
        box_kept=False,
        protocol=wire.ONE_PROGRAM,
        final_inspect=_state(),
        removal_confirmed=True,
        removal_error=None,
        marks={
            "created": 0.01,
            "verified": 0.012,
            "started": 0.09,
            "code_sent": 0.1,
            "program_ended": 0.15,
            "removed": 0.2,
        },
        exit_info={"exit_code": 0, "backstop": False},
        files_report=None,
        files_lost=None,
        sandbox_error=None,
        deadline_kill=False,
        cancelled=False,
        kernel=empty_observation(0.01),
        unknown=(),
        stdout=_stream(b"42\n"),
        stderr=_stream(b""),
        returned_files=(),
        skipped_files=(),
        skipped_more=0,
        leftovers_swept=0,
    )
    values.update(changes)
    return RunRecord(**values)


def test_a_fresh_successful_run() -> None:
    receipt = build_receipt(record())
    assert receipt.status is Status.SUCCEEDED and receipt.exit_code == 0
    pybox = receipt.observed_by_pybox
    assert (pybox.create_s, pybox.verify_s, pybox.start_s) == (0.01, 0.012, 0.09)
    assert (pybox.code_sent_s, pybox.program_ended_s, pybox.removed_s) == (0.1, 0.15, 0.2)
    assert pybox.run_duration_s == 0.05
    engine = receipt.observed_by_engine
    assert engine.container_name == "pybox-abc" and engine.exit_code == 0
    assert engine.posture_verified and engine.posture_fields_checked == 2
    assert engine.removal_confirmed
    assert receipt.configured.code.size_bytes == 11
    assert receipt.reported_by_program.stdout.bytes_total == 3
    assert receipt.unknown == ()


def test_the_same_record_gives_the_same_receipt() -> None:
    assert build_receipt(record()) == build_receipt(record())


def test_a_box_not_confirmed_removed_is_a_sandbox_error() -> None:
    receipt = build_receipt(record(removal_confirmed=False, removal_error="engine gone"))
    assert receipt.status is Status.SANDBOX_ERROR
    assert "could not be confirmed removed: engine gone" in receipt.cause.summary
    assert "pybox sweep" in receipt.cause.summary


def test_a_deadline_kill_before_the_exit_report() -> None:
    marks = {"code_sent": 0.1, "killed": 5.1, "removed": 5.3}
    receipt = build_receipt(
        record(marks=marks, exit_info=None, deadline_kill=True, collect_outputs=True)
    )
    assert receipt.status is Status.TIMED_OUT and receipt.exit_code is None
    assert receipt.observed_by_pybox.run_duration_s == 5.0
    assert receipt.cause.summary == "pybox ended the box at its 5 s deadline"
    assert [u.fact for u in receipt.unknown] == [
        "returned files",
        "the program's own exit status",
    ]


def test_duration_ends_at_removal_when_nothing_else_ended_it() -> None:
    assert run_duration_s({"code_sent": 1.0, "removed": 3.5}) == 2.5
    assert run_duration_s({"removed": 3.5}) is None


def test_a_program_in_a_box_kept_for_the_next_one() -> None:
    kept = record(
        box_source="same_box",
        box_waited_s=1.25,
        box_kept=True,
        protocol=wire.MANY_PROGRAMS,
        final_inspect=_state(Status="running", Running=True, ExitCode=0),
        removal_confirmed=False,
        marks={"code_sent": 0.001, "program_ended": 0.03},
        exit_info={"exit_code": 3, "backstop": False, "stopped": False},
    )
    receipt = build_receipt(kept)
    # The engine has no exit of its own for a running box: the box's report decides.
    assert receipt.observed_by_engine.exit_code is None
    assert receipt.observed_by_engine.finished_at is None
    assert receipt.observed_by_engine.state == "running"
    assert receipt.status is Status.FAILED and receipt.exit_code == 3
    assert "untrusted" in receipt.cause.evidence[0]
    pybox = receipt.observed_by_pybox
    assert (pybox.box_source, pybox.box_waited_s, pybox.create_s) == ("same_box", 1.25, None)
    assert not receipt.observed_by_engine.removal_confirmed
    assert [u.fact for u in receipt.unknown] == ["the engine's view of the program's end"]


@pytest.mark.parametrize(
    ("protocol", "kept", "confirmed", "field", "said"),
    [
        (wire.SANDBOX, True, False, "sandbox", "kept (sandbox)"),
        (wire.MANY_PROGRAMS, True, False, "next_program", "kept (for its next program)"),
        (wire.ONE_PROGRAM, False, True, None, "removed (confirmed)"),
        (wire.ONE_PROGRAM, False, False, None, "removal NOT confirmed"),
    ],
)
def test_a_box_kept_on_purpose_is_not_a_removal_that_failed(
    protocol: int, kept: bool, confirmed: bool, field: str | None, said: str
) -> None:
    receipt = build_receipt(
        record(
            box_kept=kept,
            protocol=protocol,
            removal_confirmed=confirmed,
            final_inspect=_state(Status="running", Running=True) if kept else _state(),
        )
    )
    assert receipt.observed_by_pybox.box_kept == field
    assert receipt.to_dict()["observed_by_pybox"]["box_kept"] == field
    box_line = next(line for line in receipt.summary_lines() if line.startswith("  box:"))
    assert box_line.endswith(f"; {said}")


def test_a_stopped_program_in_a_kept_box() -> None:
    stopped = record(
        box_kept=True,
        protocol=wire.MANY_PROGRAMS,
        final_inspect=_state(Status="running", Running=True),
        removal_confirmed=False,
        collect_outputs=True,
        deadline_kill=True,
        marks={"code_sent": 0.0, "killed": 5.0, "program_ended": 5.01},
        exit_info={"exit_code": -9, "backstop": False, "stopped": True},
    )
    receipt = build_receipt(stopped)
    assert receipt.status is Status.TIMED_OUT
    assert receipt.cause.summary == "pybox ended the program (the box stays up) at its 5 s deadline"
    facts = {u.fact: u.reason for u in receipt.unknown}
    assert facts["returned files"] == "not collected: the program was ended early"
    assert receipt.reported_by_program.exit_code == -9


def test_a_stopped_claim_means_nothing_in_a_one_program_box() -> None:
    # Only protocol 2 has stops: a protocol-1 box that claims one still owes its files.
    claimed = record(collect_outputs=True, exit_info={"exit_code": 0, "stopped": True})
    facts = [u.reason for u in build_receipt(claimed).unknown]
    assert any("did not report the end of the transfer" in reason for reason in facts)


def test_a_warm_box_and_the_records_own_unknowns() -> None:
    warm = record(
        box_source="warm_pool",
        box_waited_s=2.5,
        box_created_at="2025-12-31T23:59:00.000Z",
        marks={"code_sent": 0.001, "program_ended": 0.02, "removed": 0.05},
        unknown=(Unknown("kernel counters", "not found"),),
    )
    receipt = build_receipt(warm)
    pybox = receipt.observed_by_pybox
    assert pybox.box_source == "warm_pool" and pybox.box_waited_s == 2.5
    assert pybox.box_created_at == "2025-12-31T23:59:00.000Z" and pybox.create_s is None
    assert receipt.unknown == (Unknown("kernel counters", "not found"),)


def test_skipped_files_are_listed_with_a_count() -> None:
    report = {
        "files_sent": 0,
        "files_skipped": [
            {"path": f"f{i}", "reason": "cap"} for i in range(wire.MAX_SKIPPED_LISTED)
        ],
        "files_skipped_more": 7,
    }
    receipt = build_receipt(record(collect_outputs=True, files_report=report))
    assert len(receipt.reported_by_program.output_files_skipped) == wire.MAX_SKIPPED_LISTED
    (more,) = [u for u in receipt.unknown if u.fact == "the other skipped files"]
    assert more.reason.startswith("7 more files")


def test_a_record_is_frozen() -> None:
    frozen = record()
    try:
        frozen.run_id = "other"  # type: ignore[misc]
    except dataclasses.FrozenInstanceError:
        return
    raise AssertionError("a RunRecord must be frozen")
