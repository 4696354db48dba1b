"""A stopped run keeps the output its box had already sent (fake engine).

Ctrl-C and SIGTERM reach `pybox exec` while the box's output is still on its way;
the record must hold it, and a one-shot box's bootstrap gets a moment to send
what it was still relaying before the kill.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from pybox._core import wire
from pybox._core.receipt import Status
from pybox._core.request import RunRequest
from pybox._frontends.cli import _exec, main
from pybox._orchestration.session import Session
from tests.unit.fake_engine import FakeEngine, Script, frame


@pytest.fixture
def exec_json(monkeypatch: pytest.MonkeyPatch, session: Session, tmp_path: Path) -> Any:
    monkeypatch.setattr(_exec, "open_session", lambda args: session)
    program = tmp_path / "p.py"
    program.write_text("...\n")

    def run(capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
        code = main(["exec", str(program), "--json"])
        return code, json.loads(capsys.readouterr().out)

    return run


def _signal_on_reads(engine: FakeEngine, signum: int, reads: int) -> list[float]:
    """Send `signum` to this process on the first `reads` reads after the box has
    its code, while the program's output still waits in the connection."""
    sent: list[float] = []

    def hook() -> None:
        attach = engine.attachments[-1]
        if attach.container.header is not None and attach.outgoing and len(sent) < reads:
            sent.append(time.monotonic())
            signal.raise_signal(signum)

    engine.on_read = hook
    return sent


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_stop_keeps_the_output_still_in_the_connection(
    exec_json: Any, engine: FakeEngine, capsys: pytest.CaptureFixture[str], signum: int
) -> None:
    engine.script = Script(stdout=b"before the stop\n", hang=True)
    sent = _signal_on_reads(engine, signum, reads=1)
    code, record = exec_json(capsys)
    assert sent, "the signal was never sent"
    assert code == 130
    assert record["status"] == "stopped" and record["exit_code"] is None
    assert record["receipt"]["observed_by_pybox"]["cancelled"] is True
    assert record["stdout"] == "before the stop\n"
    assert engine.names("kill") and engine.containers == {}
    # The handlers pybox had before the run are back.
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_second_signal_stops_at_once(
    exec_json: Any, engine: FakeEngine, capsys: pytest.CaptureFixture[str]
) -> None:
    engine.script = Script(stdout=b"x" * (3 * wire.CHUNK), hang=True)
    sent = _signal_on_reads(engine, signal.SIGTERM, reads=2)
    code, record = exec_json(capsys)
    assert len(sent) == 2
    assert code == 130
    assert record["status"] == "stopped"
    assert engine.containers == {}


def test_a_one_shot_box_may_finish_relaying_before_the_kill(
    session: Session, engine: FakeEngine
) -> None:
    """What the bootstrap had read from the program when pybox stopped the run is
    sent a moment later; killed at once, the box would lose it."""
    engine.script = Script(hang=True)
    cancel = threading.Event()
    stopped_at: list[float] = []

    def hook() -> None:
        attach = engine.attachments[-1]
        if attach.container.header is None:
            return
        if not cancel.is_set():
            cancel.set()
            stopped_at.append(time.monotonic())
        elif len(stopped_at) == 1 and time.monotonic() - stopped_at[0] >= 0.02:
            stopped_at.append(time.monotonic())
            if not attach.container.killed:  # a killed bootstrap sends nothing more
                attach.outgoing.append((1, frame(wire.K_STDOUT, b"relayed late\n")))

    engine.on_read = hook
    outcome = session.run(RunRequest(code=b"..."), cancel=cancel)
    assert outcome.receipt.status is Status.STOPPED
    assert outcome.stdout == b"relayed late\n"
    assert engine.names("kill") and engine.containers == {}
