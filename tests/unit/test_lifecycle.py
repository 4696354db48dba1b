"""The run lifecycle against a fake engine: order, cleanup on every path, receipts."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from pybox._adapters.state import StateStore
from pybox._boxes.record import RunInterrupted
from pybox._core import wire
from pybox._core.errors import (
    EngineUnavailable,
    ImageError,
    InvalidRequest,
    LimitExceeded,
)
from pybox._core.limits import MIB, LimitRequest
from pybox._core.receipt import Status
from pybox._core.request import InputFile, RunRequest
from pybox._orchestration.session import Session
from tests.unit.conftest import IMAGE_ID, OWNER, make_session
from tests.unit.fake_engine import FakeEngine, Script, frame, json_frame


def request(code: bytes = b"print(6*7)\n", **kwargs: object) -> RunRequest:
    return RunRequest(code=code, **kwargs)  # type: ignore[arg-type]


def assert_clean(engine: FakeEngine, state: StateStore) -> None:
    assert engine.containers == {}
    assert state.attempts() == {}
    for attach in engine.attachments:
        assert attach.closed


def test_success_runs_the_lifecycle_in_order(
    session: Session, engine: FakeEngine, state: StateStore
) -> None:
    engine.script = Script(stdout=b"42\n", exit_code=0)
    outcome = session.run(request())
    assert outcome.stdout == b"42\n"
    receipt = outcome.receipt
    assert receipt.status is Status.SUCCEEDED
    assert receipt.exit_code == 0
    assert receipt.observed_by_engine.posture_verified
    assert receipt.observed_by_engine.removal_confirmed
    assert receipt.configured.image.id == IMAGE_ID
    operations = [name for name, _ in engine.calls]
    # image checked, the engine's security options read (once per session),
    # create, read back, attach, start ... then remove and confirm.
    assert operations[:7] == [
        "inspect_image",
        "list",
        "info",
        "create",
        "inspect",
        "attach",
        "start",
    ]
    # The engine had recorded the end by the final inspect, so there is nothing to wait for.
    assert operations[-3:] == ["inspect", "remove", "inspect"]
    assert "wait" not in operations
    assert_clean(engine, state)


def test_payload_carries_code_and_inputs(session: Session, engine: FakeEngine) -> None:
    inputs = (InputFile("a.csv", b"1,2"), InputFile("b", b""))
    receipt = session.run(request(b"print(1)", code_name="job.py", inputs=inputs)).receipt
    attach = engine.attachments[0]
    header = attach.container.header
    assert header is not None
    assert header["argv"] == ["/usr/bin/python3", "job.py"]
    assert header["inputs"] == [{"name": "a.csv", "size": 3}, {"name": "b", "size": 0}]
    assert header["collect_outputs"] is False
    payload = bytes(attach.container.payload)
    assert payload.startswith(wire.MAGIC)
    assert payload.endswith(b"print(1)1,2")
    assert [(f.name, f.size_bytes) for f in receipt.configured.inputs] == [("a.csv", 3), ("b", 0)]
    assert receipt.configured.code.name == "job.py"


def test_nonzero_exit_is_a_failure_not_an_exception(session: Session, engine: FakeEngine) -> None:
    engine.script = Script(stderr=b"Traceback\n", exit_code=3)
    outcome = session.run(request())
    assert outcome.receipt.status is Status.FAILED
    assert outcome.receipt.exit_code == 3
    assert outcome.stderr == b"Traceback\n"


def test_timeout_kills_and_reports_timed_out(
    session: Session, engine: FakeEngine, state: StateStore
) -> None:
    engine.script = Script(stdout=b"started\n", hang=True)
    outcome = session.run(request(limits=LimitRequest(timeout_s=0.3)))
    receipt = outcome.receipt
    assert receipt.status is Status.TIMED_OUT
    assert receipt.exit_code is None
    assert receipt.observed_by_pybox.deadline_kill
    assert "kill" in [name for name, _ in engine.calls]
    assert outcome.stdout == b"started\n"
    assert any(u.fact == "the program's own exit status" for u in receipt.unknown)
    assert_clean(engine, state)


def test_oom_needs_evidence(session: Session, engine: FakeEngine) -> None:
    engine.script = Script(vanish=True, exit_code=137, oom_killed=True)
    receipt = session.run(request()).receipt
    assert receipt.status is Status.OUT_OF_MEMORY
    assert receipt.cause.known

    engine.script = Script(vanish=True, exit_code=137, oom_killed=False)
    receipt = session.run(request()).receipt
    assert receipt.status is Status.FAILED
    assert not receipt.cause.known
    assert "unknown" in receipt.cause.summary


def test_bootstrap_error_is_a_sandbox_error(
    session: Session, engine: FakeEngine, state: StateStore
) -> None:
    engine.script = Script(bootstrap_error="EOFError: stdin ended")
    receipt = session.run(request()).receipt
    assert receipt.status is Status.SANDBOX_ERROR
    assert "EOFError" in receipt.cause.summary
    assert_clean(engine, state)


def test_garbage_from_the_box_is_a_sandbox_error(
    session: Session, engine: FakeEngine, state: StateStore
) -> None:
    engine.script = Script(raw=b"Q\x00\x00\x00\x01!")
    receipt = session.run(request()).receipt
    assert receipt.status is Status.SANDBOX_ERROR
    assert "unknown frame kind" in receipt.cause.summary
    assert_clean(engine, state)


@pytest.mark.parametrize("token", ["forged", None])
def test_an_exit_report_without_the_runs_token_is_a_sandbox_error(
    session: Session, engine: FakeEngine, state: StateStore, token: str | None
) -> None:
    """Under gVisor a program can write to its PID 1's stdout: a report it forged
    ("succeeded, exit 0") lacks the run's token, and is never taken for PID 1's."""
    # None too: the fake engine, like PID 1, puts the token in only where none is.
    forged = {"exit_code": 0, "backstop": False, "token": token}
    engine.script = Script(
        raw=json_frame(wire.K_STARTED, {}) + json_frame(wire.K_EXIT, forged), exit_code=3
    )
    receipt = session.run(request()).receipt
    assert receipt.status is Status.SANDBOX_ERROR
    assert "does not carry this run's token" in receipt.cause.summary
    assert_clean(engine, state)


def test_oversized_frame_is_refused(session: Session, engine: FakeEngine) -> None:
    engine.script = Script(raw=wire.K_STDOUT + (10 * MIB).to_bytes(4, "big"))
    receipt = session.run(request()).receipt
    assert receipt.status is Status.SANDBOX_ERROR


def test_output_is_capped_head_and_tail(session: Session, engine: FakeEngine) -> None:
    flood = b"".join(b"%08d\n" % i for i in range(400_000))  # 3.6 MB
    engine.script = Script(stdout=flood)
    outcome = session.run(request(limits=LimitRequest(output_bytes=64 * 1024)))
    report = outcome.receipt.reported_by_program.stdout
    assert report.truncated
    assert report.bytes_total == len(flood)
    assert report.bytes_kept == 64 * 1024
    assert outcome.stdout.startswith(b"00000000\n")
    assert outcome.stdout.endswith(b"00399999\n")
    assert b"output truncated" in outcome.stdout


def test_returned_files_land_in_files_dir(
    session: Session, engine: FakeEngine, tmp_path: Path
) -> None:
    engine.script = Script(files=[("plot.png", b"\x89PNG"), ("sub/data.csv", b"a,b\n")])
    files_dir = tmp_path / "out"
    files_dir.mkdir()
    outcome = session.run(request(collect_outputs=True), files_dir=files_dir)
    assert sorted(f.path for f in outcome.output_files) == ["plot.png", "sub/data.csv"]
    assert (files_dir / "sub" / "data.csv").read_bytes() == b"a,b\n"
    digests = outcome.receipt.reported_by_program.output_files
    assert {d.path for d in digests} == {"plot.png", "sub/data.csv"}


def test_files_not_asked_for_are_refused(session: Session, engine: FakeEngine) -> None:
    engine.script = Script(raw=frame(wire.K_FILE, json.dumps({"path": "x", "size": 1}).encode()))
    receipt = session.run(request()).receipt
    assert receipt.status is Status.SANDBOX_ERROR


@pytest.mark.parametrize("operation", ["start", "attach", "wait"])
def test_engine_failure_halfway_still_removes_the_box(
    engine: FakeEngine, state: StateStore, operation: str
) -> None:
    session = make_session(engine, state)
    engine.fail[operation] = EngineUnavailable("engine went away")
    engine.late_exit = operation == "wait"  # otherwise nothing needs waiting for
    outcome = session.run(request())
    if operation == "wait":
        # The program finished; only the engine's final view is missing.
        assert outcome.receipt.status is Status.SUCCEEDED or outcome.receipt.exit_code is not None
        assert any("final view" in u.fact for u in outcome.receipt.unknown)
    else:
        assert outcome.receipt.status is Status.SANDBOX_ERROR
    assert outcome.receipt.observed_by_engine.removal_confirmed
    assert_clean(engine, state)


def test_unreachable_engine_is_never_already_gone(engine: FakeEngine, state: StateStore) -> None:
    session = make_session(engine, state)
    engine.script = Script(stdout=b"42\n")
    engine.fail["remove"] = EngineUnavailable("cannot reach the engine")
    outcome = session.run(request())
    receipt = outcome.receipt
    assert receipt.status is Status.SANDBOX_ERROR
    assert not receipt.observed_by_engine.removal_confirmed
    assert "could not be confirmed removed" in receipt.cause.summary
    # The attempt record stays, so the next run sweeps the box.
    assert list(state.attempts()) == [receipt.run_id]


def test_ctrl_c_removes_the_box_and_keeps_the_receipt(
    session: Session, engine: FakeEngine, state: StateStore
) -> None:
    engine.script = Script(hang=True)
    reads = {"n": 0}

    def interrupt() -> None:
        reads["n"] += 1
        if reads["n"] == 3:
            raise KeyboardInterrupt

    engine.on_read = interrupt
    with pytest.raises(RunInterrupted) as caught:
        session.run(request())
    assert isinstance(caught.value, KeyboardInterrupt)
    assert caught.value.outcome.receipt.status is Status.STOPPED
    assert caught.value.outcome.receipt.observed_by_engine.removal_confirmed
    assert_clean(engine, state)


def test_cancel_event_stops_the_run(
    session: Session, engine: FakeEngine, state: StateStore
) -> None:
    engine.script = Script(hang=True)
    cancel = threading.Event()
    timer = threading.Timer(0.2, cancel.set)
    timer.start()
    receipt = session.run(request(), cancel=cancel).receipt
    timer.cancel()
    assert receipt.status is Status.STOPPED
    assert receipt.observed_by_pybox.cancelled
    assert_clean(engine, state)


def test_limits_above_ceiling_create_nothing(
    session: Session, engine: FakeEngine, state: StateStore
) -> None:
    with pytest.raises(
        LimitExceeded, match="Requested 32768 MiB of memory; the maximum is 8192 MiB"
    ):
        session.run(request(limits=LimitRequest(memory_bytes=32768 * MIB)))
    assert engine.calls == []
    assert state.attempts() == {}


def test_more_cpus_than_the_engine_has_is_rejected(session: Session, engine: FakeEngine) -> None:
    engine.ncpu = 2
    with pytest.raises(LimitExceeded, match="the engine has only 2"):
        session.run(request(limits=LimitRequest(cpus=3.0)))
    assert "create" not in [name for name, _ in engine.calls]


def test_bad_input_name_creates_nothing(session: Session, engine: FakeEngine) -> None:
    with pytest.raises(InvalidRequest):
        session.run(request(inputs=(InputFile("../etc/passwd", b""),)))
    assert engine.calls == []


def test_unrecorded_image_is_refused(session: Session, engine: FakeEngine) -> None:
    with pytest.raises(ImageError, match="pybox image build data"):
        session.run(request(image="data"))
    assert engine.calls == []


def test_box_is_created_from_the_recorded_image_id(session: Session, engine: FakeEngine) -> None:
    session.run(request())
    # The create body names the image by ID, never by a tag that could move.
    create_targets = engine.names("create")
    assert len(create_targets) == 1


def test_leftovers_of_dead_owners_are_swept_first(engine: FakeEngine, state: StateStore) -> None:
    dead = FakeEngine()
    dead_session = Session(
        engine,
        state,
        make_session(dead, state).policy,
        owner="testhost:99:99",
        sampler_factory=lambda container_id: None,
        is_owner_alive=lambda owner: owner == OWNER,
    )
    engine.script = Script(hang=True)
    engine.fail["remove"] = EngineUnavailable("down")
    dead_session.run(request(limits=LimitRequest(timeout_s=0.1)))
    assert len(engine.containers) == 1  # left behind: the engine was "down"
    del engine.fail["remove"]
    engine.script = Script(stdout=b"ok")
    session = make_session(engine, state)
    receipt = session.run(request()).receipt
    assert receipt.observed_by_pybox.leftovers_swept == 1
    assert engine.containers == {}
    assert state.attempts() == {}


def test_an_end_the_engine_has_not_recorded_yet_is_waited_for(
    session: Session, engine: FakeEngine
) -> None:
    engine.script = Script(stdout=b"42\n", exit_code=3)
    engine.late_exit = True
    receipt = session.run(request()).receipt
    operations = [name for name, _ in engine.calls]
    assert operations[-5:] == ["inspect", "wait", "inspect", "remove", "inspect"]
    assert receipt.observed_by_engine.exit_code == 3
    assert receipt.observed_by_engine.state == "exited"


# --- after the exit report only the returned files are at stake (issue 12) ------------


def _unknown(receipt: object) -> dict[str, str]:
    return {u.fact: u.reason for u in receipt.unknown}  # type: ignore[attr-defined]


def test_bootstrap_failure_after_exit_keeps_the_programs_status(
    session: Session, engine: FakeEngine, tmp_path: Path
) -> None:
    from tests.unit.fake_engine import json_frame

    engine.script = Script(
        exit_code=3,
        after_exit=json_frame(wire.K_FILE, {"path": "a.txt", "size": 2})
        + frame(wire.K_DATA, b"ok")
        + json_frame(wire.K_ERROR, {"message": "OSError: [Errno 36] File name too long"}),
    )
    outcome = session.run(request(collect_outputs=True), files_dir=tmp_path)
    receipt = outcome.receipt
    assert receipt.status is Status.FAILED
    assert receipt.exit_code == 3
    assert [f.path for f in outcome.output_files] == ["a.txt"]
    reason = _unknown(receipt)["returned files"]
    assert "the bootstrap failed while sending them (OSError: [Errno 36]" in reason
    assert "the 1 file received before that is kept" in reason
    assert engine.attachments[0].container.acked  # the box was let go at once


def test_protocol_break_after_exit_keeps_the_programs_status(
    session: Session, engine: FakeEngine, tmp_path: Path
) -> None:
    oversized = wire.K_FILES_DONE + (wire.MAX_JSON_FRAME_BYTES + 1).to_bytes(4, "big")
    engine.script = Script(exit_code=0, after_exit=oversized)
    receipt = session.run(request(collect_outputs=True), files_dir=tmp_path).receipt
    assert receipt.status is Status.SUCCEEDED
    assert receipt.exit_code == 0
    assert "the box broke the protocol while sending them" in _unknown(receipt)["returned files"]


def test_a_box_still_running_after_its_exit_report_is_no_exit_code_0(
    session: Session, engine: FakeEngine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A box still returning files when pybox stops waiting: the engine's view of
    a running box says ExitCode 0, which is no exit code at all (it made a
    program that exited 5 `succeeded, exit 0`)."""
    from tests.unit.fake_engine import json_frame

    monkeypatch.setattr("pybox._boxes.program.DRAIN_AFTER_EXIT_S", 0.2)
    engine.script = Script(
        exit_code=5,
        after_exit=json_frame(wire.K_FILE, {"path": "a.txt", "size": 10})
        + frame(wire.K_DATA, b"abc"),
        stuck_after_exit=True,
    )
    receipt = session.run(
        request(collect_outputs=True, limits=LimitRequest(output_files_bytes=1024)),
        files_dir=tmp_path,
    ).receipt
    assert receipt.observed_by_engine.state == "running"
    assert receipt.observed_by_engine.exit_code is None
    assert (receipt.status, receipt.exit_code) == (Status.FAILED, 5)
    assert "untrusted" in receipt.cause.evidence[0]
    assert "returned files" in _unknown(receipt)
    assert engine.containers == {}  # removed all the same


