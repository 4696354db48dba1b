"""The experiments sequence driven by the official MCP SDK client over stdio, on
the real engine: three fixes of the example project, tests, diffs, a comparison
that recommends the Decimal fix, teardown, and the project untouched."""

from __future__ import annotations

import json
import shutil
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any

import anyio
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters

from pybox._engine import Engine
from tests.integration.test_experiments import (
    EXAMPLE,
    FIXES,
    plant_credentials,
    secret_values,
    snapshot,
)
from tests.integration.test_mcp import server_env


def test_agent_tries_three_fixes_over_stdio(
    state_dir: Path, engine: Engine, engine_name: str, tmp_path: Path
) -> None:
    roots = tmp_path / "projects"
    project = roots / "shop"
    shutil.copytree(EXAMPLE, project, symlinks=True)
    before = snapshot(project)
    server = StdioServerParameters(
        command=sys.executable,
        args=["-m", "pybox", "mcp", "--project-root", str(roots)],
        env=server_env(state_dir, engine_name),
    )

    async def call(client: Any, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        result = await client.call_tool(tool, args)
        assert result.structured_content is not None, (tool, result)
        structure: dict[str, Any] = result.structured_content
        return structure

    async def main() -> dict[str, Any]:
        async with Client(server) as client:
            listed = await client.list_tools()
            names = [tool.name for tool in listed.tools]
            assert {"create_experiment", "compare_experiments", "read_sandbox_file"} <= set(names)
            checked = await call(client, "check_sandbox_runtime", {})
            assert checked["engine"]["reachable"] is True
            assert checked["project_roots"] == [str(roots.resolve())]
            ids = []
            for fix in ("round", "decimal", "truncate"):
                created = await call(
                    client,
                    "create_experiment",
                    {"project": str(project), "limits": {"timeout_s": 60}},
                )
                experiment_id = created["experiment_id"]
                ids.append(experiment_id)
                skipped = {s["path"] for s in created["copy"]["skipped"]}
                assert {".env", "id_rsa"} <= skipped
                failing = await call(client, "run_tests", {"experiment_id": experiment_id})
                assert failing["tests"]["failed"] + failing["tests"]["errors"] == 3
                escaped = await client.call_tool(
                    "read_sandbox_file",
                    {"experiment_id": experiment_id, "path": "../../etc/passwd"},
                )
                assert escaped.is_error is True
                content = (FIXES / fix / "money.py").read_text()
                wrote = await client.call_tool(
                    "write_sandbox_file",
                    {"experiment_id": experiment_id, "path": "money.py", "content": content},
                )
                assert wrote.is_error is False, wrote
                await call(client, "run_tests", {"experiment_id": experiment_id})
                changes = await call(client, "inspect_changes", {"experiment_id": experiment_id})
                assert [c["path"] for c in changes["modified"]] == ["money.py"]
            background = await call(
                client,
                "execute_experiment",
                {"experiment_id": ids[0], "argv": ["sleep", "120"], "background": True},
            )
            assert background["state"] == "running"
            cancelled = await call(client, "cancel_job", {"job_id": background["job_id"]})
            assert cancelled["state"] == "cancelled"
            comparison = await call(client, "compare_experiments", {"experiment_ids": ids})
            logs = await client.read_resource(f"pybox://experiments/{ids[1]}/logs")
            logged = json.loads(logs.contents[0].text)  # type: ignore[union-attr]
            assert [job["kind"] for job in logged["jobs"]] == ["tests", "tests"]
            finals = [
                await call(client, "destroy_experiment", {"experiment_id": experiment_id})
                for experiment_id in ids
            ]
            again = await call(client, "destroy_experiment", {"experiment_id": ids[0]})
            assert again["was_live"] is False
            diff = await client.read_resource(f"pybox://experiments/{ids[1]}/diff")
            assert "Decimal" in diff.contents[0].text  # type: ignore[union-attr]
            return {"comparison": comparison, "ids": ids, "finals": finals}

    outcome = anyio.run(main)
    assert outcome["comparison"]["recommended"] == outcome["ids"][1], outcome["comparison"]
    for final in outcome["finals"]:
        assert final["state"] == "destroyed"
        assert engine.inspect_container(f"pybox-{final['sandbox_id']}") is None
    assert snapshot(project) == before


def test_an_agent_sees_what_was_skipped_and_kept_and_a_restart_prunes_past_the_age(
    state_dir: Path, engine: Engine, engine_name: str, tmp_path: Path
) -> None:
    roots = tmp_path / "projects"
    project = roots / "shop"
    shutil.copytree(EXAMPLE, project, symlinks=True)
    planted = plant_credentials(project)
    server = StdioServerParameters(
        command=sys.executable,
        args=["-m", "pybox", "mcp", "--project-root", str(roots)],
        env=server_env(state_dir, engine_name),
    )

    async def session(steps: Any) -> Any:
        async with Client(server) as client:
            return await steps(client)

    async def first(client: Any) -> dict[str, Any]:
        created = await client.call_tool("create_experiment", {"project": str(project)})
        structure: dict[str, Any] = created.structured_content
        experiment_id = structure["experiment_id"]
        text = created.content[0].text
        collected = await client.call_tool(
            "collect_artifacts", {"experiment_id": experiment_id, "paths": ["money.py"]}
        )
        assert collected.is_error is False, collected
        destroyed = await client.call_tool("destroy_experiment", {"experiment_id": experiment_id})
        return {
            "created": structure,
            "text": text,
            "destroyed": destroyed.structured_content,
            "destroyed_text": destroyed.content[0].text,
        }

    seen = anyio.run(session, first)
    skipped = {s["path"]: s["reason"] for s in seen["created"]["copy"]["skipped"]}
    assert planted <= set(skipped), sorted(planted - set(skipped))
    assert "private key" in skipped["notes.txt"] and "notes.txt" in seen["text"]
    assert not any(value in seen["text"] for value in secret_values())
    experiment_id = seen["created"]["experiment_id"]
    kept = seen["destroyed"]["kept"]
    assert kept["artifacts"] == 1 and kept["copy_removed_bytes"] > 0
    assert "copy of the project was removed" in seen["destroyed_text"]
    assert "artifacts_max_age_days" in seen["destroyed_text"]
    folder = state_dir / "experiments" / experiment_id
    assert sorted(p.name for p in folder.iterdir()) == ["artifacts", "changes.json"]

    # 31 days later (the default keeps 30), a server starting up removes them.
    connection = sqlite3.connect(str(state_dir / "pybox.sqlite3"))
    try:
        with connection:
            connection.execute(
                "UPDATE experiment_states SET at = ? WHERE experiment_id = ?",
                (time.time() - 31 * 86_400, experiment_id),
            )
    finally:
        connection.close()

    async def second(client: Any) -> dict[str, Any]:
        shown = await client.call_tool("get_experiment", {"experiment_id": experiment_id})
        report: dict[str, Any] = shown.structured_content
        return report

    report = anyio.run(session, second)
    assert not folder.exists()
    assert "older than 30 days" in report["kept"]["removed_because"]
    assert all("removed_at" in artifact for artifact in report["artifacts"])


MCP = ("-m", "pybox", "mcp", "--tools", "experiments")


def test_an_agent_cannot_read_the_servers_environment_over_stdio(
    state_dir: Path, engine: Engine, engine_name: str, tmp_path: Path
) -> None:
    """Issue 29, finding 1: a name alone copied the server's value into the box. Now
    only a name the operator listed (`--forward-env`) is forwarded; the agent's own
    NAME=value still is; the server's other values never reach the box."""
    roots = tmp_path / "projects"
    project = roots / "tiny"
    project.mkdir(parents=True)
    (project / "app.py").write_text("print('hi')\n")
    secrets = {
        "MYSQL_PWD": "server-pw-6c1e",
        "REDIS_HOST": "server-redis-3b9d",
        "PIP_INDEX_URL": "https://__token__:server-token-0d2f@index.invalid/simple",
    }
    env = {**server_env(state_dir, engine_name), **secrets, "SHOP_LISTED": "listed-51aa"}
    server = StdioServerParameters(
        command=sys.executable,
        args=[*MCP, "--project-root", str(roots), "--forward-env", "SHOP_LISTED"],
        env=env,
    )

    async def main() -> tuple[list[str], str]:
        refusals = []
        async with Client(server) as client:
            for name in secrets:
                refused = await client.call_tool(
                    "create_experiment", {"project": str(project), "env": [name]}
                )
                assert refused.is_error is True, refused
                refusals.append(refused.content[0].text)  # type: ignore[union-attr]
            created = await client.call_tool(
                "create_experiment",
                {
                    "project": str(project),
                    "env": ["SHOP_LISTED", "REDIS_HOST=agent-redis"],
                    "limits": {"timeout_s": 60},
                },
            )
            assert created.is_error is False, created
            assert created.structured_content is not None
            experiment_id = created.structured_content["experiment_id"]
            shown = await client.call_tool(
                "execute_experiment",
                {
                    "experiment_id": experiment_id,
                    "argv": [
                        "python3",
                        "-c",
                        "import json, os; print(json.dumps(dict(os.environ)))",
                    ],
                },
            )
            assert shown.structured_content is not None, shown
            await client.call_tool("destroy_experiment", {"experiment_id": experiment_id})
            return refusals, str(shown.structured_content["stdout"])

    refusals, stdout = anyio.run(main)
    for name, text in zip(secrets, refusals, strict=True):
        assert f'forward_env = ["{name}"]' in text and f"--forward-env {name}" in text, text
    box_environ = json.loads(stdout)
    assert box_environ["SHOP_LISTED"] == "listed-51aa"  # the operator listed it
    assert box_environ["REDIS_HOST"] == "agent-redis"  # the agent's own value
    for value in (*secrets.values(), "server-token-0d2f"):
        assert value not in stdout
        assert not any(value in text for text in refusals)
