"""The experiments tool group as agents see it: Sandbox MCP's names, nothing that
exposes the engine, read/write_sandbox_file shared with the sandboxes group, and
refusals as isError results before anything is made."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from pybox._adapters.state import StateStore
from pybox._core.experiment_settings import ExperimentSettings
from pybox._core.limits import Policy
from pybox._frontends.mcp import ServerOptions, build_dispatcher
from pybox._frontends.mcp._tools import TOOL_GROUPS, TOOLS
from tests.unit.conftest import make_session
from tests.unit.fake_engine import FakeEngine
from tests.unit.mcp_harness import MODERN_META, Peer

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


# -- whose environment a name alone reads (issue 29, finding 1) -----------------------

# The server process's environment: values an agent must never get by naming them.
SERVER_ENV = {"MYSQL_PWD": "s3rver-pw", "REDIS_HOST": "cache.internal", "CI": "true"}


class Served:
    """An MCP server over a session whose process environment is SERVER_ENV. Creating
    an experiment goes through the real service and env policy; only the sandbox is a
    stand-in (made without an engine, the copy not unpacked)."""

    def __init__(
        self,
        engine: FakeEngine,
        state: StateStore,
        tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch,
        *,
        config_forward: tuple[str, ...] = (),
        flag_forward: tuple[str, ...] = (),
        allow_credential_env: bool = False,
    ) -> None:
        listed = {"forward_env": config_forward} if config_forward else {}
        self.session = make_session(
            engine,
            state,
            Policy(allow_credential_env=allow_credential_env),
            environ=dict(SERVER_ENV),
            **listed,
        )
        (tmp_path / "roots" / "shop").mkdir(parents=True)
        (tmp_path / "roots" / "shop" / "app.py").write_text("print('hi')\n")
        self.project = str(tmp_path / "roots" / "shop")
        self.session.experiment_settings = ExperimentSettings(
            project_roots=(str(tmp_path / "roots"),)
        )
        self.experiments = self.session.experiments()
        self.sandboxes_made: list[str] = []

        def create(**_: Any) -> Any:
            self.sandboxes_made.append(f"sbx-{len(self.sandboxes_made)}")
            return SimpleNamespace(sandbox_id=self.sandboxes_made[-1])

        monkeypatch.setattr(self.experiments.sandboxes, "create", create)
        monkeypatch.setattr(self.experiments, "_unpack", lambda sandbox_id, tar_path: None)
        # Only when asked, so that this harness runs on the code before the fix too.
        self.options = ServerOptions(forward_env=flag_forward) if flag_forward else ServerOptions()

    def peer(self) -> Peer:
        p = Peer(self.session, self.options, TOOLS)
        p.initialize()
        return p

    def forwarded(self, result: dict[str, Any]) -> dict[str, str]:
        """The variables the experiment's commands get (held in memory, never stored)."""
        assert result["isError"] is False, result
        return dict(self.experiments._env[result["structuredContent"]["experiment_id"]])


def _text(result: dict[str, Any]) -> str:
    return "\n".join(part["text"] for part in result["content"])


@pytest.mark.parametrize("name", ["MYSQL_PWD", "REDIS_HOST", "CI", "NOT_SET_ON_THE_SERVER"])
def test_an_agent_cannot_copy_the_servers_environment_by_name(
    engine: FakeEngine,
    state: StateStore,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
) -> None:
    served = Served(engine, state, tmp_path, monkeypatch)
    result = served.peer().call("create_experiment", {"project": served.project, "env": [name]})
    result = result["result"]
    assert result["isError"] is True
    text = _text(result)
    assert f"Environment variable {name}" in text
    assert f'forward_env = ["{name}"]' in text and f"--forward-env {name}" in text
    assert "s3rver-pw" not in text and "cache.internal" not in text
    assert served.sandboxes_made == []  # refused before anything was made


