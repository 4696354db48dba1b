"""`pybox exec` shows the program's output as it arrives (fake engine)."""

from __future__ import annotations

import io
import json
import random
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from pybox._core import wire
from pybox._core.capture import HeadTailCapture
from pybox._core.display import neutralise_output
from pybox._frontends.cli import _exec, main
from pybox._frontends.cli._common import MARK_ON, TERMINAL_RESET
from pybox._frontends.cli._live import ShownStream
from pybox._orchestration.session import Session
from tests.unit.fake_engine import FakeEngine, Script, frame, json_frame
from tests.unit.test_cli_presentation import Stream


class _Shared(io.BytesIO):
    """One pipe behind both stdout and stderr (as `2>&1`)."""

    def isatty(self) -> bool:
        return False


class _OnePipe(io.TextIOWrapper):
    def __init__(self, shared: _Shared) -> None:
        super().__init__(shared, encoding="utf-8", write_through=True)

    def close(self) -> None:  # the other stream still uses the shared buffer
        pass


class _ClosingPipe(io.RawIOBase):
    """A pipe whose reader goes away after `keep` bytes: later writes fail with EPIPE."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self.got = bytearray()

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        if len(self.got) >= self.keep:
            raise BrokenPipeError(32, "Broken pipe")
        self.got += bytes(data)
        return len(data)


class _StalledPipe(io.RawIOBase):
    """A pipe nobody reads until `release` is set."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.got = bytearray()

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        self.release.wait(30)
        self.got += bytes(data)
        return len(data)


@pytest.fixture
def exec_program(monkeypatch: pytest.MonkeyPatch, session: Session, tmp_path: Path) -> Any:
    monkeypatch.setattr(_exec, "open_session", lambda args: session)
    monkeypatch.setenv("TERM", "xterm-256color")
    program = tmp_path / "p.py"
    program.write_text("...\n")

    def run(out: io.TextIOBase, err: io.TextIOBase, *flags: str) -> int:
        monkeypatch.setattr(sys, "stdout", out)
        monkeypatch.setattr(sys, "stderr", err)
        return main(["exec", str(program), *flags])

    return run


def _frames(*pieces: tuple[bytes, bytes], exit_code: int = 0) -> bytes:
    return b"".join(
        [frame(wire.K_STARTED, b"{}")]
        + [frame(kind, data) for kind, data in pieces]
        + [json_frame(wire.K_EXIT, {"exit_code": exit_code, "backstop": False})]
    )


def test_output_is_shown_while_the_program_runs(exec_program: Any, engine: FakeEngine) -> None:
    engine.script = Script(stdout=b"early\n", stderr=b"warn\n", hang=True)
    out, err = Stream(False), Stream(False)
    seen_before_the_kill: list[bool] = []
    shown = (b"early\n", b"warn\n")

    def look() -> None:
        container = engine.attachments[0].container if engine.attachments else None
        running = container is not None and not container.killed
        if running and not seen_before_the_kill and (out.data(), err.data()) == shown:
            seen_before_the_kill.append(True)

    engine.on_read = look
    assert exec_program(out, err, "--timeout", "1") == 124
    assert seen_before_the_kill == [True]
    assert out.data() == b"early\n"
    assert err.data().startswith(b"warn\npybox: timed_out in ")


def test_stdout_and_stderr_keep_their_order_on_one_pipe(
    exec_program: Any, engine: FakeEngine
) -> None:
    pieces = [(wire.K_STDOUT, b"one\n"), (wire.K_STDERR, b"warn\n"), (wire.K_STDOUT, b"two\n")]
    engine.script = Script(raw=_frames(*pieces, (wire.K_STDERR, b"last")))
    shared = _Shared()
    pipe = _OnePipe(shared)
    assert exec_program(pipe, pipe) == 0
    shown = shared.getvalue()
    assert shown.startswith(b"one\nwarn\ntwo\nlast\npybox: succeeded, exit 0")


