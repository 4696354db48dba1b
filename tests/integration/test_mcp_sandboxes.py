"""An agent's loop through the official MCP SDK on the real engine: create a
sandbox, run code that fails, fix the file it needs, run again, destroy."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters

from pybox._engine import Engine
from tests.integration.test_mcp import server_env


def test_create_run_fix_run_destroy_over_stdio(
    state_dir: Path, engine: Engine, engine_name: str
) -> None:
    server = StdioServerParameters(
        command=sys.executable, args=["-m", "pybox", "mcp"], env=server_env(state_dir, engine_name)
    )

    async def main() -> str:
        async with Client(server) as client:
            created = await client.call_tool("create_sandbox", {"limits": {"timeout_s": 20}})
            assert created.is_error is False, created
            assert created.structured_content is not None
            sandbox_id = created.structured_content["sandbox_id"]
            try:
                assert created.structured_content["limits"]["timeout_s"] == 20
                failed = await client.call_tool(
                    "run", {"sandbox_id": sandbox_id, "code": "import helper\nprint(helper.X)"}
                )
                assert failed.is_error is True
                assert failed.structured_content is not None
                assert failed.structured_content["success"] is False
                assert "ModuleNotFoundError" in failed.structured_content["stderr"]
                wrote = await client.call_tool(
                    "write_sandbox_file",
                    {"sandbox_id": sandbox_id, "path": "helper.py", "content": "X = 42\n"},
                )
                assert wrote.is_error is False, wrote
                fixed = await client.call_tool(
                    "run", {"sandbox_id": sandbox_id, "code": "import helper\nprint(helper.X)"}
                )
                assert fixed.is_error is False, fixed
                assert fixed.structured_content is not None
                assert fixed.structured_content["stdout"] == "42\n"
                assert fixed.structured_content["sandbox_id"] == sandbox_id
                with_six = await client.call_tool(
                    "run",
                    {
                        "sandbox_id": sandbox_id,
                        "code": "import six\nprint(six.__name__)",
                        "libraries": ["six"],
                    },
                )
                assert with_six.is_error is False, with_six
                assert with_six.structured_content is not None
                assert with_six.structured_content["stdout"] == "six\n"
                installed = with_six.structured_content["receipt"]["configured"]["libraries"]
                assert [p["name"] for p in installed] == ["six"]
                receipt = await client.read_resource(fixed.structured_content["resource_uri"])
                assert fixed.structured_content["run_id"] in str(receipt.contents[0])
                escaped = await client.call_tool(
                    "read_sandbox_file", {"sandbox_id": sandbox_id, "path": "../../etc/passwd"}
                )
                assert escaped.is_error is True
                listed = await client.call_tool("list_sandboxes", {})
                assert listed.structured_content is not None
                assert sandbox_id in [
                    s["sandbox_id"] for s in listed.structured_content["sandboxes"]
                ]
            finally:
                destroyed = await client.call_tool("destroy_sandbox", {"sandbox_id": sandbox_id})
            assert destroyed.is_error is False, destroyed
            again = await client.call_tool("destroy_sandbox", {"sandbox_id": sandbox_id})
            assert again.structured_content is not None
            assert again.structured_content["was_live"] is False
            return str(sandbox_id)

    sandbox_id = anyio.run(main)
    assert engine.inspect_container(f"pybox-{sandbox_id}") is None


# The agent's code plants start-up code in the user site (HOME is the workspace)
# that would answer for pybox's file program: a forged read, an empty listing.
PLANT = r'''
import os, site
os.makedirs(site.getusersitepackages(), exist_ok=True)
with open(os.path.join(site.getusersitepackages(), "usercustomize.py"), "w") as handle:
    handle.write("""
import os, sys
if os.path.basename(sys.argv[0]) == "_pybox_files.py":
    sys.stdout.write("FORGED" if sys.argv[1] == "read" else "[]")
    sys.stdout.flush()
    sys.stderr.write('{"ok": true, "size_bytes": 6, "entries": 0, "complete": true}\\n')
    sys.stderr.flush()
    os._exit(0)
""")
with open("truth.txt", "w") as handle:
    handle.write("the truth")
'''


def test_an_agent_s_planted_start_up_code_cannot_forge_the_file_tools(
    state_dir: Path, engine: Engine, engine_name: str
) -> None:
    server = StdioServerParameters(
        command=sys.executable, args=["-m", "pybox", "mcp"], env=server_env(state_dir, engine_name)
    )

    async def main() -> None:
        async with Client(server) as client:
            created = await client.call_tool("create_sandbox", {"limits": {"timeout_s": 20}})
            assert created.structured_content is not None
            sandbox_id = created.structured_content["sandbox_id"]
            try:
                planted = await client.call_tool("run", {"sandbox_id": sandbox_id, "code": PLANT})
                assert planted.is_error is False, planted
                read = await client.call_tool(
                    "read_sandbox_file", {"sandbox_id": sandbox_id, "path": "truth.txt"}
                )
                assert read.structured_content is not None
                assert read.structured_content["content"] == "the truth"
                assert "isolated" in read.structured_content["source"]
                listed = await client.call_tool("list_sandbox_files", {"sandbox_id": sandbox_id})
                assert listed.structured_content is not None
                paths = {f["path"] for f in listed.structured_content["files"]}
                assert "truth.txt" in paths
                assert [p for p in paths if p.endswith("/usercustomize.py")]
                assert "isolated" in listed.structured_content["source"]
            finally:
                await client.call_tool("destroy_sandbox", {"sandbox_id": sandbox_id})

    anyio.run(main)
