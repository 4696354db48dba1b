"""Live output on the real engine: `pybox exec` and the API show output as it arrives."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import pybox
from pybox._core.capture import HeadTailCapture
from pybox._engine import Engine
from tests.integration.conftest import boxes

RUN_ID = re.compile(rb"\(run ([0-9a-f]{16})\)")


class Reader:
    """Reads a pipe on a thread of its own, noting when each piece arrived."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.pieces: list[tuple[float, bytes]] = []
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        while True:
            data = os.read(self.fd, 65536)
            if not data:
                return
            self.pieces.append((time.monotonic(), data))

    @property
    def data(self) -> bytes:
        return b"".join(data for _, data in self.pieces)

    def first_time(self, wanted: bytes) -> float | None:
        """When the bytes read so far first contained `wanted`."""
        seen = b""
        for at, data in list(self.pieces):
            seen += data
            if wanted in seen:
                return at
        return None


@pytest.fixture
def start_exec(cli_env: dict[str, str], tmp_path: Path) -> Iterator[object]:
    started: list[subprocess.Popen[bytes]] = []

    def start(code: str, *flags: str, one_pipe: bool = False) -> subprocess.Popen[bytes]:
        program = tmp_path / "live.py"
        program.write_text(code)
        proc = subprocess.Popen(
            [sys.executable, "-m", "pybox", "exec", str(program), *flags],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT if one_pipe else subprocess.PIPE,
            env=cli_env,
        )
        started.append(proc)
        return proc

    yield start
    for proc in started:  # only the processes this test started
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()


def _gone(engine: Engine, output: bytes) -> None:
    found = RUN_ID.search(output)
    assert found, output
    assert boxes(engine, found.group(1).decode()) == []


def test_a_line_arrives_while_the_program_still_runs(start_exec: object, engine: Engine) -> None:
    code = "import time\nprint('first line', flush=True)\ntime.sleep(10)\n"
    proc = start_exec(code, "--timeout", "20")  # type: ignore[operator]
    out, err = Reader(proc.stdout.fileno()), Reader(proc.stderr.fileno())
    deadline = time.monotonic() + 60  # box start under load: generous, not a benchmark
    while out.first_time(b"first line\n") is None and time.monotonic() < deadline:
        assert proc.poll() is None, "pybox exec ended before the line arrived"
        time.sleep(0.05)
    arrived = out.first_time(b"first line\n")
    assert arrived is not None, "the line did not arrive"
    assert proc.poll() is None  # the program is still sleeping
    assert proc.wait(60) == 0
    ended = time.monotonic()
    out.thread.join(10)
    err.thread.join(10)
    # It came while the program slept: well before the end, not with it.
    assert ended - arrived > 5, (ended - arrived, out.pieces)
    assert out.data == b"first line\n"
    receipt_at = err.first_time(b"pybox: succeeded, exit 0")
    assert receipt_at is not None and receipt_at > arrived + 5, err.data
    _gone(engine, err.data)


def test_stdout_and_stderr_keep_their_order_on_one_pipe(start_exec: object, engine: Engine) -> None:
    code = (
        "import sys, time\n"
        "for i in range(4):\n"
        "    print(f'out {i}', flush=True)\n"
        "    time.sleep(0.2)\n"
        "    print(f'err {i}', file=sys.stderr, flush=True)\n"
        "    time.sleep(0.2)\n"
    )
    proc = start_exec(code, "--timeout", "20", one_pipe=True)  # type: ignore[operator]
    combined, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, combined
    expected = b"".join(b"out %d\nerr %d\n" % (i, i) for i in range(4))
    assert combined.startswith(expected + b"pybox: succeeded, exit 0"), combined
    _gone(engine, combined)