@pytest.mark.parametrize("printed", [900, 1024, 3000])
def test_what_is_shown_is_exactly_what_the_receipt_kept(
    exec_program: Any, engine: FakeEngine, printed: int
) -> None:
    data = bytes(random.Random(printed).randrange(32, 127) for _ in range(printed))
    engine.script = Script(stdout=data, hang=True)
    out, err = Stream(False), Stream(False)
    shown_while_running: list[int] = []

    def look() -> None:
        container = engine.attachments[0].container if engine.attachments else None
        if container is not None and not container.killed:
            shown_while_running.append(len(out.data()))

    engine.on_read = look
    assert exec_program(out, err, "--output-limit", "1", "--timeout", "0.5") == 124
    # While the program ran: its head (the first half of the cap), no more.
    assert max(shown_while_running) == 512
    capture = HeadTailCapture(1024)
    capture.feed(data)
    # At the end: the rest, or the omission notice and the tail, as the receipt kept it.
    assert out.data() == capture.kept()
    if printed <= 1024:
        assert out.data() == data
    else:
        assert b"\n[pybox: output truncated: 1976 bytes dropped between" in out.data()
        assert "(truncated)" in err.data().decode()


def test_a_closed_stdout_ends_the_showing_not_the_run(
    exec_program: Any, engine: FakeEngine, state: Any
) -> None:
    engine.script = Script(
        raw=_frames(*[(wire.K_STDOUT, b"line %d\n" % i) for i in range(50)], exit_code=3),
        exit_code=3,
    )
    pipe = _ClosingPipe(keep=10)
    out = io.TextIOWrapper(io.BufferedWriter(pipe, 8), encoding="utf-8", write_through=True)
    err = Stream(False)
    assert exec_program(out, err) == 3  # the program's own exit code
    assert bytes(pipe.got).startswith(b"line 0\n")
    text = err.data().decode()
    assert "pybox: failed, exit 3" in text
    assert "stdout was closed (its reader went away)" in text
    assert "Traceback" not in text
    assert engine.containers == {} and state.attempts() == {}


def test_a_stalled_reader_does_not_delay_the_deadline(
    exec_program: Any, engine: FakeEngine
) -> None:
    engine.script = Script(stdout=b"x" * 100, hang=True)
    pipe = _StalledPipe()
    out = io.TextIOWrapper(io.BufferedWriter(pipe, 8), encoding="utf-8", write_through=True)
    killed_while_stalled: list[float] = []

    def look() -> None:
        container = engine.attachments[0].container if engine.attachments else None
        if container is not None and container.killed and not pipe.release.is_set():
            killed_while_stalled.append(time.monotonic())
            pipe.release.set()

    engine.on_read = look
    assert exec_program(out, Stream(False), "--timeout", "0.5") == 124
    assert killed_while_stalled  # the kill came while nothing could be written
    assert bytes(pipe.got) == b"x" * 100


def test_json_keeps_its_one_record(exec_program: Any, engine: FakeEngine) -> None:
    engine.script = Script(raw=_frames((wire.K_STDOUT, b"out\n"), (wire.K_STDERR, b"err\n")))
    out, err = Stream(False), Stream(False)
    assert exec_program(out, err, "--json") == 0
    [line] = out.data().decode().splitlines()
    record = json.loads(line)
    assert record["stdout"] == "out\n" and record["stderr"] == "err\n"
    assert err.data() == b""


def test_on_a_terminal_live_pieces_are_neutralised_like_the_whole(
    exec_program: Any, engine: FakeEngine
) -> None:
    # A CR before an LF and a character split between two pieces stay what they are.
    pieces = [b"a\r", b"\nb \xe2\x82", b"\xac\x1b[2J", b"\r", b"x\xff"]
    engine.script = Script(
        raw=_frames(*[(wire.K_STDOUT, p) for p in pieces], (wire.K_STDERR, b"e"))
    )
    out, err = Stream(True), Stream(True)
    assert exec_program(out, err) == 0
    assert out.data() == neutralise_output(b"".join(pieces))
    assert out.data() == "a\r\nb \u20ac\\x1b[2J\\rx\\xff".encode()
    program_part, _, pybox_part = err.data().decode().partition(TERMINAL_RESET)
    assert program_part == "e"
    # Both on one screen, the last piece shown (stderr's "e") did not end its line.
    assert pybox_part.startswith(f"\n{MARK_ON}pybox:")


def test_chunked_neutralising_equals_whole() -> None:
    rng = random.Random(7)
    alphabet = [b"a", b"\r", b"\n", b"\x1b", b"\xe2\x82\xac", b"\xff", b"\xc3", b"\xa9", b"\t"]
    for _ in range(300):
        data = b"".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 30)))
        shown = ShownStream(Stream(True))
        cuts = sorted(rng.sample(range(len(data) + 1), k=min(len(data) + 1, rng.randrange(4))))
        parts = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
        pieces = [shown.neutralised(part, final=False) for part in parts]
        pieces.append(shown.neutralised(b"", final=True))
        assert b"".join(pieces) == neutralise_output(data), data
