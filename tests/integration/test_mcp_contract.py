"""The MCP tools' contract through the official MCP SDK client, against the real engine.

start_run answers at once with `run_id`, `status: "running"` and the effective
limits; get_result returns the finished result with the common fields
(stdout, stderr, exit_code, success, timed_out); files given with the run are
readable by their plain names from the program's working directory, and a
`.py` file among them is importable.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters

from pybox._engine import Engine
from tests.integration.test_mcp import server_env

PROGRAM = """\
import csv
import helper
rows = list(csv.reader(open("data.csv")))
print(helper.total(int(r[1]) for r in rows[1:]))
"""
FILES = [
    {"name": "data.csv", "content": "name,n\na,1\nb,2\nc,39\n"},
    {"name": "helper.py", "content": "def total(values):\n    return sum(values)\n"},
]


def stdio_server(state_dir: Path, engine_name: str, *flags: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "pybox", "mcp", "--max-memory", "256", *flags],
        env=server_env(state_dir, engine_name),
    )


def test_start_run_then_get_result_reads_files_by_plain_name(
    state_dir: Path, engine: Engine, engine_name: str
) -> None:
    async def main() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        async with Client(stdio_server(state_dir, engine_name), mode="2026-07-28") as client:
            started = await client.call_tool(
                "start_run",
                {"code": PROGRAM, "files": FILES, "limits": {"timeout_s": 60, "cpus": 0.5}},
            )
            assert started.is_error is False, started
            assert started.structured_content is not None
            run_id = started.structured_content["run_id"]
            done = await client.call_tool("get_result", {"run_id": run_id, "wait_s": 60})
            assert done.structured_content is not None
            alias = await client.call_tool("get_run", {"run_id": run_id})
            assert alias.structured_content is not None
            return started.structured_content, done.structured_content, alias.structured_content

    started, done, alias = anyio.run(main)
    assert started["status"] == "running"
    assert started["limits"]["timeout_s"] == 60 and started["limits"]["cpus"] == 0.5
    assert started["limits"]["memory_mib"] == 256  # the default, lowered with its ceiling
    assert done["state"] == "finished", done
    assert {k: done[k] for k in ("stdout", "exit_code", "success", "timed_out")} == {
        "stdout": "42\n",
        "exit_code": 0,
        "success": True,
        "timed_out": False,
    }, done.get("stderr")
    assert done["stderr"] == ""
    assert done["limits"] == started["limits"]
    assert done["receipt"]["observed_by_engine"]["removal_confirmed"] is True
    assert engine.inspect_container(done["receipt"]["observed_by_engine"]["container_id"]) is None
    assert alias["receipt"] == done["receipt"]  # get_run: the same result
    # One run id: the handle start_run gave is the receipt's, and the resources'.
    assert done["run_id"] == started["run_id"] == done["receipt"]["run_id"]
    assert done["resource_uri"] == f"pybox://runs/{started['run_id']}"


def test_run_python_timed_out_result(state_dir: Path, engine_name: str) -> None:
    async def main() -> dict[str, Any]:
        async with Client(stdio_server(state_dir, engine_name), mode="legacy") as client:
            result = await client.call_tool(
                "run_python",
                {"code": "import time\ntime.sleep(60)", "limits": {"timeout_ms": 1500}},
            )
            assert result.is_error is True and result.structured_content is not None
            content: dict[str, Any] = result.structured_content
            return content

    late = anyio.run(main)
    assert late["status"] == "timed_out" and late["timed_out"] is True
    assert late["success"] is False and late["exit_code"] is None
    assert late["limits"]["timeout_s"] == 1.5
    assert late["receipt"]["run_id"] == late["run_id"]
