"""Sandboxes on the real engine: files and libraries persist, every run is a fresh
process under the same seal, paths stay in the workspace, hostile runs leave the
sandbox usable and clean, and other pybox processes can use and destroy it."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pybox._core.errors import InvalidRequest, SandboxError, SandboxNotFound
from pybox._core.limits import MIB, LimitRequest
from pybox._core.request import RunRequest
from pybox._engine import Engine
from pybox._engine.keeper import HELLO_PREFIX
from pybox._engine.keeper import socket_path as keeper_socket_path
from pybox._features.sandboxes.records import RUN_PROGRAM, SandboxInfo
from pybox._features.sandboxes.service import Sandboxes
from pybox._orchestration.session import Session

PROCESSES = "import os; print(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))"


def code(text: str, timeout_s: float | None = None) -> RunRequest:
    limits = LimitRequest(timeout_s=timeout_s) if timeout_s else LimitRequest()
    return RunRequest(code=text.encode(), code_name=RUN_PROGRAM, limits=limits)


@pytest.fixture
def sandboxes(session: Session) -> Sandboxes:
    return session.sandboxes()


@pytest.fixture
def sandbox_id(sandboxes: Sandboxes, engine: Engine) -> Iterator[str]:
    info = sandboxes.create(limits=LimitRequest(timeout_s=20, memory_bytes=256 * MIB, pids=64))
    yield info.sandbox_id
    sandboxes.destroy(info.sandbox_id)
    assert engine.inspect_container(f"pybox-{info.sandbox_id}") is None


def processes(sandboxes: Sandboxes, sandbox_id: str) -> list[int]:
    outcome = sandboxes.run(sandbox_id, code(PROCESSES))
    pids: list[int] = json.loads(outcome.stdout)
    return pids


def test_files_persist_and_each_run_is_a_fresh_process(
    sandboxes: Sandboxes, sandbox_id: str, engine: Engine
) -> None:
    first = sandboxes.run(sandbox_id, code("x = 41\nopen('kept.txt', 'w').write('kept')"))
    assert first.receipt.status.value == "succeeded"
    second = sandboxes.run(sandbox_id, code("print(open('kept.txt').read(), 'x' in globals())"))
    assert second.stdout == b"kept False\n"
    assert first.receipt.run_id != second.receipt.run_id
    # No interface but lo, from inside and from the engine.
    inside = sandboxes.exec(sandbox_id, ["ls", "/sys/class/net"])
    assert inside.stdout.split() == [b"lo"]
    seen = engine.inspect_container(f"pybox-{sandbox_id}") or {}
    assert seen["HostConfig"]["NetworkMode"] == "none"
    assert not (seen.get("NetworkSettings") or {}).get("Networks")
    # The API's file tools agree with what the program sees.
    sandboxes.write_file(sandbox_id, "data/in.txt", b"from the caller")
    assert sandboxes.read_file(sandbox_id, "/pybox/work/kept.txt") == b"kept"
    files, complete = sandboxes.list_files(sandbox_id)
    assert complete and {"kept.txt", "data", "data/in.txt"} <= {f.path for f in files}
    assert sandboxes.get(sandbox_id).runs == 6
    # Each program's stored record is chained into the audit log (docs/store.md).
    verdict = sandboxes.store.verify_audit()
    assert verdict.ok and verdict.runs is not None, verdict
    assert not {first.receipt.run_id, second.receipt.run_id} & set(verdict.runs.not_covered)
    assert verdict.runs.covered >= 6


def test_paths_outside_the_workspace_are_refused_in_every_path_tool(
    sandboxes: Sandboxes, sandbox_id: str
) -> None:
    sandboxes.run(
        sandbox_id, code("import os; os.symlink('/etc', 'out'); os.symlink('/etc/passwd', 'pw')")
    )
    for path in ("../../etc/passwd", "/etc/passwd", "a/../../x", "out/passwd", "pw"):
        with pytest.raises(InvalidRequest):
            sandboxes.read_file(sandbox_id, path)
        with pytest.raises(InvalidRequest):
            sandboxes.write_file(sandbox_id, path, b"x")
    for path in ("../..", "/etc", "out"):
        with pytest.raises(InvalidRequest):
            sandboxes.list_files(sandbox_id, path)
    # Nothing was written through the link: /etc is the image's, read-only anyway.
    listed = {f.path: f.kind for f in sandboxes.list_files(sandbox_id)[0]}
    assert listed["out"] == "link" and listed["pw"] == "link"


def test_a_timeout_an_oom_kill_a_fork_bomb_and_a_daemon_leave_it_usable_and_clean(
    sandboxes: Sandboxes, sandbox_id: str
) -> None:
    alone = processes(sandboxes, sandbox_id)
    assert alone[0] == 1 and len(alone) == 2  # PID 1 and the program itself
    timed = sandboxes.run(sandbox_id, code("import time; time.sleep(60)", timeout_s=1))
    assert timed.receipt.status.value == "timed_out"
    oom = sandboxes.run(sandbox_id, code("x = bytearray(1 << 30)"))
    assert oom.receipt.status.value in ("out_of_memory", "failed")
    bomb = sandboxes.run(
        sandbox_id,
        code(
            "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass",
            timeout_s=3,
        ),
    )
    assert bomb.receipt.status.value in ("timed_out", "failed")
    daemon = sandboxes.run(
        sandbox_id,
        code(
            "import os, time\n"
            "if os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        time.sleep(1000)\n"
            "    os._exit(0)\n"
            "print('started')"
        ),
    )
    assert daemon.stdout == b"started\n"
    after = processes(sandboxes, sandbox_id)
    assert after[0] == 1 and len(after) == 2, after
    assert sandboxes.run(sandbox_id, code("print('still here')")).stdout == b"still here\n"


FILL = (
    "import sys\n"
    "with open('big', 'wb', buffering=0) as out:\n"
    "    try:\n"
    "        while True:\n"
    "            out.write(b'x' * 65536)\n"
    "    except OSError as exc:\n"
    "        print(exc.errno)\n"
    "sys.exit(3)\n"
)


def test_a_full_workspace_is_named_and_the_sandbox_runs_its_next_program(
    lane_session: Session, engine: Engine
) -> None:
    """Issue 29: a run that fills /pybox used to cost the sandbox, and the next run's
    receipt blamed the program for the bootstrap's exit code 125."""
    sandboxes = lane_session.sandboxes()
    info = sandboxes.create(limits=LimitRequest(timeout_s=20, writable_bytes=8 * MIB))
    try:
        filled = sandboxes.run(info.sandbox_id, code(FILL))
        receipt = filled.receipt
        assert (receipt.status.value, receipt.exit_code, filled.stdout) == ("failed", 3, b"28\n")
        assert receipt.reported_by_program.workspace_full_bytes == 8 * MIB
        summary = "\n".join(receipt.summary_lines())
        assert f"the workspace was full when the program ended, at {8 * MIB} bytes" in summary
        # Its inputs cannot fit: refused before it starts, in pybox's words; the box stays.
        with pytest.raises(SandboxError, match=f"workspace is full.*{8 * MIB} bytes"):
            sandboxes.write_file(info.sandbox_id, "more.bin", b"y" * 200_000)
        assert sandboxes.get(info.sandbox_id).state == "ready"
        # A program still runs in the full workspace (its code arrives through a pipe).
        freed = sandboxes.run(
            info.sandbox_id, code("import os\nos.remove('big')\nprint('freed')\n")
        )
        assert freed.receipt.status.value == "succeeded", freed.receipt.cause
        assert freed.stdout == b"freed\n" and freed.receipt.exit_code == 0
        assert freed.receipt.reported_by_program.workspace_full_bytes is None
        after = sandboxes.run(info.sandbox_id, code("import os\nprint(sorted(os.listdir('.')))\n"))
        assert after.receipt.status.value == "succeeded", after.receipt.cause
        assert after.stdout == b"['_pybox_run.py']\n"
        assert after.receipt.observed_by_pybox.box_kept == "sandbox"
    finally:
        sandboxes.destroy(info.sandbox_id)
    assert engine.inspect_container(f"pybox-{info.sandbox_id}") is None


