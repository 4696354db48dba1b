"""`pybox experiment` as a user types it, on the real engine: create, a test run,
a fix written from a file, the diff, a background job followed and cancelled
from other processes, destroy; the project untouched, nothing left behind."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

from pybox._engine import Engine
from tests.integration.conftest import run_cli
from tests.integration.test_experiments import (
    EXAMPLE,
    FIXES,
    plant_credentials,
    secret_values,
    snapshot,
)


def cli(args: list[str], env: dict[str, str], stdin: bytes = b"") -> dict[str, Any]:
    done = run_cli(["experiment", *args, "--json"] if "--" not in args else
                   ["experiment", *args[: args.index("--")], "--json", *args[args.index("--"):]],
                   env, stdin)  # fmt: skip
    assert done.stdout, done.stderr
    record: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    assert record["pybox_experiment_version"] == 1
    record["_exit"] = done.returncode
    return record


def test_a_user_fixes_the_example_from_the_command_line(
    cli_env: dict[str, str], engine: Engine, tmp_path: Path
) -> None:
    roots = tmp_path / "projects"
    project = roots / "shop"
    shutil.copytree(EXAMPLE, project, symlinks=True)
    before = snapshot(project)
    refused = cli(["create", str(project)], cli_env)  # no project root allowed
    assert refused["_exit"] != 0 and "project-root" in refused["error"]["message"]
    created = cli(
        ["create", str(project), "--project-root", str(roots), "--timeout", "60"], cli_env
    )
    experiment_id = created["experiment_id"]
    try:
        assert {".env", "id_rsa"} <= {s["path"] for s in created["copy"]["skipped"]}
        tested = cli(["test", experiment_id], cli_env)
        assert tested["_exit"] == 1 and tested["tests"]["failed"] + tested["tests"]["errors"] == 3
        fix = FIXES / "decimal" / "money.py"
        cli(["write", experiment_id, "money.py", str(fix)], cli_env)
        again = cli(["test", experiment_id], cli_env)
        assert again["_exit"] == 0 and again["tests"]["failed"] == 0, again
        diff = cli(["diff", experiment_id], cli_env)
        assert [c["path"] for c in diff["modified"]] == ["money.py"]
        started = cli(["exec", experiment_id, "--background", "--", "sleep", "120"], cli_env)
        job_id = started["job_id"]
        time.sleep(1)
        running = cli(["job", job_id], cli_env)
        assert running["state"] == "running", running  # the detached worker runs it
        cancelled = cli(["cancel", job_id], cli_env)
        assert cancelled["state"] == "cancelled", cancelled
        shown = cli(["show", experiment_id], cli_env)
        assert shown["state"] == "cancelled" and shown["jobs_count"] == 3
    finally:
        final = cli(["destroy", experiment_id], cli_env)
    assert final["state"] == "destroyed" and final["was_live"] is True
    assert engine.inspect_container(f"pybox-{final['sandbox_id']}") is None
    assert snapshot(project) == before


def test_create_lists_what_was_skipped_and_destroy_says_what_is_kept(
    cli_env: dict[str, str], engine: Engine, tmp_path: Path
) -> None:
    roots = tmp_path / "projects"
    project = roots / "shop"
    shutil.copytree(EXAMPLE, project, symlinks=True)
    planted = plant_credentials(project)
    done = run_cli(["experiment", "create", str(project), "--project-root", str(roots)], cli_env)
    text = done.stdout.decode()
    assert done.returncode == 0, done.stderr
    experiment_id = text.split()[1].rstrip(":")
    try:
        shown = {
            line.split()[1].rstrip(":"): line
            for line in text.splitlines()
            if line.startswith("  skipped ")
        }
        assert planted <= set(shown), sorted(planted - set(shown))
        assert "private key" in shown["notes.txt"] and "GitHub token" in shown["src_config.py"]
        assert not any(value in text for value in secret_values())
        cli(["collect", experiment_id, "money.py"], cli_env)
    finally:
        destroyed = run_cli(["experiment", "destroy", experiment_id], cli_env)
    words = destroyed.stdout.decode()
    assert destroyed.returncode == 0 and "its copy of the project was removed" in words, words
    assert "1 artifacts" in words and "until " in words and "artifacts_budget_mib" in words
    pruned = cli(["prune"], cli_env)
    assert pruned["_exit"] == 0 and pruned["kept_experiments"] >= 1
    assert pruned["budget_bytes"] == 1024 * 1024 * 1024 and "30 days" in pruned["policy"]
    final = cli(["show", experiment_id], cli_env)
    assert final["kept"]["artifacts"] == 1 and final["kept"]["copy_removed_bytes"] > 0