def test_what_is_shown_is_the_receipts_capture(start_exec: object, engine: Engine) -> None:
    # Every byte value, past the live head but under the cap: shown exactly; over
    # the cap: head, omission notice, tail.
    code = (
        "import sys\n"
        "sys.stdout.buffer.write(bytes(range(256)) * 200)\n"
        "sys.stdout.buffer.flush()\n"
        "sys.stderr.buffer.write(b'e' * 300000)\n"
    )
    proc = start_exec(code, "--timeout", "20", "--output-limit", "64")  # type: ignore[operator]
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    assert stdout == bytes(range(256)) * 200
    capture = HeadTailCapture(64 * 1024)
    capture.feed(b"e" * 300000)
    assert stderr.startswith(capture.kept() + b"\npybox: succeeded"), stderr[-2000:]
    assert b"stderr 293.0 KiB (truncated)" in stderr
    _gone(engine, stderr)


def test_a_reader_that_goes_away_ends_cleanly(start_exec: object, engine: Engine) -> None:
    code = "import time\nfor i in range(100000):\n    print('line', i)\ntime.sleep(1)\n"
    proc = start_exec(code, "--timeout", "30")  # type: ignore[operator]
    assert proc.stdout.readline() == b"line 0\n"  # as `| head -1` reads
    proc.stdout.close()
    stderr = proc.stderr.read()
    assert proc.wait(120) == 0, stderr
    assert b"Traceback" not in stderr and b"Exception ignored" not in stderr, stderr
    assert b"pybox: succeeded, exit 0" in stderr
    assert b"stdout was closed (its reader went away)" in stderr
    _gone(engine, stderr)


@pytest.fixture
def private_state(monkeypatch: pytest.MonkeyPatch, state_dir: Path) -> None:
    monkeypatch.setenv("PYBOX_STATE_DIR", str(state_dir))
    monkeypatch.delenv("PYBOX_CONFIG", raising=False)


@pytest.mark.usefixtures("private_state")
def test_the_api_stream_yields_output_before_the_end(engine: Engine) -> None:
    code = "import time\nprint('hello', flush=True)\ntime.sleep(1)\nprint('bye')\n"
    timeline: list[tuple[float, pybox.RunEvent]] = []
    with pybox.Client(warm_pool=False) as client, client.stream(code, timeout_s=20) as events:
        for event in events:
            timeline.append((time.monotonic(), event))
        result = events.result
    kinds = [type(event) for _, event in timeline]
    assert kinds[0] is pybox.RunStarted and kinds[-1] is pybox.RunEnded
    chunks = [(at, e) for at, e in timeline if isinstance(e, pybox.OutputChunk)]
    assert b"".join(e.data for _, e in chunks) == b"hello\nbye\n" == result.stdout_bytes
    assert chunks[0][1].data.startswith(b"hello")
    assert timeline[-1][0] - chunks[0][0] > 0.5  # hello came a second before the end
    assert result.ok and boxes(engine, result.receipt.run_id) == []


@pytest.mark.usefixtures("private_state")
def test_leaving_the_api_stream_early_removes_the_box(engine: Engine) -> None:
    code = "import time\nprint('started', flush=True)\ntime.sleep(60)\n"
    began = time.monotonic()
    with pybox.Client(warm_pool=False) as client:
        events = client.stream(code, timeout_s=90)
        run_id = ""
        for event in events:
            if isinstance(event, pybox.RunStarted):
                run_id = event.run_id
            if isinstance(event, pybox.OutputChunk):
                break
        events.close()
        assert events.result.status == "stopped"
    assert time.monotonic() - began < 45
    assert run_id and boxes(engine, run_id) == []


@pytest.mark.usefixtures("private_state")
def test_the_api_callbacks_see_what_the_result_holds(engine: Engine) -> None:
    seen: list[tuple[str, bytes]] = []
    code = "import sys\nprint('out')\nprint('err', file=sys.stderr)\n"
    result = pybox.run_container(code, on_output=lambda s, d: seen.append((s, d)))
    assert b"".join(d for s, d in seen if s == "stdout") == result.stdout_bytes == b"out\n"
    assert b"".join(d for s, d in seen if s == "stderr") == result.stderr_bytes == b"err\n"
    assert boxes(engine, result.receipt.run_id) == []