def test_a_program_s_exit_code_125_is_not_pybox_s_and_pybox_s_is_not_the_program_s(
    sandboxes: Sandboxes, sandbox_id: str
) -> None:
    """125 is also the code the in-box bootstrap ends with when it fails: a program
    exiting 125 keeps its own status, and the sandbox goes on."""
    outcome = sandboxes.run(sandbox_id, code("import sys; sys.exit(125)"))
    assert (outcome.receipt.status.value, outcome.receipt.exit_code) == ("failed", 125)
    assert sandboxes.run(sandbox_id, code("print(1)")).stdout == b"1\n"


def test_a_run_cannot_raise_the_sandbox_limits(sandboxes: Sandboxes, sandbox_id: str) -> None:
    from pybox._core.errors import LimitExceeded

    with pytest.raises(LimitExceeded):
        sandboxes.run(sandbox_id, code("print(1)", timeout_s=21))
    with pytest.raises(InvalidRequest):
        sandboxes.run(
            sandbox_id,
            RunRequest(
                code=b"", code_name=RUN_PROGRAM, limits=LimitRequest(memory_bytes=MIB * 512)
            ),
        )


def _other_process(state_dir: Path, script: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    prelude = (
        "import sys\n"
        "from pybox._orchestration.session import Session\n"
        "from pybox._core.request import RunRequest\n"
        "from pybox._features.sandboxes.records import RUN_PROGRAM, SandboxInfo\n"
        "sandboxes = Session.open().sandboxes()\n"
        "sid = sys.argv[1]\n"
    )
    return subprocess.Popen(
        [sys.executable, "-c", prelude + script, *env.pop("_ARGS").split()],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def test_another_process_lists_uses_and_destroys_it_even_after_a_killed_controller(
    sandboxes: Sandboxes, engine: Engine, cli_env: dict[str, str], state_dir: Path
) -> None:
    info = sandboxes.create()
    sid = info.sandbox_id
    try:
        sandboxes.write_file(sid, "note.txt", b"made by the first")
        # A controller killed in the middle of a run.
        killed = _other_process(
            state_dir,
            "sandboxes.run(sid, RunRequest(code=b\"print('long', flush=True)\\nimport time; time.sleep(300)\", code_name=RUN_PROGRAM))\n",
            {**cli_env, "_ARGS": sid},
        )
        deadline = time.monotonic() + 30
        while sandboxes.store.get_sandbox(sid).state != "busy":  # type: ignore[union-attr]
            assert time.monotonic() < deadline and killed.poll() is None
            time.sleep(0.05)
        time.sleep(0.5)
        os.kill(killed.pid, signal.SIGKILL)
        killed.wait(timeout=10)
        other = _other_process(
            state_dir,
            "print([s.sandbox_id for s in sandboxes.list()])\n"
            "out = sandboxes.run(sid, RunRequest(code=b\"print(open('note.txt').read())\", code_name=RUN_PROGRAM))\n"
            "print(out.stdout.decode().strip())\n"
            "print(sandboxes.destroy(sid)[1])\n",
            {**cli_env, "_ARGS": sid},
        )
        out, err = other.communicate(timeout=90)
        assert other.returncode == 0, err.decode()
        lines = out.decode().splitlines()
        assert sid in lines[0] and lines[1] == "made by the first" and lines[2] == "True"
        assert engine.inspect_container(f"pybox-{sid}") is None
        with pytest.raises(SandboxNotFound):
            sandboxes.run(sid, code("print(1)"))
        assert sandboxes.destroy(sid)[1] is False  # idempotent
    finally:
        sandboxes.destroy(sid)
    verdict = sandboxes.store.verify_audit()
    assert verdict.ok, verdict


def test_libraries_are_installed_by_another_box_and_import_in_the_sandbox(
    sandboxes: Sandboxes, engine: Engine
) -> None:
    info = sandboxes.create(libraries=["six"])
    try:
        assert info.libraries == ("six",)
        outcome = sandboxes.run(
            info.sandbox_id,
            code("import six, os; print(six.__name__, os.listdir('/sys/class/net'))"),
        )
        assert outcome.stdout == b"six ['lo']\n", outcome.stderr
        audit = [e for e in sandboxes.store.audit_tail(20) if e.operation == "sandbox.install"]
        packages = audit[-1].details["packages"]
        assert packages[0]["name"] == "six" and packages[0]["version"]
        # The receipt of the run that installed them says what was installed.
        (install,) = [
            r
            for r in sandboxes.store.list_runs(sandbox_id=info.sandbox_id)
            if r.kind == "sandbox.install"
        ]
        assert install.receipt is not None
        (library,) = install.receipt["configured"]["libraries"]
        assert library["name"] == "six" and len(library["wheel_sha256"] or "") == 64
    finally:
        sandboxes.destroy(info.sandbox_id)
    assert engine.inspect_container(f"pybox-{info.sandbox_id}") is None


def test_an_idle_sandbox_ends_itself_and_the_sweep_closes_its_record(
    engine: Engine, session: Session
) -> None:
    from pybox._core.sandbox_settings import SandboxSettings

    idle = Session(
        engine,
        session.state,
        session.policy,
        sandbox_settings=SandboxSettings(idle_ttl_s=2.0),
    ).sandboxes()
    info = idle.create()
    try:
        deadline = time.monotonic() + 30
        while (
            (engine.inspect_container(f"pybox-{info.sandbox_id}") or {})
            .get("State", {})
            .get("Running")
        ):
            assert time.monotonic() < deadline, "the idle box did not end itself"
            time.sleep(0.2)
        assert info.sandbox_id not in [s.sandbox_id for s in idle.list()]
        row = idle.store.get_sandbox(info.sandbox_id)
        assert row is not None and row.state == "destroyed" and row.reason == "expired"
        assert engine.inspect_container(f"pybox-{info.sandbox_id}") is None
    finally:
        idle.destroy(info.sandbox_id)


def _keeper_pid(container_id: str) -> int:
    """The keeper's pid, from its hello (it serves one client at a time: none now)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(10)
    try:
        sock.connect(str(keeper_socket_path(container_id)))
        line = sock.recv(256)
    finally:
        sock.close()
    assert line.startswith(HELLO_PREFIX + container_id.encode() + b" "), line
    return int(line.split()[-1])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


def _gone_within(pid: int, wait_s: float) -> bool:
    deadline = time.monotonic() + wait_s
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not _alive(pid)


def _podman_sandbox(sandboxes: Sandboxes, engine: Engine) -> tuple[SandboxInfo, str, int]:
    """A new sandbox on Podman: its record, its box's container ID, its keeper's pid."""
    if engine.name != "podman":
        pytest.skip("Podman only: Docker keeps a sandbox box's stdin open itself")
    info = sandboxes.create(limits=LimitRequest(timeout_s=20))
    container_id = str((engine.inspect_container(f"pybox-{info.sandbox_id}") or {})["Id"])
    return info, container_id, _keeper_pid(container_id)


def test_on_podman_a_keeper_holds_the_box_s_input_and_goes_with_the_box(
    sandboxes: Sandboxes, engine: Engine
) -> None:
    info, container_id, pid = _podman_sandbox(sandboxes, engine)
    # Not this process's child: the keeper detached (its own session, forked away).
    assert Path(f"/proc/{pid}/stat").read_text().split()[3] != str(os.getpid())
    for n in range(3):  # each run is another connection to the keeper
        outcome = sandboxes.run(info.sandbox_id, code(f"print({n})"))
        assert outcome.stdout == f"{n}\n".encode(), outcome.stderr
    sandboxes.destroy(info.sandbox_id)
    assert engine.inspect_container(container_id) is None
    assert _gone_within(pid, 10), "the keeper outlived its box"
    assert not keeper_socket_path(container_id).exists()


def test_on_podman_a_killed_keeper_ends_the_sandbox_and_says_so(
    sandboxes: Sandboxes, engine: Engine
) -> None:
    info, container_id, pid = _podman_sandbox(sandboxes, engine)
    os.kill(pid, signal.SIGKILL)  # this test's own pybox started it
    assert _gone_within(pid, 10)
    # Podman closes the box's input with the keeper's connection: the box ends.
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        state = (engine.inspect_container(container_id) or {}).get("State") or {}
        if not state.get("Running"):
            break
        time.sleep(0.2)
    with pytest.raises(SandboxNotFound, match="keeper"):
        sandboxes.run(info.sandbox_id, code("print(1)"))
    # The ended box is removed at once, its record closed, nothing left.
    assert engine.inspect_container(container_id) is None
    assert sandboxes.get(info.sandbox_id).state == "destroyed"


# Start-up code that answers for pybox's file program, if it ever runs in it: a
# forged read, an empty listing and an empty digest (what would hide a backdoor).
FORGER = r"""
import os, sys
if os.path.basename(sys.argv[0]) == "_pybox_files.py":
    sys.stdout.write({"read": "FORGED", "list": "[]", "digest": "[]"}.get(sys.argv[1], ""))
    sys.stdout.flush()
    sys.stderr.write('{"ok": true, "size_bytes": 6, "entries": 0, "complete": true, "files": 0}\n')
    sys.stderr.flush()
    os._exit(0)
"""
# Where the agent's code leaves it (HOME is the workspace): the user site's
# usercustomize, a `.pth` there that imports it, a module beside pybox's script
# named like one it imports (the workspace was the script's folder on sys.path).
PLANTS = {
    "usercustomize": "import site; put(site.getusersitepackages(), 'usercustomize.py', FORGER)",
    "user_site_pth": (
        "import site; put(site.getusersitepackages(), '_forge.py', FORGER); "
        "put(site.getusersitepackages(), 'forge.pth', 'import _forge\\n')"
    ),
    "stdlib_shadow": "put('.', 'json.py', FORGER)",
}
PLANTER = """
import os
def put(folder, name, text):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, name), 'w') as handle:
        handle.write(text)