def test_protocol_break_before_exit_is_still_a_sandbox_error(
    session: Session, engine: FakeEngine
) -> None:
    engine.script = Script(raw=wire.K_STDOUT + (wire.MAX_FRAME_BYTES + 1).to_bytes(4, "big"))
    assert session.run(request()).receipt.status is Status.SANDBOX_ERROR


def test_the_boxs_files_problem_is_listed_as_unknown(
    session: Session, engine: FakeEngine, tmp_path: Path
) -> None:
    from tests.unit.fake_engine import json_frame

    problem = "the output folder was replaced by a link; nothing returned"
    engine.script = Script(
        exit_code=3,
        after_exit=json_frame(
            wire.K_FILES_DONE,
            {"problem": problem, "files_sent": 0, "files_skipped": [], "files_skipped_more": 0},
        ),
    )
    receipt = session.run(request(collect_outputs=True), files_dir=tmp_path).receipt
    assert (receipt.status, receipt.exit_code) == (Status.FAILED, 3)
    assert _unknown(receipt)["returned files"] == f"{problem} (the box's report)"


def test_skipped_list_is_capped_with_a_count(
    session: Session, engine: FakeEngine, tmp_path: Path
) -> None:
    from tests.unit.fake_engine import json_frame

    listed = [{"path": f"f{i}", "reason": "over the returned-files count cap"} for i in range(100)]
    # pybox's own skips (over the count cap of 1) come first, then the box's list.
    files = b"".join(json_frame(wire.K_FILE, {"path": f"s{i}", "size": 0}) for i in range(30))
    engine.script = Script(
        after_exit=files
        + json_frame(
            wire.K_FILES_DONE,
            {"files_sent": 30, "files_skipped": listed, "files_skipped_more": 19_870},
        ),
    )
    outcome = session.run(
        request(collect_outputs=True, limits=LimitRequest(output_files=1)), files_dir=tmp_path
    )
    receipt = outcome.receipt
    assert receipt.status is Status.SUCCEEDED
    assert [f.path for f in outcome.output_files] == ["s0"]
    skipped = receipt.reported_by_program.output_files_skipped
    assert len(skipped) == wire.MAX_SKIPPED_LISTED
    assert skipped[0].path == "s1"
    more = 29 + 100 - wire.MAX_SKIPPED_LISTED + 19_870
    assert _unknown(receipt)["the other skipped files"].startswith(
        f"{more} more files were not returned; the receipt lists the first 100"
    )


def test_arguments_env_and_stdin_travel_in_the_payload(
    session: Session, engine: FakeEngine
) -> None:
    session.run(
        request(
            code_name="job.py",
            argv=("a", "b\tc"),
            env=(("GREETING", "hi\nthere"),),
            stdin_bytes=b"typed\n",
        )
    )
    container = engine.attachments[0].container
    assert container.header is not None
    assert container.header["args"] == ["a", "b\tc"]
    assert container.header["env"] == [("GREETING", "hi\nthere")]
    assert container.header["stdin_size"] == 6
    assert bytes(container.payload).endswith(b"typed\n")
