"""Bootstrap protocol 3 (a sandbox's box), run for real as a child process: it
finds its place again for a newly attached pybox, survives a vanished one, and
ends itself when idle."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pybox._core import wire
from tests.unit.test_bootstrap_programs import Bootstrap, ready

NONCE = "0123456789abcdef" * 2
KEY = "5a" * 32  # the link key pybox sends first


def keyed(box: Bootstrap) -> Bootstrap:
    box.send(wire.LINK_KEY + KEY.encode())
    return box


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[Bootstrap]:
    box = Bootstrap(
        tmp_path, wire.SANDBOX, pid1=False, wait_s=30, extra_args=(str(int(time.time() + 600)),)
    )
    try:
        yield keyed(box)
    finally:
        box.close()


def test_stray_bytes_are_skipped_and_a_ping_is_answered_once(sandbox: Bootstrap) -> None:
    assert ready(sandbox)["version"] == wire.SANDBOX
    ping = wire.STOP + wire.ACK + wire.PING + NONCE.encode()
    sandbox.send(ping + ping + b"0f")  # twice, and hex left over from a broken ping
    answer = ready(sandbox)
    assert answer["ping"] == NONCE
    # The nonce's HMAC under the link key: what a program that read the ping lacks.
    assert answer["proof"] == wire.ping_proof(bytes.fromhex(KEY), NONCE.encode()).decode()
    sandbox.program(b"print('after the ping')", code_name="_pybox_run.py")
    frames = []
    while True:
        frame = sandbox.frame()
        frames.append(frame.kind)
        if frame.kind == wire.K_EXIT:
            break
    assert wire.K_READY not in frames  # the repeated ping got no second answer


def test_a_program_whose_pybox_vanished_is_stopped_by_the_next_ping(sandbox: Bootstrap) -> None:
    ready(sandbox)
    sandbox.program(b"import time\nprint('long', flush=True)\ntime.sleep(60)", timeout_s=60)
    assert sandbox.frame().kind == wire.K_STARTED
    # A new pybox pings: STOP ends the program, a later ping's ACK finishes it.
    ping = wire.STOP + wire.ACK + wire.PING + NONCE.encode()
    sandbox.send(ping)
    started = time.monotonic()
    while True:
        frame = sandbox.frame()
        if frame.kind == wire.K_READY and frame.json().get("ping") == NONCE:
            break
        if frame.kind == wire.K_EXIT:
            assert frame.json()["stopped"] is True
            sandbox.send(ping)
    assert time.monotonic() - started < 10


def test_it_ends_itself_when_no_program_comes_in_its_idle_time(tmp_path: Path) -> None:
    box = Bootstrap(
        tmp_path, wire.SANDBOX, pid1=False, wait_s=1, extra_args=(str(int(time.time() + 600)),)
    )
    try:
        ready(keyed(box))
        assert box.process.wait(timeout=15) == 0
    finally:
        box.close()


def test_a_sandbox_whose_first_message_is_not_its_link_key_runs_nothing(tmp_path: Path) -> None:
    box = Bootstrap(
        tmp_path, wire.SANDBOX, pid1=False, wait_s=30, extra_args=(str(int(time.time() + 600)),)
    )
    try:
        ready(box)
        box.program(b"print('never')", code_name="_pybox_run.py")
        frame = box.frame()
        assert frame.kind == wire.K_ERROR
        assert "link key" in frame.json()["message"]
        assert box.process.wait(timeout=15) == 125
    finally:
        box.close()


def test_every_report_of_a_run_carries_its_token(sandbox: Bootstrap) -> None:
    ready(sandbox)
    token = "ab" * 16
    sandbox.program(b"print('hi')", code_name="_pybox_run.py", token=token)
    kinds = []
    while True:
        frame = sandbox.frame()
        kinds.append(frame.kind)
        if frame.kind in (wire.K_STARTED, wire.K_EXIT):
            assert frame.json()["token"] == token
        if frame.kind == wire.K_EXIT:
            break
    assert kinds[0] == wire.K_STARTED