def test_the_operator_lists_the_names_agents_may_forward(
    engine: FakeEngine, state: StateStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    served = Served(
        engine, state, tmp_path, monkeypatch, config_forward=("REDIS_HOST",), flag_forward=("CI",)
    )
    p = served.peer()
    tools = {tool["name"]: tool for tool in p.request("tools/list")["result"]["tools"]}
    described = tools["create_experiment"]["inputSchema"]["properties"]["env"]["description"]
    assert "here: CI, REDIS_HOST" in described
    checked = p.call("check_sandbox_runtime", {})["result"]["structuredContent"]
    assert checked["forward_env"] == ["CI", "REDIS_HOST"]
    result = p.call(
        "create_experiment",
        {"project": served.project, "env": ["REDIS_HOST", "CI", "MYSQL_HOST=db.internal"]},
    )["result"]
    assert served.forwarded(result) == {
        "REDIS_HOST": "cache.internal",
        "CI": "true",
        "MYSQL_HOST": "db.internal",
    }
    # A name the operator did not list stays refused on the same server.
    other = p.call("create_experiment", {"project": served.project, "env": ["MYSQL_PWD"]})
    assert other["result"]["isError"] is True and "forward_env" in _text(other["result"])


def test_a_value_from_the_agent_passes_without_any_list(
    engine: FakeEngine, state: StateStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    served = Served(engine, state, tmp_path, monkeypatch)
    result = served.peer().call(
        "create_experiment", {"project": served.project, "env": ["REDIS_HOST=agent-side"]}
    )["result"]
    assert served.forwarded(result) == {"REDIS_HOST": "agent-side"}


def test_a_listed_credential_also_needs_allow_credential_env(
    engine: FakeEngine, state: StateStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    listed = ("MYSQL_PWD",)
    refused = Served(engine, state, tmp_path / "a", monkeypatch, config_forward=listed)
    result = refused.peer().call(
        "create_experiment", {"project": refused.project, "env": ["MYSQL_PWD"]}
    )["result"]
    assert result["isError"] is True
    assert "MYSQL_PWD looks like a credential" in _text(result) and "s3rver" not in _text(result)
    allowed = Served(
        engine,
        state,
        tmp_path / "b",
        monkeypatch,
        allow_credential_env=True,
        config_forward=listed,
    )
    result = allowed.peer().call(
        "create_experiment", {"project": allowed.project, "env": ["MYSQL_PWD"]}
    )["result"]
    assert allowed.forwarded(result) == {"MYSQL_PWD": "s3rver-pw"}


def test_over_http_too_the_servers_environment_stays_with_the_server(
    engine: FakeEngine, state: StateStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pybox._frontends.mcp._http.server import HttpServer
    from pybox._frontends.mcp._http.settings import HttpSettings
    from tests.unit.test_mcp_transports import MODERN_HEADERS, TOKEN, post

    served = Served(engine, state, tmp_path, monkeypatch, flag_forward=("CI",))
    server = HttpServer(
        HttpSettings("127.0.0.1", 0, TOKEN), build_dispatcher(served.session, served.options)
    )
    thread = threading.Thread(target=server.serve, daemon=True)
    thread.start()
    try:
        headers = {**MODERN_HEADERS, "Mcp-Method": "tools/call", "Mcp-Name": "create_experiment"}
        results: list[dict[str, Any]] = []
        for env in (["MYSQL_PWD"], ["CI"]):
            call = {
                "jsonrpc": "2.0",
                "id": len(results) + 1,
                "method": "tools/call",
                "params": {
                    "_meta": MODERN_META,
                    "name": "create_experiment",
                    "arguments": {"project": served.project, "env": env},
                },
            }
            status, _, body = post(server, call, headers)
            assert status == 200
            chunks = [c for c in body.split(b"\n\n") if c.strip()]
            last = chunks[-1].split(b"data: ", 1)[-1]
            results.append(json.loads(last)["result"])
    finally:
        server.shutdown()
        thread.join(10)
    refused, forwarded = results
    assert refused["isError"] is True and "--forward-env MYSQL_PWD" in _text(refused)
    assert "s3rver-pw" not in json.dumps(refused)
    assert served.forwarded(forwarded) == {"CI": "true"}
