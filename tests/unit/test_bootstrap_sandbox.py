"""Bootstrap protocol 3 (a sandbox's box), run for real as a child process: it
finds its place again for a newly attached pybox, survives a vanished one, and
ends itself when idle."""

from __future__ import annotations

import ast
import sysconfig
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pybox._core import wire
from tests.unit.test_bootstrap_programs import PYTHON, Bootstrap, ready

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


# What the program's interpreter found: its flags, where two planted names came
# from, and whether the planted start-up hooks ran (repr: `json` could be planted).
PROBE = b"""
import os, sys
import fnmatch
print(repr({
    "isolated": sys.flags.isolated,
    "no_site": sys.flags.no_site,
    "fnmatch": fnmatch.__file__,
    "hooks": sorted(n for n in ("sitecustomize", "usercustomize") if n in sys.modules),
    "planted": os.environ.get("PLANTED_RAN", ""),
    "path": sys.path,
}))
"""


def test_pybox_s_own_program_starts_isolated_from_what_earlier_code_left(
    sandbox: Bootstrap,
) -> None:
    work = sandbox.root / "work"
    work.mkdir(exist_ok=True)
    hook = "import os\nos.environ['PLANTED_RAN'] = os.environ.get('PLANTED_RAN', '') + '{}'\n"
    # A module named like the standard library's beside the script; a sitecustomize
    # on PYTHONPATH (as .pybox-packages is); a usercustomize in a user site under HOME.
    (work / "fnmatch.py").write_text(hook.format("fnmatch "))
    packages = work / ".pybox-packages"
    packages.mkdir()
    (packages / "sitecustomize.py").write_text(hook.format("sitecustomize "))
    user_site = work / ".local" / "lib" / f"python{sysconfig.get_python_version()}"
    (user_site / "site-packages").mkdir(parents=True)
    (user_site / "site-packages" / "usercustomize.py").write_text(hook.format("usercustomize "))
    env = (("HOME", str(work)), ("PYTHONPATH", str(packages)))
    seen = {}
    for kind, argv in (
        ("pybox", [PYTHON, "-I", "-S", "_pybox_files.py"]),
        ("caller", [PYTHON, "_pybox_run.py"]),
    ):
        ready(sandbox)
        sandbox.program(PROBE, argv=argv, env=env)
        out, report = sandbox.until_exit()
        assert report["exit_code"] == 0, out
        seen[kind] = ast.literal_eval(out.decode())
        sandbox.send(wire.ACK)
    pybox = seen["pybox"]
    assert pybox["isolated"] == 1 and pybox["no_site"] == 1
    assert pybox["hooks"] == [] and pybox["planted"] == ""
    assert not pybox["fnmatch"].startswith(str(work))
    assert not [entry for entry in pybox["path"] if entry.startswith(str(work)) or not entry]
    # The same plants reach the caller's own program: they are real.
    caller = seen["caller"]
    assert caller["isolated"] == 0 and caller["fnmatch"] == str(work / "fnmatch.py")
    assert "sitecustomize" in caller["planted"]


def test_any_other_interpreter_argv_is_refused(sandbox: Bootstrap) -> None:
    ready(sandbox)
    sandbox.program(b"print(1)", argv=[PYTHON, "-X", "dev", "_pybox_files.py"])
    frame = sandbox.frame()
    assert frame.kind == wire.K_ERROR
    assert "not this box's Python" in frame.json()["message"]


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
