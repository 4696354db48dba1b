"""A run's events (started, output, returned files, ended) against the fake engine."""

from __future__ import annotations

from pathlib import Path

from pybox._adapters.state import StateStore
from pybox._core import wire
from pybox._core.events import FileReturned, OutputChunk, RunEnded, RunEvent, RunStarted
from pybox._core.limits import LimitRequest
from pybox._core.request import RunRequest
from pybox._orchestration.session import Session
from tests.unit.fake_engine import FakeEngine, Script, frame, json_frame


def _request(**kwargs: object) -> RunRequest:
    return RunRequest(code=b"print(6*7)\n", **kwargs)  # type: ignore[arg-type]


def _interleaved() -> bytes:
    return b"".join(
        [
            frame(wire.K_STARTED, b"{}"),
            frame(wire.K_STDOUT, b"one\n"),
            frame(wire.K_STDERR, b"warn\n"),
            frame(wire.K_STDOUT, b"two\n"),
            json_frame(wire.K_EXIT, {"exit_code": 0, "backstop": False}),
        ]
    )


def test_events_arrive_in_order_with_offsets(session: Session, engine: FakeEngine) -> None:
    engine.script = Script(raw=_interleaved())
    events: list[RunEvent] = []
    outcome = session.run(_request(), on_event=events.append)
    receipt = outcome.receipt
    assert events == [
        RunStarted(receipt.run_id, "fresh"),
        OutputChunk("stdout", b"one\n", 0),
        OutputChunk("stderr", b"warn\n", 0),
        OutputChunk("stdout", b"two\n", 4),
        RunEnded(receipt.run_id, "succeeded", 0),
    ]
    # The receipt covers exactly what was printed, as before.
    assert outcome.stdout == b"one\ntwo\n"
    assert receipt.reported_by_program.stdout.bytes_total == 8


def test_started_comes_before_the_code_is_sent(session: Session, engine: FakeEngine) -> None:
    seen: list[bool] = []

    def sink(event: RunEvent) -> None:
        if isinstance(event, RunStarted):
            seen.append(engine.attachments[0].container.header is None)

    session.run(_request(), on_event=sink)
    assert seen == [True]


def test_live_output_stops_at_the_cap_and_the_receipt_is_unchanged(
    session: Session, engine: FakeEngine
) -> None:
    limit = 1024
    printed = b"x" * 700 + b"y" * 700 + b"z" * 700
    raw = b"".join(
        [frame(wire.K_STARTED, b"{}")]
        + [frame(wire.K_STDOUT, printed[i : i + 700]) for i in range(0, len(printed), 700)]
        + [frame(wire.K_STDERR, b"e" * 10)]
        + [json_frame(wire.K_EXIT, {"exit_code": 0, "backstop": False})]
    )
    engine.script = Script(raw=raw)
    events: list[RunEvent] = []
    request = _request(limits=LimitRequest(output_bytes=limit))
    outcome = session.run(request, on_event=events.append)
    chunks = [e for e in events if isinstance(e, OutputChunk)]
    stdout = [c for c in chunks if c.stream == "stdout"]
    assert [(c.offset, len(c.data)) for c in stdout] == [(0, 700), (700, 324)]
    assert b"".join(c.data for c in stdout) == printed[:limit]
    # The other stream has a budget of its own.
    assert [c for c in chunks if c.stream == "stderr"] == [OutputChunk("stderr", b"e" * 10, 0)]
    report = outcome.receipt.reported_by_program.stdout
    assert report.bytes_total == len(printed) and report.truncated


def test_returned_files_are_events(
    session: Session, engine: FakeEngine, tmp_path: Path, state: StateStore
) -> None:
    engine.script = Script(files=[("a.txt", b"hello"), ("sub/b.bin", b"")])
    events: list[RunEvent] = []
    files_dir = tmp_path / "files"
    files_dir.mkdir()
    request = _request(collect_outputs=True)
    session.run(request, files_dir=files_dir, on_event=events.append)
    returned = [e for e in events if isinstance(e, FileReturned)]
    assert returned == [FileReturned("a.txt", 5), FileReturned("sub/b.bin", 0)]
    assert isinstance(events[-1], RunEnded)


def test_a_raising_sink_is_dropped_and_the_run_goes_on(
    session: Session, engine: FakeEngine, state: StateStore
) -> None:
    engine.script = Script(raw=_interleaved())
    calls: list[RunEvent] = []

    def sink(event: RunEvent) -> None:
        calls.append(event)
        if isinstance(event, OutputChunk):
            raise RuntimeError("the watcher broke")

    outcome = session.run(_request(), on_event=sink)
    # Called up to the first failure, never again.
    assert [type(e) for e in calls] == [RunStarted, OutputChunk]
    assert outcome.receipt.status.value == "succeeded"
    assert outcome.stdout == b"one\ntwo\n"
    assert engine.containers == {} and state.attempts() == {}


def test_a_timed_out_run_still_ends_with_an_event(session: Session, engine: FakeEngine) -> None:
    engine.script = Script(stdout=b"started\n", hang=True)
    events: list[RunEvent] = []
    request = _request(limits=LimitRequest(timeout_s=0.3))
    session.run(request, on_event=events.append)
    assert events[1] == OutputChunk("stdout", b"started\n", 0)
    assert events[-1] == RunEnded(events[0].run_id, "timed_out", None)  # type: ignore[union-attr]
