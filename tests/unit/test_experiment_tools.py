"""The experiments tool group as agents see it: Sandbox MCP's names, nothing that
exposes the engine, read/write_sandbox_file shared with the sandboxes group, and
refusals as isError results before anything is made."""

from __future__ import annotations

from typing import Any

from pybox._adapters.state import StateStore
from pybox._frontends.mcp import ServerOptions
from pybox._frontends.mcp._tools import TOOL_GROUPS, TOOLS
from tests.unit.conftest import make_session
from tests.unit.fake_engine import FakeEngine
from tests.unit.mcp_harness import Peer

SANDBOX_MCP_NAMES = {
    "create_experiment", "execute_experiment", "run_tests", "read_sandbox_file",
    "write_sandbox_file", "inspect_changes", "collect_artifacts", "get_experiment",
    "list_experiments", "get_job_status", "get_job_result", "cancel_job",
    "destroy_experiment", "compare_experiments", "check_sandbox_runtime",
}  # fmt: skip
ENGINE_WORDS = ("image", "mount", "volume", "network", "capabilit", "privileg", "docker", "socket")


def peer(engine: FakeEngine, state: StateStore, groups: tuple[str, ...] | None) -> Peer:
    return Peer(make_session(engine, state), ServerOptions(tool_groups=groups), TOOLS)


def listed(p: Peer) -> dict[str, Any]:
    p.initialize()
    return {tool["name"]: tool for tool in p.request("tools/list")["result"]["tools"]}


def _property_names(schema: Any) -> list[str]:
    found: list[str] = []
    if isinstance(schema, dict):
        for name, inner in (schema.get("properties") or {}).items():
            found.append(name)
            found += _property_names(inner)
        found += _property_names(schema.get("items"))
    return found


def test_the_group_offers_sandbox_mcps_names_and_nothing_that_names_the_engine(
    engine: FakeEngine, state: StateStore
) -> None:
    assert "experiments" in TOOL_GROUPS
    tools = listed(peer(engine, state, ("experiments",)))
    assert set(tools) == SANDBOX_MCP_NAMES
    for name, tool in tools.items():
        assert not name.startswith("docker_")
        for argument in _property_names(tool["inputSchema"]):
            assert not any(word in argument.lower() for word in ENGINE_WORDS), (name, argument)
    assert not engine.calls


def test_file_tools_are_declared_once_and_offered_by_both_groups(
    engine: FakeEngine, state: StateStore
) -> None:
    every = [tool.name for tool in TOOLS]
    assert every.count("read_sandbox_file") == 1
    sandboxes_only = listed(peer(engine, state, ("sandboxes",)))
    assert "read_sandbox_file" in sandboxes_only and "create_experiment" not in sandboxes_only
    schema = sandboxes_only["read_sandbox_file"]["inputSchema"]
    assert {"sandbox_id", "experiment_id", "path"} <= set(schema["properties"])


def test_refusals_are_results_and_make_nothing(engine: FakeEngine, state: StateStore) -> None:
    p = peer(engine, state, None)
    p.initialize()
    both = p.call(
        "read_sandbox_file", {"sandbox_id": "sbx-1", "experiment_id": "exp-1", "path": "a"}
    )["result"]
    assert both["isError"] is True and "exactly one" in both["content"][0]["text"]
    unknown = p.call("get_experiment", {"experiment_id": "nope"})["result"]
    assert unknown["isError"] is True and "not an experiment id" in unknown["content"][0]["text"]
    job = p.call("get_job_status", {"job_id": "job-000000000000"})["result"]
    assert job["isError"] is True and "no job" in job["content"][0]["text"]
    outside = p.call("create_experiment", {"project": "/etc"})["result"]
    assert outside["isError"] is True
    assert not [call for call in engine.calls if call[0] == "create_container"]


def test_create_tools_offer_egress_with_what_the_operator_allows(
    engine: FakeEngine, state: StateStore
) -> None:
    tools = listed(peer(engine, state, None))
    for name in ("create_sandbox", "create_experiment"):
        egress = tools[name]["inputSchema"]["properties"]["egress"]
        assert egress["enum"] == ["none", "packages", "open"]
        assert egress["description"].endswith("This server allows: none, packages.")
