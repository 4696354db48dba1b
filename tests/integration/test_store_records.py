"""Every real run lands in pybox's store: the receipt, a redacted request and an
audit entry, also when several pybox processes run at once (real engine)."""

from __future__ import annotations

import json
import shutil
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
    chained = entry["details"].pop("record_sha256")  # the stored record's hash, chained
    assert entry["details"] == {
        "status": "succeeded",
        "image": "stdlib",
        "exit_code": 0,
        "run_id": run_id,
    }
    assert len(chained) == 64

    # Read in a process of its own: this one may hold the store open, and closing any
    # descriptor of the file would drop SQLite's locks on it here.
    found = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, pathlib\n"
            "for p in pathlib.Path(sys.argv[1]).iterdir():\n"
            "    if p.name.startswith(sys.argv[2]) and sys.argv[3].encode() in p.read_bytes():\n"
            "        print(p)",
            str(state_dir),
            DB_NAME,
            SECRET,
        ],
        capture_output=True,
        check=True,
    )
    assert found.stdout == b"", found.stdout


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
    assert verdict.runs is not None and not set(run_ids) & set(verdict.runs.not_covered)
    for run_id in run_ids:
        run = store.get_run(run_id)
        assert run is not None and run.status == "succeeded" and run.receipt is not None
    store.close()


def test_a_real_runs_receipt_edited_in_the_store_fails_audit_verify(
    cli_env: dict[str, str], state_dir: Path, tmp_path: Path
) -> None:
    """A failed run made `succeeded` by editing the file: `audit verify` exits 1 (in a
    state directory of its own: the session's store stays intact for other tests)."""
    own = tmp_path / "state"
    own.mkdir(mode=0o700)
    shutil.copy(state_dir / "images.json", own / "images.json")
    cli_env = {**cli_env, "PYBOX_STATE_DIR": str(own)}
    state_dir = own
    done = run_cli(["exec", "--json", "-"], cli_env, stdin=b"raise SystemExit(3)\n")
    assert done.returncode == 3, done.stderr
    run_id = json.loads(done.stdout)["receipt"]["run_id"]
    assert run_cli(["audit", "verify"], cli_env).returncode == 0
    # In a process of its own (see above: this one must not touch the file's locks).
    subprocess.run(
        [
            sys.executable,
            "-c",
            "import sqlite3, sys\n"
            "c = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
            "c.execute(\"UPDATE runs SET status = 'succeeded', receipt = replace(receipt, "
            '\'\\"failed\\"\', \'\\"succeeded\\"\') WHERE run_id = ?", (sys.argv[2],))\n'
            "c.close()\n",
            str(state_dir / DB_NAME),
            run_id,
        ],
        check=True,
    )
    verified = run_cli(["audit", "verify"], cli_env)
    assert verified.returncode == 1, verified.stdout
    assert f"run {run_id}'s stored record was changed".encode() in verified.stdout
