"""The API's live output: callbacks, the event iterator, and the pump beneath (fake engine)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

import pybox
from pybox._adapters.state import StateStore
from pybox._core.errors import EngineAPIError
from pybox._core.events import OutputChunk, RunEnded, RunEvent, RunStarted
from pybox._frontends import api
from pybox._orchestration.live import EitherEvent, EventPump
from pybox._orchestration.session import Session
from tests.unit.fake_engine import FakeEngine, Script
from tests.unit.test_run_events import _interleaved


@pytest.fixture
def client(monkeypatch: pytest.MonkeyPatch, session: Session) -> api.Client:
    monkeypatch.setattr(Session, "open", classmethod(lambda cls, *a, **k: session))
    return api.Client(warm_pool=False)


def test_the_event_types_are_public() -> None:
    for name in ("RunEvent", "RunStarted", "OutputChunk", "FileReturned", "RunEnded", "RunStream"):
        assert name in pybox.__all__ and getattr(pybox, name) is not None
    assert pybox.stream_container is api.stream_container


def test_run_calls_back_with_output_in_order(client: api.Client, engine: FakeEngine) -> None:
    engine.script = Script(raw=_interleaved())
    output: list[tuple[str, bytes]] = []
    events: list[RunEvent] = []
    result = client.run("...", on_output=lambda s, d: output.append((s, d)), on_event=events.append)
    assert output == [("stdout", b"one\n"), ("stderr", b"warn\n"), ("stdout", b"two\n")]
    assert isinstance(events[0], RunStarted) and isinstance(events[-1], RunEnded)
    # What was seen live is exactly the result's output, and the receipt is unchanged.
    assert b"".join(d for s, d in output if s == "stdout") == result.stdout_bytes
    assert result.receipt.reported_by_program.stdout.bytes_total == 8


def test_a_raising_callback_is_raised_after_the_box_is_gone(
    client: api.Client, engine: FakeEngine, state: StateStore
) -> None:
    engine.script = Script(raw=_interleaved())
    calls: list[bytes] = []

    def broken(stream: str, data: bytes) -> None:
        calls.append(data)
        raise ValueError("the watcher broke")

    with pytest.raises(ValueError, match="the watcher broke"):
        client.run("...", on_output=broken)
    assert calls == [b"one\n"]  # not called again
    assert engine.containers == {} and state.attempts() == {}


def test_a_slow_callback_does_not_delay_the_deadline(
    client: api.Client, engine: FakeEngine
) -> None:
    engine.script = Script(stdout=b"x", hang=True)
    release = threading.Event()
    killed_while_waiting: list[bool] = []

    def look() -> None:
        container = engine.attachments[0].container if engine.attachments else None
        if container is not None and container.killed and not release.is_set():
            killed_while_waiting.append(True)
            release.set()

    def slow(stream: str, data: bytes) -> None:
        release.wait(30)

    engine.on_read = look
    result = client.run("...", timeout_s=0.5, on_output=slow)
    assert killed_while_waiting and result.status == "timed_out"


def test_the_stream_yields_events_and_the_result(client: api.Client, engine: FakeEngine) -> None:
    engine.script = Script(raw=_interleaved())
    with client.stream("...") as events:
        seen = list(events)
        result = events.result
    chunks = [e for e in seen if isinstance(e, OutputChunk)]
    assert [c.data for c in chunks] == [b"one\n", b"warn\n", b"two\n"]
    assert isinstance(seen[0], RunStarted) and seen[-1] == RunEnded(
        result.receipt.run_id, "succeeded", 0
    )
    assert result.stdout == "one\ntwo\n" and events.done


def test_leaving_the_stream_early_stops_the_run_and_removes_the_box(
    client: api.Client, engine: FakeEngine, state: StateStore
) -> None:
    engine.script = Script(stdout=b"started\n", hang=True)
    began = time.monotonic()
    for event in client.stream("...", timeout_s=60):
        if isinstance(event, OutputChunk):
            break  # the stream is dropped here, and with it the run
    assert time.monotonic() - began < 10
    assert engine.containers == {} and state.attempts() == {}
    assert engine.attachments[0].container.killed


def test_close_stops_the_run_and_the_result_says_so(
    client: api.Client, engine: FakeEngine, state: StateStore
) -> None:
    engine.script = Script(stdout=b"started\n", hang=True)
    with client.stream("...", timeout_s=60) as events:
        assert isinstance(next(events), RunStarted)
    assert events.done and events.result.status == "stopped"
    assert list(events) == []
    assert engine.containers == {} and state.attempts() == {}


def test_the_callers_cancel_still_stops_a_stream(client: api.Client, engine: FakeEngine) -> None:
    engine.script = Script(stdout=b"started\n", hang=True)
    cancel = threading.Event()
    events = client.stream("...", timeout_s=60, cancel=cancel)
    for event in events:
        if isinstance(event, OutputChunk):
            cancel.set()
    assert events.result.status == "stopped"


def test_a_refused_request_raises_at_once(client: api.Client) -> None:
    with pytest.raises(pybox.LimitExceeded):
        client.stream("...", timeout_s=10**9)


def test_an_engine_failure_is_raised_by_the_iteration(
    client: api.Client, engine: FakeEngine
) -> None:
    engine.fail["create"] = EngineAPIError("no room", status=500, engine_message="no room")
    events = client.stream("...")
    with pytest.raises(pybox.EngineError):
        list(events)
    with pytest.raises(pybox.EngineError):
        _ = events.result


def test_stream_container_closes_its_client(
    monkeypatch: pytest.MonkeyPatch, session: Session, engine: FakeEngine
) -> None:
    monkeypatch.setattr(Session, "open", classmethod(lambda cls, *a, **k: session))
    closed: list[bool] = []
    monkeypatch.setattr(api.Client, "close", lambda self: closed.append(True))
    engine.script = Script(raw=_interleaved())
    events = api.stream_container("...")
    assert [type(e) for e in events][-1] is RunEnded
    assert events.result.ok and closed == [True]


def test_the_pump_never_blocks_and_keeps_a_sink_error() -> None:
    release = threading.Event()
    got: list[RunEvent] = []

    def sink(event: RunEvent) -> None:
        release.wait(10)
        got.append(event)
        if len(got) == 2:
            raise RuntimeError("broken")

    pump = EventPump(sink)
    began = time.monotonic()
    for offset in range(3):
        pump(OutputChunk("stdout", b"x", offset))
    assert time.monotonic() - began < 1 and got == []  # handed in while the sink waits
    release.set()
    pump.close()
    assert [e.offset for e in got if isinstance(e, OutputChunk)] == [0, 1]
    assert isinstance(pump.error, RuntimeError)


def test_either_event_is_set_by_either() -> None:
    other = threading.Event()
    either = EitherEvent(other)
    assert not either.is_set()
    other.set()
    assert either.is_set()
    assert EitherEvent(None).is_set() is False


def test_run_container_takes_the_callbacks() -> None:
    assert {"on_output", "on_event"} <= set(api.RunOptions.__annotations__)
    assert "on_output" not in api.StreamOptions.__annotations__


def test_output_files_come_back_from_a_stream(
    client: api.Client, engine: FakeEngine, tmp_path: Path
) -> None:
    engine.script = Script(files=[("a.txt", b"hello")])
    with client.stream("...", output_dir=tmp_path / "out") as events:
        names = [e.name for e in events if isinstance(e, pybox.FileReturned)]
    assert names == ["a.txt"]
    assert (tmp_path / "out" / "a.txt").read_bytes() == b"hello"
    assert [f.path for f in events.result.output_files] == ["a.txt"]
