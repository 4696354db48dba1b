"""`pybox.Sandbox` and `pybox sandbox ...` end to end on the real engine.

Every test destroys what it made and then asks the engine for the sandbox's
box by name (`pybox-<sandbox id>`): it must be gone.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import pybox
from pybox._core.posture import LABEL_SANDBOX
from pybox._engine import Engine
from pybox._features.sandboxes.records import store_tag
from pybox._orchestration.session import Session
from tests.integration.conftest import run_cli
from tests.unit.test_receipt_contract import EXEC_SCHEMA, _validator


@pytest.fixture
def env(state_dir: Path) -> dict[str, str]:
    environ = dict(os.environ, PYBOX_STATE_DIR=str(state_dir))
    environ.pop("PYBOX_CONFIG", None)
    return environ


@pytest.fixture
def made(session: Session, engine: Engine) -> Iterator[list[str]]:
    """The ids a test made: destroyed at its end if it did not, then checked gone."""
    ids: list[str] = []
    yield ids
    for sandbox_id in ids:
        try:
            session.sandboxes().destroy(sandbox_id)
        except pybox.SandboxNotFound:
            pass
    left = [i for i in ids if engine.inspect_container(f"pybox-{i}") is not None]
    assert left == [], f"sandbox boxes left behind: {left}"


def box_exists(engine: Engine, sandbox_id: str) -> bool:
    return engine.inspect_container(f"pybox-{sandbox_id}") is not None


# -- the Python API -------------------------------------------------------------------


def test_api_create_write_run_exec_read_destroy(
    env: dict[str, str], engine: Engine, made: list[str]
) -> None:
    with pybox.Sandbox(environ=env, timeout_s=20) as sb:
        made.append(sb.sandbox_id)
        assert box_exists(engine, sb.sandbox_id)
        assert sb.info().state == "ready" and sb.info().limits.timeout_s == 20
        sb.write_file("data/in.txt", "hello\n")
        result = sb.run(
            "text = open('data/in.txt').read()\n"
            "open('out.txt', 'w').write(text.upper())\n"
            "print(text.strip(), 'read')\n"
        )
        assert (result.status, result.exit_code, result.stdout) == ("succeeded", 0, "hello read\n")
        assert result.receipt.run_id
        listed = sb.exec(["ls", "-1", "data"])
        assert listed.ok and listed.stdout == "in.txt\n"
        assert sb.read_file("out.txt") == b"HELLO\n"
        names = {f.path for f in sb.list_files()}
        assert {"data", "data/in.txt", "out.txt"} <= names
        failed = sb.run("import sys; print('x'); sys.exit(4)", timeout_s=5)
        assert (failed.status, failed.exit_code) == ("failed", 4)
        slow = sb.run("import time; time.sleep(30)", timeout_s=1)
        assert slow.status == "timed_out"
        assert sb.exec(["cat", "out.txt"]).stdout == "HELLO\n"  # still usable
        with pytest.raises(pybox.InvalidRequest, match="leaves the sandbox's workspace"):
            sb.read_file("../../etc/passwd")
    assert not box_exists(engine, sb.sandbox_id)
    assert sb.destroy() is False  # idempotent
    with pytest.raises(pybox.SandboxNotFound):
        pybox.Sandbox.attach(sb.sandbox_id, environ=env)


ATTACH = """
import json, sys
import pybox
with pybox.Sandbox.attach(sys.argv[1]) as sb:
    result = sb.run("print(open('from_parent.txt').read()); open('from_child.txt', 'w').write('c')")
