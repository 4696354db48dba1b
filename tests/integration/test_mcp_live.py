"""Live output over MCP on the real engine, through the official MCP Python SDK client.

A program prints a line, flushes, sleeps two seconds and prints another. Over
stdio (the 2025-11-25 handshake and 2026-07-28) and Streamable HTTP (the
2026-07-28 single POST and the 2025-11-25 session):
- `run_python` with a progress callback: a notification carrying the first
  line, in its fenced section, arrives before the result;
- `start_run`, then `get_result` while it runs: the first line with its
  offsets; a second `get_result` from the next offset: only the newer output;
- the run's box is gone afterwards (confirmed with the engine).
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from pybox._engine import Engine
from tests.integration.test_mcp import TOKEN, http_server, server_env

__all__ = ["http_server"]  # the fixture, shared with test_mcp

PROGRAM = "import time\nprint('first line', flush=True)\ntime.sleep(2)\nprint('second line')\n"
FIRST_SECTION = re.compile(
    r"--- begin program stdout \(untrusted, offset 0, 11 bytes\) ([0-9a-f]{16}) ---\n"
    r"first line\n--- end program stdout \1 ---"
)


async def live_output(client: Client, engine: Engine) -> None:
    notices: list[tuple[float, str]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        notices.append((time.monotonic(), message or ""))

    result = await client.call_tool("run_python", {"code": PROGRAM}, progress_callback=on_progress)
    answered = time.monotonic()
    structured = result.structured_content
    assert structured is not None and structured["status"] == "succeeded", result
    assert structured["stdout"] == "first line\nsecond line\n"
    first = [at for at, message in notices if FIRST_SECTION.search(message)]
    assert first, [m for _, m in notices]
    assert answered - first[0] > 1.0  # seen while the program slept, well before the end
    await gone(engine, structured["receipt"])

    started = await client.call_tool("start_run", {"code": PROGRAM})
    assert started.structured_content is not None
    run_id = started.structured_content["run_id"]
    deadline = time.monotonic() + 30
    while True:
        polled = (await client.call_tool("get_result", {"run_id": run_id})).structured_content
        assert polled is not None
        if polled["stdout"] or polled["state"] != "running":
            break
        assert time.monotonic() < deadline, "the first line never showed"
        await anyio.sleep(0.1)
    assert polled["state"] == "running"
    assert (polled["stdout"], polled["stdout_offset"], polled["stdout_next_offset"]) == (
        "first line\n",
        0,
        11,
    )
    rest = await client.call_tool(
        "get_run", {"run_id": run_id, "stdout_offset": 11, "stderr_offset": 0, "wait_s": 30}
    )
    later = rest.structured_content
    assert later is not None and later["state"] == "finished" and later["status"] == "succeeded"
    assert (later["stdout"], later["stdout_offset"], later["stdout_next_offset"]) == (
        "second line\n",
        11,
        23,
    )
    assert later["stdout_bytes_total"] == 23
    await gone(engine, later["receipt"])


async def gone(engine: Engine, receipt: dict[str, Any]) -> None:
    observed = receipt["observed_by_engine"]
    assert observed["removal_confirmed"] is True
    deadline = time.monotonic() + 30
    while engine.inspect_container(observed["container_id"]) is not None:
        assert time.monotonic() < deadline, "the run's box is still there"
        await anyio.sleep(0.2)


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
def test_live_output_over_stdio(
    mode: str, state_dir: Path, engine: Engine, engine_name: str
) -> None:
    server = StdioServerParameters(
        command=sys.executable, args=["-m", "pybox", "mcp"], env=server_env(state_dir, engine_name)
    )

    async def main() -> None:
        async with Client(server, mode=mode) as client:
            await live_output(client, engine)

    anyio.run(main)


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_live_output_over_streamable_http(http_server: str, engine: Engine, mode: str) -> None:
    async def main() -> None:
        http = create_mcp_http_client(headers={"Authorization": f"Bearer {TOKEN}"})
        transport = streamable_http_client(http_server, http_client=http)
        async with http, Client(transport, mode=mode) as client:
            await live_output(client, engine)

    anyio.run(main)
