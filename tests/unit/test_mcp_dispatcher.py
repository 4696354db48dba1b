"""The MCP dispatcher without an engine: both eras, bad input, tools, resources."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from pybox._adapters.state import StateStore
from pybox._core.limits import Policy
from pybox._frontends.mcp import ServerOptions
from pybox._frontends.mcp._tools import TOOLS
from tests.unit.conftest import make_session
from tests.unit.fake_engine import FakeEngine, Script
from tests.unit.mcp_harness import MODERN_META, Peer

RECEIPT_SCHEMA = json.loads(
    (Path(__file__).resolve().parents[2] / "docs" / "receipt.schema.json").read_text()
)


@pytest.fixture
def peer(engine: FakeEngine, state: StateStore) -> Peer:
    policy = Policy().with_settings({}, {"memory_mib": 256, "timeout_s": 60}, "test")
    return Peer(make_session(engine, state, policy))


def error_code(response: dict[str, Any]) -> int:
    assert "error" in response, response
    code: int = response["error"]["code"]
    return code


def tool_schema(peer: Peer, name: str, key: str) -> dict[str, Any]:
    tools = peer.request("tools/list")["result"]["tools"]
    schema: dict[str, Any] = next(t for t in tools if t["name"] == name)[key]
    return schema


# -- JSON-RPC bad input ------------------------------------------------------------------


def test_malformed_json_is_a_parse_error_and_the_server_keeps_serving(peer: Peer) -> None:
    peer.frame(b'{"jsonrpc": "2.0", "id": 1, "method": ')
    response = peer.next()
    assert response is not None and response["id"] is None and error_code(response) == -32700
    peer.frame(b"\xff\xfe not utf-8")
    assert error_code(peer.next() or {}) == -32700
    peer.frame(b'{"jsonrpc": "2.0", "id": NaN, "method": "tools/list"}')
    assert error_code(peer.next() or {}) == -32700
    assert "result" in peer.request("tools/list")


@pytest.mark.parametrize(
    ("message", "expected_id"),
    [
        ({"jsonrpc": "2.0", "id": True, "method": "tools/list"}, None),
        ({"jsonrpc": "2.0", "id": None, "method": "tools/list"}, None),
        ({"jsonrpc": "2.0", "id": 1.5, "method": "tools/list"}, None),
        ({"jsonrpc": "2.0", "id": 3, "method": 42}, 3),
        ({"jsonrpc": "1.0", "id": 4, "method": "tools/list"}, 4),
        ({"jsonrpc": "2.0", "id": 5, "method": "tools/list", "params": [1, 2]}, 5),
        ({"id": 6, "method": "tools/list"}, 6),
        ([{"jsonrpc": "2.0", "id": 7, "method": "tools/list"}], None),
        ("just a string", None),
        (17, None),
    ],
)
def test_invalid_requests_get_invalid_request(peer: Peer, message: Any, expected_id: Any) -> None:
    peer.send(message)
    response = peer.next()
    assert response is not None
    assert error_code(response) == -32600
    assert response["id"] == expected_id
    assert "result" in peer.request("tools/list")


def test_unknown_method_and_notifications(peer: Peer) -> None:
    assert error_code(peer.request("prompts/list")) == -32601
    assert error_code(peer.request("no/such/method")) == -32601
    # Unknown notifications and stray responses get no answer at all.
    peer.send({"jsonrpc": "2.0", "method": "notifications/whatever"})
    peer.send({"jsonrpc": "2.0", "id": 99, "result": {}})
    assert peer.replies.empty()


def test_malformed_calls_are_invalid_params(peer: Peer) -> None:
    assert error_code(peer.request("tools/call", {"name": 7})) == -32602
    assert error_code(peer.request("tools/call", {"name": "run_python", "arguments": []})) == -32602
    assert error_code(peer.call("docker_run", {"code": ""})) == -32602
    assert error_code(peer.request("resources/read", {"uri": 5})) == -32602
    assert error_code(peer.request("tools/list", {"cursor": "nope"})) == -32602


BAD_ARGUMENTS: list[tuple[str, dict[str, Any], str]] = [
    ("run_python", {"code": 12}, "code must be a string"),
    ("run_python", {}, "'code'"),
    ("run_python", {"code": "", "mount": "/"}, "'mount'"),
    ("run_python", {"code": "", "limits": {"memory_mib": "x"}}, "memory_mib must be a number"),
    ("run_python", {"code": "", "limits": {"network": 1}}, "'network'"),
    ("run_python", {"code": "", "files": [{"name": "a"}]}, "name and content"),
    ("get_run", {"run_id": "x", "wait_s": 3600}, "wait_s"),
    ("stop_run", {"run_id": 5}, "run_id must be a string"),
]


@pytest.mark.parametrize(("tool", "arguments", "says"), BAD_ARGUMENTS)
def test_bad_arguments_are_tool_errors_the_model_can_read(
    peer: Peer, engine: FakeEngine, tool: str, arguments: dict[str, Any], says: str
) -> None:
    # 2025-11-25 and 2026-07-28 (SEP-1303): an isError result, so the model self-corrects.
    result = peer.call(tool, arguments)["result"]
    assert result["isError"] is True and says in result["content"][0]["text"]
    peer.initialize("2025-11-25")
    assert peer.call(tool, arguments, modern=False)["result"]["isError"] is True
    # Older versions: a JSON-RPC error, as their specifications say.
    peer.initialize("2025-06-18")
    assert error_code(peer.call(tool, arguments, modern=False)) == -32602
    assert not engine.calls


def test_huge_frame_is_refused_and_the_server_keeps_serving(
    engine: FakeEngine, state: StateStore
) -> None:
    peer = Peer(make_session(engine, state), ServerOptions(max_message_bytes=4096))
    peer.frame(
        b'{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"x":"' + b"a" * 5000 + b'"}}'
    )
    response = peer.next()
    assert response is not None and error_code(response) == -32600
    assert "4096" in response["error"]["message"]
    assert "result" in peer.request("tools/list")


def test_deep_nesting_is_refused(peer: Peer) -> None:
    peer.frame("[" * 100_000 + "]" * 100_000)
    assert error_code(peer.next() or {}) in (-32700, -32600)
    peer.send({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"a": _nested(200)}})
    assert error_code(peer.next() or {}) == -32600


def _nested(depth: int) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = [value]
    return value


# -- the handshake era -----------------------------------------------------------------------


def test_request_before_initialize_is_refused_ping_is_not(peer: Peer) -> None:
    response = peer.request("tools/list", modern=False)
    assert error_code(response) == -32600
    assert "initialize" in response["error"]["message"]
    assert peer.request("ping", modern=False)["result"] == {}


def test_initialize_negotiates_a_version(peer: Peer) -> None:
    assert peer.initialize("2025-06-18")["result"]["protocolVersion"] == "2025-06-18"
    assert peer.initialize("2031-01-01")["result"]["protocolVersion"] == "2025-11-25"
    result = peer.initialize()["result"]
    assert result["protocolVersion"] == "2025-11-25"
    assert result["serverInfo"]["name"] == "pybox"
    assert set(result["capabilities"]) == {"tools", "resources"}
    listed = peer.request("tools/list", modern=False)["result"]
    assert "resultType" not in listed and "ttlMs" not in listed
    assert {t["name"] for t in listed["tools"]} == {tool.name for tool in TOOLS}
    assert {"run_python", "start_run", "get_result", "get_run", "stop_run"} <= {
        t["name"] for t in listed["tools"]
    }
    assert not any(t["name"].startswith("docker") for t in listed["tools"])


def test_old_versions_get_no_structured_content(peer: Peer) -> None:
    peer.initialize("2024-11-05")
    tools = peer.request("tools/list", modern=False)["result"]["tools"]
    assert all("outputSchema" not in t for t in tools)
    result = peer.call("run_python", {"code": "print(1)"}, modern=False)["result"]
    assert "structuredContent" not in result
    assert result["content"][0]["type"] == "text"


def test_resource_not_found_codes_per_era(peer: Peer) -> None:
    assert error_code(peer.request("resources/read", {"uri": "pybox://nothing"})) == -32602
    peer.initialize()
    response = peer.request("resources/read", {"uri": "pybox://runs/0000"}, modern=False)
    assert error_code(response) == -32002


# -- the stateless era ---------------------------------------------------------------------


def test_stateless_requests_need_both_meta_keys(peer: Peer) -> None:
    peer.send(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/list",
            "params": {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}},
        }
    )
    assert error_code(peer.next() or {}) == -32602


def test_unsupported_version_names_the_supported_ones(peer: Peer) -> None:
    meta = {**MODERN_META, "io.modelcontextprotocol/protocolVersion": "2099-01-01"}
    peer.send({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": meta}})
    response = peer.next() or {}
    assert error_code(response) == -32022
    assert response["error"]["data"]["requested"] == "2099-01-01"
    assert "2026-07-28" in response["error"]["data"]["supported"]


def test_discover_and_cache_hints(peer: Peer) -> None:
    result = peer.request("server/discover")["result"]
    assert result["resultType"] == "complete"
    assert (
        "2026-07-28" in result["supportedVersions"] and "2025-11-25" in result["supportedVersions"]
    )
    assert result["capabilities"]["tools"] == {"listChanged": False}
    assert result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "pybox"
    for method in ("tools/list", "resources/list", "resources/templates/list"):
        listed = peer.request(method)["result"]
        assert listed["resultType"] == "complete"
        assert listed["ttlMs"] >= 0 and listed["cacheScope"] in ("public", "private")
    read = peer.request("resources/read", {"uri": "pybox://capabilities"})["result"]
    assert read["ttlMs"] > 0 and read["cacheScope"] == "private"
    # ping is gone in 2026-07-28.
    assert error_code(peer.request("ping")) == -32601


def test_eras_are_told_apart_per_request(peer: Peer) -> None:
    assert "result" in peer.request("tools/list")
    assert error_code(peer.request("tools/list", modern=False)) == -32600
    peer.initialize()
    assert "result" in peer.request("tools/list", modern=False)
    assert peer.request("tools/list")["result"]["resultType"] == "complete"


# -- tools -------------------------------------------------------------------------------------


def test_run_python_result_conforms_to_its_output_schema(peer: Peer, engine: FakeEngine) -> None:
    engine.script = Script(stdout=b"42\n")
    result = peer.call("run_python", {"code": "print(6*7)"})["result"]
    assert result["resultType"] == "complete"
    assert result["isError"] is False
    structured = result["structuredContent"]
    jsonschema.validate(structured, tool_schema(peer, "run_python", "outputSchema"))
    jsonschema.validate(structured["receipt"], RECEIPT_SCHEMA)
    assert structured["stdout"] == "42\n"
    assert structured["status"] == "succeeded" and structured["box_removed"] is True
    assert "42" in result["content"][0]["text"]
    assert not engine.containers


def test_a_failing_program_is_an_error_result_not_a_protocol_error(
    peer: Peer, engine: FakeEngine
) -> None:
    engine.script = Script(stderr=b"Traceback: boom\n", exit_code=1)
    result = peer.call("run_python", {"code": "raise SystemExit(1)"})["result"]
    assert result["isError"] is True
    assert result["structuredContent"]["status"] == "failed"
    assert result["structuredContent"]["exit_code"] == 1
    assert "boom" in result["content"][0]["text"]


def test_asking_above_a_ceiling_is_refused_never_clamped(peer: Peer, engine: FakeEngine) -> None:
    result = peer.call("run_python", {"code": "", "limits": {"memory_mib": 512}})["result"]
    assert result["isError"] is True
    text = result["content"][0]["text"]
    assert "512 MiB" in text and "256 MiB" in text
    assert not engine.calls  # nothing was created
    result = peer.call("run_python", {"code": "", "image": "ubuntu"})["result"]
    assert result["isError"] is True and "stdlib" in result["content"][0]["text"]
    result = peer.call("run_python", {"code": "", "limits": {"memory_mib": 1}})["result"]
    assert result["isError"] is True and "minimum" in result["content"][0]["text"]


def test_descriptions_state_the_real_limits(peer: Peer) -> None:
    tools = {t["name"]: t for t in peer.request("tools/list")["result"]["tools"]}
    run = tools["run_python"]
    assert "256 MiB" in run["description"] and "60 s" in run["description"]
    assert (
        "at most 256 MiB"
        in run["inputSchema"]["properties"]["limits"]["properties"]["memory_mib"]["description"]
    )
    assert tools["get_run"]["annotations"]["readOnlyHint"] is True
    assert tools["stop_run"]["annotations"]["destructiveHint"] is True
    assert all(t["annotations"]["openWorldHint"] is False for t in tools.values())
    for tool in tools.values():
        jsonschema.Draft202012Validator.check_schema(tool["inputSchema"])
        jsonschema.Draft202012Validator.check_schema(tool["outputSchema"])


def test_output_is_shortened_for_the_model_and_kept_in_the_resource(
    engine: FakeEngine, state: StateStore
) -> None:
    peer = Peer(make_session(engine, state), ServerOptions(reply_bytes=1024))
    engine.script = Script(stdout=b"".join(b"line %06d\n" % i for i in range(20_000)))
    structured = peer.call("run_python", {"code": "..."})["result"]["structuredContent"]
    assert structured["stdout_shortened"] is True
    assert "line 000000" in structured["stdout"] and "line 019999" in structured["stdout"]
    assert len(structured["stdout"].encode()) < 1300
    full = peer.request("resources/read", {"uri": structured["stdout_uri"]})["result"]
    assert full["contents"][0]["text"].count("\n") == 20_000


def test_start_get_stop_run(peer: Peer, engine: FakeEngine) -> None:
    engine.script = Script(stdout=b"partial\n", hang=True)
    started = peer.call("start_run", {"code": "while True: pass"})["result"]
    schema = tool_schema(peer, "start_run", "outputSchema")
    jsonschema.validate(started["structuredContent"], schema)
    run_id = started["structuredContent"]["run_id"]
    assert started["structuredContent"]["state"] == "running"
    assert started["isError"] is False
    assert "get_result" in started["content"][0]["text"]
    polled = peer.call("get_run", {"run_id": run_id, "wait_s": 0.2})["result"]
    assert polled["structuredContent"]["state"] == "running"
    stopped = peer.call("stop_run", {"run_id": run_id})["result"]
    jsonschema.validate(stopped["structuredContent"], schema)
    assert stopped["structuredContent"]["status"] == "stopped"
    assert stopped["isError"] is False  # stopping it is what was asked
    assert stopped["structuredContent"]["box_removed"] is True
    assert not engine.containers
    again = peer.call("stop_run", {"run_id": run_id})["result"]
    assert again["structuredContent"]["status"] == "stopped"
    receipt = peer.request("resources/read", {"uri": f"pybox://runs/{run_id}"})["result"]
    assert json.loads(receipt["contents"][0]["text"])["receipt"]["status"] == "stopped"
    unknown = peer.call("get_run", {"run_id": "feedfeedfeedfeed"})["result"]
    assert unknown["isError"] is True and "no run" in unknown["content"][0]["text"]


def test_returned_files_are_resources(peer: Peer, engine: FakeEngine) -> None:
    engine.script = Script(files=[("out/data.csv", b"a,b\n1,2\n")])
    structured = peer.call("run_python", {"code": "...", "return_files": True})["result"][
        "structuredContent"
    ]
    [item] = structured["files"]
    assert item["path"] == "out/data.csv"
    read = peer.request("resources/read", {"uri": item["uri"]})["result"]
    assert read["contents"][0]["text"] == "a,b\n1,2\n"
    bad = peer.request("resources/read", {"uri": item["uri"].replace("data", "../../etc")})
    assert error_code(bad) == -32602


def test_capabilities_resource(peer: Peer) -> None:
    listed = peer.request("resources/list")["result"]["resources"]
    assert listed[0]["uri"] == "pybox://capabilities"
    read = peer.request("resources/read", {"uri": "pybox://capabilities"})["result"]
    data = json.loads(read["contents"][0]["text"])
    assert data["limits"]["ceilings"]["memory_mib"] == 256
    assert data["limits"]["defaults"]["memory_mib"] == 256  # lowered with its ceiling
    assert data["images"][0]["name"] == "stdlib"
    assert data["network"].startswith("none")
    templates = peer.request("resources/templates/list")["result"]["resourceTemplates"]
    assert "pybox://runs/{run_id}" in {t["uriTemplate"] for t in templates}


# -- concurrency: duplicate ids, cancellation, progress ------------------------------------


def test_duplicate_in_flight_id_is_refused_and_cancel_removes_the_box(
    peer: Peer, engine: FakeEngine
) -> None:
    engine.script = Script(hang=True)
    call = {
        "jsonrpc": "2.0",
        "id": "run-1",
        "method": "tools/call",
        "params": {
            "_meta": {**MODERN_META, "progressToken": 5},
            "name": "run_python",
            "arguments": {"code": "import time; time.sleep(99)"},
        },
    }
    peer.send(call)
    progress = peer.next()
    assert progress is not None and progress["method"] == "notifications/progress"
    assert progress["params"]["progressToken"] == 5
    peer.send(call)
    duplicate = peer.next()
    assert duplicate is not None and error_code(duplicate) == -32600
    assert "already in use" in duplicate["error"]["message"]
    deadline = time.monotonic() + 5
    while not engine.containers and time.monotonic() < deadline:
        time.sleep(0.01)
    assert engine.containers
    peer.send(
        {
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": {"requestId": "run-1", "reason": "test"},
        }
    )
    while True:  # progress may still arrive; then no response, only the end marker
        message = peer.next()
        if message is None:
            break
        assert message.get("method") == "notifications/progress", message
    assert not engine.containers
    assert ("kill", next(t for n, t in engine.calls if n == "kill")) in engine.calls
    # The id is free again.
    assert "result" in peer.request("tools/list")


def test_progress_increases(peer: Peer, engine: FakeEngine) -> None:
    engine.script = Script(hang=True)
    peer.send(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {
                "_meta": {**MODERN_META, "progressToken": "p"},
                "name": "run_python",
                "arguments": {"code": "", "limits": {"timeout_s": 2.5}},
            },
        }
    )
    seen = []
    while True:
        message = peer.next()
        assert message is not None
        if "id" in message:
            break
        seen.append(message["params"]["progress"])
        assert message["params"]["total"] == 2.5
    assert len(seen) >= 2 and seen == sorted(set(seen))
    assert message["result"]["structuredContent"]["status"] == "timed_out"


def test_an_unreadable_state_file_is_reported_not_a_crash(peer: Peer, state: StateStore) -> None:
    state.images_file.write_text('{"images": 7}')
    response = peer.request("tools/list")
    assert error_code(response) == -32603
    assert "image list" in response["error"]["message"]
    assert "bug" not in response["error"]["message"]
    assert "result" in peer.request("server/discover")