FORGER = {forger!r}
{plant}
put('.', 'truth.txt', 'the truth')
"""


def plant(sandboxes: Sandboxes, sandbox_id: str, *plants: str) -> None:
    for name in plants:
        source = PLANTER.format(forger=FORGER, plant=PLANTS.get(name, name))
        done = sandboxes.run(sandbox_id, code(source))
        assert done.receipt.status.value == "succeeded", done.stderr


def assert_true_answers(sandboxes: Sandboxes, sandbox_id: str, planted: set[str]) -> None:
    assert sandboxes.read_file(sandbox_id, "truth.txt") == b"the truth"
    files, complete = sandboxes.list_files(sandbox_id)
    assert complete and {"truth.txt", *planted} <= {f.path for f in files}
    (listing,) = [
        r
        for r in sandboxes.store.list_runs(sandbox_id=sandbox_id)
        if r.kind == "sandbox.list_files"
    ][-1:]
    assert listing.receipt is not None
    program = listing.receipt["configured"]["program"]
    assert program["kind"] == "pybox_files"
    assert program["interpreter_argv"][1:] == ["-I", "-S", "_pybox_files.py"]


@pytest.mark.parametrize("where", sorted(PLANTS))
def test_start_up_code_the_agent_planted_never_runs_in_pybox_s_file_program(
    sandboxes: Sandboxes, sandbox_id: str, where: str
) -> None:
    plant(sandboxes, sandbox_id, where)
    planted = {
        "usercustomize": "usercustomize.py",
        "user_site_pth": "forge.pth",
        "stdlib_shadow": "json.py",
    }[where]
    files = {f.path for f in sandboxes.list_files(sandbox_id)[0]}
    assert [path for path in files if path.endswith("/" + planted) or path == planted]
    assert_true_answers(sandboxes, sandbox_id, set())
    # The agent's own program still gets its site (the plant runs there: its answer).
    caller = sandboxes.run(
        sandbox_id, code("import sys; print(sys.flags.isolated, sys.flags.no_site)")
    )
    assert caller.stdout == b"0 0\n"
    assert caller.receipt.configured.program is not None
    assert caller.receipt.configured.program.kind == "caller"


def test_a_sitecustomize_and_a_pth_in_the_installed_libraries_never_run_in_pybox_s_programs(
    sandboxes: Sandboxes, engine: Engine
) -> None:
    # .pybox-packages is on the caller's PYTHONPATH once libraries are installed.
    info = sandboxes.create(libraries=["six"])
    try:
        plant(
            sandboxes,
            info.sandbox_id,
            "put('.pybox-packages', 'sitecustomize.py', FORGER); "
            "put('.pybox-packages', '_forge.py', FORGER); "
            "put('.pybox-packages', 'forge.pth', 'import _forge\\n')",
        )
        assert_true_answers(
            sandboxes,
            info.sandbox_id,
            {".pybox-packages/sitecustomize.py", ".pybox-packages/forge.pth"},
        )
        # exec's wrapper starts isolated too, and the command it becomes still
        # finds the libraries (and the caller's code runs the sitecustomize).
        command = sandboxes.exec(
            info.sandbox_id, ["python3", "-c", "import six, sys; print(six.__name__)"]
        )
        assert command.stdout == b"six\n", command.stderr
        assert command.receipt.configured.program is not None
        assert command.receipt.configured.program.interpreter_argv[1:3] == ("-I", "-S")
    finally:
        sandboxes.destroy(info.sandbox_id)
    assert engine.inspect_container(f"pybox-{info.sandbox_id}") is None
