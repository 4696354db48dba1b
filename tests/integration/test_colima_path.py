"""`pybox exec` end to end through the Colima code path, on this machine's real engine.

The fake `colima` (bench/fake_colima.py) is the only stand-in: its `status
--json` names this machine's engine socket as the VM's `docker_socket`, and its
`ssh -- ARGV` runs ARGV here, so pybox's VM-side sampler reads the real box's
cgroup. Everything else (tool trust checks, version check, profile read-back,
engine, box, receipt, quarantine on returned files) is the real code.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from bench.fake_colima import install_fake_colima

from pybox._engine import Engine
from tests.integration.conftest import colima_runs_docker, run_cli

PROGRAM = (
    "import os\n"
    "data = bytearray(24 * 1024 * 1024)\n"
    "open(os.path.join(os.environ['PYBOX_OUTPUT_DIR'], 'answer.txt'), 'w').write('42')\n"
    "print('answer', 42)\n"
)


def _kernel_fields_present(record: dict[str, Any]) -> set[str]:
    kernel = record["receipt"]["observed_by_kernel"]
    return {key for key, value in kernel.items() if value is not None}


def test_exec_through_colima_gives_the_same_receipt(
    engine: Engine,
    engine_name: str,
    cli_env: dict[str, str],
    state_dir: Path,
    tmp_path: Path,
) -> None:
    colima_runs_docker(engine_name)
    fake = install_fake_colima(
        tmp_path / "bin", docker_socket=f"unix://{engine.endpoint.socket_path}"
    )
    home = tmp_path / "home"
    home.mkdir()
    state = tmp_path / "state"
    state.mkdir()
    shutil.copy(state_dir / "images.json", state / "images.json")
    env = dict(
        cli_env,
        HOME=str(home),
        PYBOX_PLATFORM="colima",
        PYBOX_COLIMA=str(fake.colima),
        PYBOX_DOCKER_CLI=str(fake.docker),
        PYBOX_STATE_DIR=str(state),
    )
    env.pop("DOCKER_HOST", None)
    program = tmp_path / "answer.py"
    program.write_text(PROGRAM)

    started = run_cli(["vm", "start"], env)
    assert started.returncode == 0, started.stderr.decode()
    try:
        results = tmp_path / "results"
        run = run_cli(["exec", str(program), "--output", str(results), "--json"], env)
    finally:
        stopped = run_cli(["vm", "stop"], env)
    assert run.returncode == 0, run.stderr.decode()
    assert stopped.returncode == 0, stopped.stderr.decode()
    record = json.loads(run.stdout)
    receipt = record["receipt"]
    assert record["stdout"] == "answer 42\n"
    assert receipt["status"] == "succeeded"
    assert receipt["configured"]["engine"]["endpoint"] == f"unix://{engine.endpoint.socket_path}"
    assert receipt["observed_by_engine"]["posture_verified"] is True
    assert receipt["observed_by_engine"]["removal_confirmed"] is True
    kernel = receipt["observed_by_kernel"]
    assert kernel["samples"] >= 2  # as the box started and as the program ended
    assert kernel["memory_peak_bytes"] >= 24 * 1024 * 1024
    assert kernel["memory_limit_bytes"] == receipt["configured"]["limits"]["memory_bytes"]
    assert kernel["oom_kill_count"] == 0
    assert kernel["cpu_usage_s"] > 0
    facts = {item["fact"] for item in receipt["unknown"]}
    assert "kernel counters between samples" in facts
    assert "kernel counters" not in facts  # the box's cgroup was found inside the "VM"

    # The counters were read through `colima ssh`, as argument lists.
    reads = [argv for argv in fake.argvs() if argv[0] == "ssh"]
    assert reads and all(
        argv[:8] == ["ssh", "--profile", "pybox", "--", "grep", "-H", "-s", "^"] for argv in reads
    )
    container_id = receipt["observed_by_engine"]["container_id"]
    assert any(container_id in " ".join(argv) for argv in reads)

    # Returned files: published at once, quarantined.
    assert (results / "answer.txt").read_text() == "42"
    if hasattr(os, "getxattr"):
        mark = os.getxattr(results / "answer.txt", "user.com.apple.quarantine")
        assert mark.startswith(b"0081;") and mark.endswith(b";pybox;")

    # The same program on the local path reports the same kernel fields.
    local_env = dict(cli_env, PYBOX_STATE_DIR=str(state), HOME=str(home))
    local_env.pop("PYBOX_PLATFORM", None)
    local = run_cli(
        ["exec", str(program), "--output", str(tmp_path / "local"), "--json"], local_env
    )
    assert local.returncode == 0, local.stderr.decode()
    assert _kernel_fields_present(json.loads(local.stdout)) == _kernel_fields_present(record)

    # Nothing of the user's was written: only the profile's own folders.
    created = sorted(str(p.relative_to(home)) for p in home.rglob("*"))
    assert all(name.startswith(".colima") for name in created), created


def test_linux_setup_and_doctor_report_the_engine(cli_env: dict[str, str], state_dir: Path) -> None:
    env = dict(cli_env, PYBOX_PLATFORM="linux")
    before = (state_dir / "images.json").read_bytes()
    setup = run_cli(["setup"], env)
    assert setup.returncode == 0, setup.stderr.decode()
    text = setup.stderr.decode()
    assert "dry run: nothing will be changed" in text
    assert "platform: linux: boxes run on the local engine" in text
    assert "cgroup v" in text and "runtimes " in text and "runc" in text
    assert "boxes:  " in text and "left by runs that died" in text
    assert "Run `pybox setup --yes` to do this." in text
    assert (state_dir / "images.json").read_bytes() == before
    doctor = run_cli(["doctor", "--json"], env)
    report = json.loads(doctor.stdout)
    assert doctor.returncode == (0 if report["ok"] else 125), report["problems"]
    assert report["platform"]["pybox_platform"] == "linux"
    assert report["engine"]["cgroup_version"] in ("1", "2")
    assert "runc" in report["engine"]["runtimes"]
    assert isinstance(report["boxes"], list)
    assert report["next"]  # either the fixes, or the command to run a first box