print(json.dumps({"stdout": result.stdout, "status": result.status}))
"""


def test_attach_from_another_process(env: dict[str, str], engine: Engine, made: list[str]) -> None:
    with pybox.Sandbox(environ=env) as sb:
        made.append(sb.sandbox_id)
        sb.write_file("from_parent.txt", "p")
        child = subprocess.run(
            [sys.executable, "-c", ATTACH, sb.sandbox_id],
            env=env,
            capture_output=True,
            timeout=120,
            check=False,
        )
        assert child.returncode == 0, child.stderr.decode()
        assert json.loads(child.stdout) == {"stdout": "p\n", "status": "succeeded"}
        # The child only let go of it: still live, with the child's file in it.
        assert sb.info().state == "ready"
        assert sb.read_file("from_child.txt") == b"c"
        unknown = subprocess.run(
            [sys.executable, "-c", ATTACH, "sbx-000000000000"],
            env=env,
            capture_output=True,
            timeout=120,
            check=False,
        )
        assert unknown.returncode == 1
        assert b"SandboxNotFound" in unknown.stderr
    assert not box_exists(engine, sb.sandbox_id)


# -- the command line -----------------------------------------------------------------


def test_cli_create_run_exec_cp_ls_destroy_list(
    env: dict[str, str], engine: Engine, made: list[str], tmp_path: Path
) -> None:
    created = run_cli(["sandbox", "create", "--timeout", "20", "--memory", "256"], env)
    assert created.returncode == 0, created.stderr.decode()
    sandbox_id = created.stdout.decode().strip()
    made.append(sandbox_id)
    assert sandbox_id.startswith("sbx-") and box_exists(engine, sandbox_id)
    assert "256 MiB of memory" in created.stderr.decode()

    host_in = tmp_path / "in.txt"
    host_in.write_text("from the host\n")
    copied = run_cli(["sandbox", "cp", str(host_in), f"{sandbox_id}:data/in.txt"], env)
    assert copied.returncode == 0, copied.stderr.decode()

    program = tmp_path / "job.py"
    program.write_text(
        "import sys\n"
        "print(open('data/in.txt').read().strip())\n"
        "open('result.txt', 'w').write('done')\n"
        "open('bad\\x1b[31m\\rname.txt', 'w').write('x')\n"
        "sys.exit(5)\n"
    )
    ran = run_cli(["sandbox", "run", sandbox_id, str(program)], env)
    assert ran.returncode == 5, ran.stderr.decode()  # the program's exit code, as `pybox exec`
    assert ran.stdout == b"from the host\n"
    assert ran.stderr.decode().startswith("pybox: failed, exit 5")
    # The box stays on purpose: the summary says so, never that its removal failed.
    assert "; kept (sandbox)" in ran.stderr.decode()
    assert "removal NOT confirmed" not in ran.stderr.decode()

    as_json = run_cli(["sandbox", "run", sandbox_id, "-", "--json"], env, stdin=b"print(7)\n")
    assert as_json.returncode == 0
    record = json.loads(as_json.stdout)
    _validator(EXEC_SCHEMA).validate(record)
    assert record["stdout"] == "7\n"
    assert record["receipt"]["observed_by_pybox"]["box_kept"] == "sandbox"
    assert record["receipt"]["observed_by_engine"]["removal_confirmed"] is False

    listed = run_cli(["sandbox", "exec", sandbox_id, "--", "ls", "-1", "data"], env)
    assert (listed.returncode, listed.stdout) == (0, b"in.txt\n")
    failing = run_cli(["sandbox", "exec", sandbox_id, "--", "sh", "-c", "exit 9"], env)
    assert failing.returncode == 9
    slow = run_cli(["sandbox", "exec", sandbox_id, "--timeout", "1", "--", "sleep", "30"], env)
    assert slow.returncode == 124

    back = tmp_path / "result.txt"
    fetched = run_cli(["sandbox", "cp", f"{sandbox_id}:result.txt", str(back)], env)
    assert fetched.returncode == 0 and back.read_text() == "done"
    again = run_cli(["sandbox", "cp", f"{sandbox_id}:result.txt", str(back)], env)
    assert again.returncode == 2 and b"--force" in again.stderr
    to_stdout = run_cli(["sandbox", "cp", f"{sandbox_id}:data/in.txt", "-"], env)
    assert to_stdout.stdout == b"from the host\n"

    ls = run_cli(["sandbox", "ls", sandbox_id], env)
    assert ls.returncode == 0
    shown = ls.stdout.decode()
    assert b"\x1b" not in ls.stdout and b"\r" not in ls.stdout
    assert "bad\\x1b[31m\\rname.txt" in shown
    assert {line.split()[-1] for line in shown.splitlines()} >= {
        "data",
        "data/in.txt",
        "result.txt",
    }

    every = run_cli(["sandbox", "list", "--json"], env)
    assert sandbox_id in [s["sandbox_id"] for s in json.loads(every.stdout)["sandboxes"]]

    destroyed = run_cli(["sandbox", "destroy", sandbox_id], env)
    assert destroyed.returncode == 0
    assert destroyed.stdout.decode().startswith(f"destroyed sandbox {sandbox_id}")
    assert not box_exists(engine, sandbox_id)
    repeated = run_cli(["sandbox", "destroy", sandbox_id], env)
    assert repeated.returncode == 0 and b"already destroyed" in repeated.stdout
    every = run_cli(["sandbox", "list", "--json"], env)
    assert sandbox_id not in [s["sandbox_id"] for s in json.loads(every.stdout)["sandboxes"]]
    gone = run_cli(["sandbox", "exec", sandbox_id, "--", "ls"], env)
    assert gone.returncode == 2 and b"destroyed" in gone.stderr


def test_cli_refusals_make_nothing(env: dict[str, str], engine: Engine, state_dir: Path) -> None:
    # Only this state directory's sandbox boxes: other suites may run beside this one.
    ours = {LABEL_SANDBOX: store_tag(state_dir)}
    before = {c["Id"] for c in engine.list_containers(ours)}
    over = run_cli(["sandbox", "create", "--memory", "999999"], env)
    assert over.returncode == 2 and over.stdout == b""
    assert b"999999 MiB of memory" in over.stderr
    unknown = run_cli(["sandbox", "ls", "sbx-000000000000"], env)
    assert unknown.returncode == 2 and b"No sandbox 'sbx-000000000000'" in unknown.stderr
    bad_path = run_cli(["sandbox", "cp", "sbx-000000000000:../x", "-"], env)
    assert bad_path.returncode == 2 and b"leaves the sandbox's workspace" in bad_path.stderr
    assert {c["Id"] for c in engine.list_containers(ours)} - before == set()
