"""Every real run lands in pybox's store: the receipt, a redacted request and an
audit entry, also when several pybox processes run at once (real engine)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from pybox._features.store import DB_NAME, Store
from tests.integration.conftest import run_cli

SECRET = "integration-secret-value-5512"


def test_an_exec_run_is_recorded_and_shown_and_its_env_value_is_not(
    cli_env: dict[str, str], state_dir: Path
) -> None:
    done = run_cli(
        ["exec", "--json", "--env", f"GREETING={SECRET}", "-", "--", "one"],
        cli_env,
        stdin=b"import os\nprint(len(os.environ['GREETING']))\n",
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    run_id = result["receipt"]["run_id"]
    assert result["stdout"] == f"{len(SECRET)}\n"

    listed = run_cli(["runs", "list", "--json", "--limit", "5"], cli_env)
    assert listed.returncode == 0, listed.stderr
    (run,) = [r for r in json.loads(listed.stdout)["runs"] if r["run_id"] == run_id]
    assert (run["kind"], run["status"], run["exit_code"]) == ("run", "succeeded", 0)
    assert run["request"]["env"] == ["GREETING"] and run["request"]["argv"] == ["one"]

    stored = run_cli(["runs", "receipt", run_id[:8]], cli_env)
    assert stored.returncode == 0, stored.stderr
    assert json.loads(stored.stdout) == result["receipt"]
    shown = run_cli(["runs", "show", run_id], cli_env)
    assert shown.returncode == 0 and b"GREETING (names only" in shown.stdout

    verified = run_cli(["audit", "verify"], cli_env)
    assert verified.returncode == 0, verified.stdout
    assert verified.stdout.startswith(b"audit chain intact: ")
    tail = json.loads(run_cli(["audit", "tail", "--json", "-n", "50"], cli_env).stdout)
    (entry,) = [e for e in tail["entries"] if e["subject"] == run_id]
    assert entry["details"] == {"status": "succeeded", "image": "stdlib", "exit_code": 0}

    for path in state_dir.iterdir():
        if path.name.startswith(DB_NAME):
            assert SECRET.encode() not in path.read_bytes(), path


def test_runs_of_several_processes_at_once_are_all_recorded_in_one_chain(
    cli_env: dict[str, str], state_dir: Path
) -> None:
    store = Store.open(state_dir)
    before = store.verify_audit().entries
    processes = [
        subprocess.Popen(
            [sys.executable, "-m", "pybox", "exec", "--json", "-"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=cli_env,
        )
        for _ in range(4)
    ]
    run_ids = []
    for number, process in enumerate(processes):
        out, err = process.communicate(f"print({number})\n".encode(), timeout=180)
        assert process.returncode == 0, err
        run_ids.append(json.loads(out)["receipt"]["run_id"])
    verdict = store.verify_audit()
    assert verdict.ok, verdict
    assert verdict.entries == before + 4
    for run_id in run_ids:
        run = store.get_run(run_id)
        assert run is not None and run.status == "succeeded" and run.receipt is not None
    store.close()
