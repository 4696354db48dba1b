"""`pybox mcp` driven by real MCP clients, against the real engine.

The official MCP Python SDK client connects in each of its three modes over
stdio (the handshake era, 2026-07-28 adopted directly, and auto, which probes
`server/discover`), and over Streamable HTTP in both of its styles (auto,
which settles on 2026-07-28, and the legacy session). Each session lists the
tools, runs code with progress, reads the capabilities resource, and cancels
a run in flight, then checks with the engine that the run's box is gone.
The MCP Inspector CLI (from npm) lists the tools and calls run_python.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.types import TextResourceContents

from pybox._core.posture import LABEL_MANAGED, LABEL_OWNER
from pybox._engine import Engine
from pybox._frontends.mcp._tools import TOOLS
from tests.integration.conftest import engine_environ

INSPECTOR = os.environ.get("PYBOX_TEST_INSPECTOR", "@modelcontextprotocol/inspector@2.12.0")
TOKEN = "integration-token-" + "x" * 24
SLOW_PROGRAM = "import time\nprint('started', flush=True)\ntime.sleep(120)\n"


ENGINE_KEYS = ("DOCKER_HOST", "CONTAINER_HOST", "PYBOX_ENGINE")


def server_env(state_dir: Path, engine_name: str) -> dict[str, str]:
    """A `pybox mcp` server's environment: this pass's engine and its image records."""
    env = {"PYBOX_STATE_DIR": str(state_dir), "PATH": os.environ.get("PATH", "")}
    for key in ("HOME", "PYBOX_DEBUG", "PYTHONPATH"):
        if key in os.environ:
            env[key] = os.environ[key]
    pointed = engine_environ(engine_name)
    env.update({key: pointed[key] for key in ENGINE_KEYS if key in pointed})
    return env


def _parent_pid(pid: str) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])


def boxes_of_my_servers(engine: Engine) -> list[str]:
    """Boxes made by a `pybox mcp` this test process started (its children)."""
    found = []
    for container in engine.list_containers({LABEL_MANAGED: "1"}):
        owner = (container.get("Labels") or {}).get(LABEL_OWNER, "")
        parts = owner.rsplit(":", 2)
        if len(parts) == 3 and _parent_pid(parts[1]) == os.getpid():
            found.append(str(container["Id"]))
    return found


async def wait_gone(engine: Engine, container_id: str, timeout_s: float = 30.0) -> None:
    # Sleep in the event loop: the client's cancellation (a frame on stdio, closing the
    # response stream over HTTP) happens in tasks that must keep running meanwhile.
    deadline = time.monotonic() + timeout_s
    while engine.inspect_container(container_id) is not None:
        assert time.monotonic() < deadline, f"box {container_id} still exists after cancel"
        await anyio.sleep(0.2)


async def exercise(client: Client, engine: Engine) -> None:
    """What every client mode must be able to do."""
    tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    run_tools = {"run_python", "start_run", "get_result", "get_run", "stop_run"}
    assert run_tools <= set(tools) and {"create_sandbox", "run", "destroy_sandbox"} <= set(tools)

    capabilities = (await client.read_resource("pybox://capabilities")).contents[0]
    assert isinstance(capabilities, TextResourceContents)
    data = json.loads(capabilities.text)
    assert data["limits"]["ceilings"]["memory_mib"] == 256
    assert data["network"].startswith("none")

    seen: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(progress)

    code = "import time\nprint(6 * 7)\ntime.sleep(1.3)\n"
    result = await client.call_tool("run_python", {"code": code}, progress_callback=on_progress)
    assert result.is_error is False, result
    structured = result.structured_content
    assert structured is not None
    assert structured["stdout"] == "42\n" and structured["status"] == "succeeded"
    assert structured["box_removed"] is True
    assert structured["receipt"]["observed_by_engine"]["posture_verified"] is True
    assert len(seen) >= 2 and seen == sorted(seen)

    refused = await client.call_tool("run_python", {"code": "1", "limits": {"memory_mib": 512}})
    assert refused.is_error is True

    # Cancel a run in flight: its box must be removed.
    running = anyio.Event()

    async def mark_running(progress: float, total: float | None, message: str | None) -> None:
        if progress >= 1.0:
            running.set()

    async with anyio.create_task_group() as group:

        async def long_call() -> None:
            await client.call_tool(
                "run_python",
                {"code": SLOW_PROGRAM, "limits": {"timeout_s": 300}},
                progress_callback=mark_running,
            )

        group.start_soon(long_call)
        with anyio.fail_after(60):
            await running.wait()
        group.cancel_scope.cancel()

    # The stopped run is kept, with a receipt that says so.
    deadline = time.monotonic() + 30
    while True:
        resources = (await client.list_resources(cache_mode="bypass")).resources
        runs = [str(r.uri) for r in resources if str(r.uri).startswith("pybox://runs/")]
        contents = (await client.read_resource(runs[0], cache_mode="bypass")).contents[0]
        assert isinstance(contents, TextResourceContents)
        record = json.loads(contents.text)
        if record["state"] == "finished" or time.monotonic() > deadline:
            break
        await anyio.sleep(0.2)
    assert record["status"] == "stopped"
    observed = record["receipt"]["observed_by_engine"]
    assert observed["removal_confirmed"] is True
    # The engine agrees: the cancelled run's box is gone (the server's warm
    # boxes, waiting for other runs, are not this run's).
    await wait_gone(engine, observed["container_id"])


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28", "auto"])
def test_sdk_client_over_stdio(
    mode: str, state_dir: Path, engine: Engine, engine_name: str
) -> None:
    server = StdioServerParameters(
        command=sys.executable,
        args=["-m", "pybox", "mcp", "--max-memory", "256"],
        env=server_env(state_dir, engine_name),
    )

    async def main() -> str:
        async with Client(server, mode=mode) as client:
            await exercise(client, engine)
            return client.protocol_version

    version = anyio.run(main)
    assert version == ("2025-11-25" if mode == "legacy" else "2026-07-28")


@pytest.fixture
def http_server(state_dir: Path, engine_name: str) -> Iterator[str]:
    env = {**server_env(state_dir, engine_name), "PYBOX_MCP_TOKEN": TOKEN}
    process = subprocess.Popen(
        [sys.executable, "-m", "pybox", "mcp", "--http", "127.0.0.1:0", "--max-memory", "256"],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stderr is not None
    url = None
    for _ in range(20):
        line = process.stderr.readline().decode()
        found = re.search(r"at (http://\S+/mcp)", line)
        if found:
            url = found.group(1)
            break
    # Keep reading its log so the server never blocks on a full pipe.
    log: list[bytes] = []
    stderr = process.stderr
    reader = threading.Thread(target=lambda: log.extend(iter(stderr.readline, b"")))
    reader.start()
    try:
        assert url, "the server did not say where it listens"
        yield url
    finally:
        process.terminate()
        out, _ = process.communicate(timeout=60)
        reader.join(10)
        assert process.returncode == 0, b"".join(log).decode()[-3000:]
        assert out == b"", "the HTTP server wrote to stdout"


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_sdk_client_over_streamable_http(http_server: str, engine: Engine, mode: str) -> None:
    """auto: the 2026-07-28 single POST per request (cancel = closing the stream);
    legacy: the 2025-11-25 session (cancel = a POSTed notifications/cancelled)."""

    async def main() -> str:
        http = create_mcp_http_client(headers={"Authorization": f"Bearer {TOKEN}"})
        transport = streamable_http_client(http_server, http_client=http)
        async with http, Client(transport, mode=mode) as client:
            await exercise(client, engine)
            return client.protocol_version

    assert anyio.run(main) == ("2025-11-25" if mode == "legacy" else "2026-07-28")


def test_inspector_cli_lists_tools_and_runs_python(state_dir: Path, engine_name: str) -> None:
    npx = shutil.which("npx")
    if npx is None:
        pytest.skip("npx (Node.js) is not installed: the MCP Inspector CLI comes from npm")
    base = [npx, "-y", INSPECTOR, "--cli"]
    env = server_env(state_dir, engine_name)
    for key in ("PYBOX_STATE_DIR", *ENGINE_KEYS):
        if key in env:
            base += ["-e", f"{key}={env[key]}"]
    base += [sys.executable, "-m", "pybox", "mcp"]

    def inspector(*args: str) -> Any:
        done = subprocess.run(
            [*base, *args], capture_output=True, timeout=300, check=False, stdin=subprocess.DEVNULL
        )
        assert done.returncode == 0, done.stderr.decode()[-3000:]
        return json.loads(done.stdout)

    listed = inspector("--method", "tools/list")
    assert {t["name"] for t in listed["tools"]} == {tool.name for tool in TOOLS}
    assert {"run_python", "start_run", "get_result", "get_run", "stop_run", "run"} <= {
        t["name"] for t in listed["tools"]
    }
    called = inspector(
        "--method", "tools/call", "--tool-name", "run_python", "--tool-arg", "code=print(6*7)"
    )
    assert called["structuredContent"]["stdout"] == "42\n"
    assert called["structuredContent"]["status"] == "succeeded"


def test_end_of_input_stops_runs_removes_boxes_and_exits_cleanly(
    state_dir: Path, engine: Engine, engine_name: str
) -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "pybox", "mcp"],
        env=server_env(state_dir, engine_name),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdin is not None and process.stdout is not None
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"_meta": meta, "name": "start_run", "arguments": {"code": SLOW_PROGRAM}},
    }
    process.stdin.write(json.dumps(call).encode() + b"\n")
    process.stdin.flush()
    started = json.loads(process.stdout.readline())
    assert started["result"]["structuredContent"]["state"] == "running"
    deadline = time.monotonic() + 30
    while not (mine := boxes_of_my_servers(engine)):
        assert time.monotonic() < deadline, "the run's box never appeared"
        time.sleep(0.1)
    time.sleep(0.5)
    mine += boxes_of_my_servers(engine)  # the run's box and any warm boxes waiting
    out, err = process.communicate(timeout=60)  # closes its stdin: end of input
    assert process.returncode == 0, err.decode()[-2000:]
    assert out == b""  # nothing but protocol messages, and none after end of input
    for container_id in mine:
        assert engine.inspect_container(container_id) is None
