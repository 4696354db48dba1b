"""MCP tools declared once: tools/list, argument checks and dispatch come from the declarations,
and the operator switches tool groups on and off (`pybox mcp --tools`)."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest

from pybox._adapters.state import StateStore
from pybox._core.errors import ConfigError
from pybox._frontends.mcp import ServerOptions, build_dispatcher
from pybox._frontends.mcp._protocol import ArgumentError, JSONObject
from pybox._frontends.mcp._schema import UNDERSTOOD, check_arguments
from pybox._frontends.mcp._toolbox import (
    CallContext,
    Hints,
    Tool,
    Toolbox,
    alias,
    text_result,
    tool_groups,
)
from pybox._frontends.mcp._tools import TOOL_GROUPS, TOOLS
from tests.unit.conftest import make_session
from tests.unit.fake_engine import FakeEngine
from tests.unit.mcp_harness import Peer
from tests.unit.test_mcp_startup import config_env, pybox, pybox_config

CALLS: list[tuple[str, JSONObject]] = []


def _echo(toolbox: Toolbox, args: JSONObject, ctx: CallContext) -> JSONObject:
    CALLS.append((ctx.tool, args))
    return text_result(f"{ctx.tool}: {args['n'] * 2}", is_error=False)


ECHO = Tool(
    name="double_it",
    group="extra",
    title="Double a number",
    description=lambda toolbox: f"Doubles n (reply bytes {toolbox.options.reply_bytes}).",
    input_schema={
        "type": "object",
        "additionalProperties": False,
        "required": ["n"],
        "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 10}},
    },
    handler=_echo,
    hints=Hints(read_only=True, destructive=False, idempotent=True),
)
ECHO_ALIAS = alias(ECHO, "twice", "The same as double_it.")


def peer_with(engine: FakeEngine, state: StateStore, groups: tuple[str, ...] | None = None) -> Peer:
    return Peer(
        make_session(engine, state), ServerOptions(tool_groups=groups), (*TOOLS, ECHO, ECHO_ALIAS)
    )


def listed(peer: Peer) -> dict[str, dict[str, Any]]:
    return {t["name"]: t for t in peer.request("tools/list")["result"]["tools"]}


# -- one declaration, three uses ---------------------------------------------------------------


def test_a_declared_tool_is_listed_checked_and_dispatched(
    engine: FakeEngine, state: StateStore
) -> None:
    CALLS.clear()
    peer = peer_with(engine, state)
    entry = listed(peer)["double_it"]
    assert entry["inputSchema"] == ECHO.input_schema
    assert entry["description"] == "Doubles n (reply bytes 8192)."  # built from the options
    assert entry["annotations"]["readOnlyHint"] is True and "outputSchema" not in entry
    # Checked against its own schema: the handler never sees a bad call.
    bad_calls: list[tuple[JSONObject, str]] = [
        ({}, "'n' is missing"),
        ({"n": "3"}, "n must be a whole number"),
        ({"n": 11}, "n must be between 0 and 10"),
        ({"n": 1, "m": 2}, "unknown argument 'm'"),
    ]
    for bad, says in bad_calls:
        result = peer.call("double_it", bad)["result"]
        assert result["isError"] is True and says in result["content"][0]["text"]
    assert CALLS == []
    # Dispatched to its handler.
    result = peer.call("double_it", {"n": 4})["result"]
    assert result["content"][0]["text"] == "double_it: 8"
    assert CALLS == [("double_it", {"n": 4})]


def test_an_alias_is_a_declaration_with_its_own_name(engine: FakeEngine, state: StateStore) -> None:
    CALLS.clear()
    peer = peer_with(engine, state)
    tools = listed(peer)
    assert tools["twice"]["inputSchema"] == tools["double_it"]["inputSchema"]
    assert tools["twice"]["title"] == "Double a number (alias of double_it)"
    assert tools["twice"]["annotations"]["title"] == "Double a number"
    assert peer.call("twice", {"n": 1})["result"]["content"][0]["text"] == "twice: 2"
    get_run = next(tool for tool in TOOLS if tool.name == "get_run")
    get_result = next(tool for tool in TOOLS if tool.name == "get_result")
    assert get_run.alias_of == "get_result" and get_run.handler is get_result.handler


def test_tools_list_is_exactly_the_declarations(engine: FakeEngine, state: StateStore) -> None:
    peer = Peer(make_session(engine, state))
    toolbox = peer.dispatcher.toolbox
    assert peer.request("tools/list")["result"]["tools"] == [t.listing(toolbox) for t in TOOLS]


def test_every_declared_schema_uses_only_what_the_check_understands(
    engine: FakeEngine, state: StateStore
) -> None:
    toolbox = Peer(make_session(engine, state)).dispatcher.toolbox

    def walk(schema: Any) -> None:
        if isinstance(schema, dict):
            assert set(schema) <= UNDERSTOOD, set(schema) - UNDERSTOOD
            for key in ("properties",):
                for sub in schema.get(key, {}).values():
                    walk(sub)
            for key in ("items", "additionalProperties", "propertyNames"):
                if isinstance(schema.get(key), dict):
                    walk(schema[key])

    for entry in toolbox.tools():
        jsonschema.Draft202012Validator.check_schema(entry["inputSchema"])
        walk(entry["inputSchema"])


def test_duplicate_names_are_a_declaration_bug(engine: FakeEngine, state: StateStore) -> None:
    session = make_session(engine, state)
    registry = build_dispatcher(session, ServerOptions()).toolbox.registry
    with pytest.raises(ValueError, match="declared twice: double_it"):
        Toolbox(session, registry, ServerOptions(), (ECHO, ECHO))


# -- the generic check agrees with JSON Schema ---------------------------------------------------

SCHEMA: JSONObject = {
    "type": "object",
    "additionalProperties": False,
    "required": ["a"],
    "properties": {
        "a": {"type": "string", "pattern": "^x"},
        "b": {"type": "array", "maxItems": 2, "items": {"type": "number", "minimum": 1}},
        "c": {
            "type": "object",
            "maxProperties": 2,
            "propertyNames": {"pattern": "^[A-Z]+$"},
            "additionalProperties": {"type": "boolean"},
        },
        "d": {"type": "string", "enum": ["p", "q"]},
        "e": {
            "type": "object",
            "additionalProperties": False,
            "required": ["f", "g"],
            "properties": {"f": {"type": "integer"}, "g": {"type": ["string", "null"]}},
        },
    },
}
SAMPLES: list[JSONObject] = [
    {"a": "x"},
    {"a": "y"},
    {"a": 1},
    {},
    {"a": "x", "z": 1},
    {"a": "x", "b": [1, 2.5]},
    {"a": "x", "b": [1, 2, 3]},
    {"a": "x", "b": [0]},
    {"a": "x", "b": [True]},
    {"a": "x", "b": "1"},
    {"a": "x", "c": {"A": True}},
    {"a": "x", "c": {"a": True}},
    {"a": "x", "c": {"A": 1}},
    {"a": "x", "c": {"A": True, "B": False, "C": True}},
    {"a": "x", "d": "p"},
    {"a": "x", "d": "r"},
    {"a": "x", "e": {"f": 1, "g": None}},
    {"a": "x", "e": {"f": 1.0, "g": "s"}},
    {"a": "x", "e": {"f": 1.5, "g": "s"}},
    {"a": "x", "e": {"f": 1}},
    {"a": "x", "e": {"f": 1, "g": 2}},
    {"a": "x", "e": {"f": True, "g": None}},
]


@pytest.mark.parametrize("sample", SAMPLES, ids=[json.dumps(s) for s in SAMPLES])
def test_the_check_accepts_exactly_what_json_schema_accepts(sample: JSONObject) -> None:
    valid = jsonschema.Draft202012Validator(SCHEMA).is_valid(sample)
    try:
        assert check_arguments("t", SCHEMA, sample) == sample
    except ArgumentError as exc:
        assert not valid, f"refused a valid sample: {exc.message}"
        assert exc.message.startswith("t: ")
    else:
        assert valid, "accepted an invalid sample"


def test_a_property_with_a_check_of_its_own_gets_what_that_check_returns() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "string"}}}
    checked = check_arguments("t", schema, {"n": 5}, {"n": lambda where, value: value + 1})
    assert checked == {"n": 6}


# -- tool groups: `pybox mcp --tools` ------------------------------------------------------------


def test_every_group_is_on_by_default(engine: FakeEngine, state: StateStore) -> None:
    peer = peer_with(engine, state)
    assert {"run_python", "get_result", "double_it", "twice"} <= set(listed(peer))
    capabilities = json.loads(
        peer.request("resources/read", {"uri": "pybox://capabilities"})["result"]["contents"][0][
            "text"
        ]
    )
    assert capabilities["tool_groups"]["enabled"] == ["runs", "sandboxes", "experiments", "extra"]


def test_a_group_that_is_off_is_not_listed_and_its_tools_are_unknown(
    engine: FakeEngine, state: StateStore
) -> None:
    peer = peer_with(engine, state, ("extra",))
    assert set(listed(peer)) == {"double_it", "twice"}
    refused = peer.call("run_python", {"code": "print(1)"})["error"]
    assert refused["code"] == -32602
    assert "Unknown tool 'run_python'. Tools: double_it, twice." in refused["message"]
    assert not engine.calls
    capabilities = json.loads(
        peer.request("resources/read", {"uri": "pybox://capabilities"})["result"]["contents"][0][
            "text"
        ]
    )
    assert capabilities["tool_groups"] == {
        "enabled": ["extra"],
        "available": ["runs", "sandboxes", "experiments", "extra"],
        "rule": capabilities["tool_groups"]["rule"],
    }
    peer = peer_with(engine, state, ("runs",))
    assert "double_it" not in listed(peer) and "run_python" in listed(peer)


def test_tool_groups_are_checked() -> None:
    assert TOOL_GROUPS == ("runs", "sandboxes", "experiments")
    assert tool_groups("runs", TOOL_GROUPS) == ("runs",)
    assert tool_groups(" runs , runs", TOOL_GROUPS) == ("runs",)
    with pytest.raises(ConfigError, match="no tool group 'sandbox'; the groups are: runs"):
        tool_groups("runs,sandbox", TOOL_GROUPS)
    with pytest.raises(ConfigError, match="names no tool group"):
        tool_groups(",", TOOL_GROUPS)


def test_an_unknown_group_stops_the_server_before_it_starts(state: StateStore) -> None:
    done = pybox(state, "mcp", "--tools", "runs,experiment")
    assert done.returncode == 2, done.stderr
    assert done.stdout == b""
    err = done.stderr.decode()
    assert "--tools: there is no tool group 'experiment'; the groups are: runs" in err
    assert "serving" not in err and "warm" not in err  # nothing was started


def test_config_carries_tools_to_the_server(state: StateStore) -> None:
    env = config_env(state)
    done = pybox_config(env, "--client", "cursor", "--format", "json", "--tools", "runs")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["mcpServers"]["pybox"]["args"] == [
        "-m",
        "pybox",
        "mcp",
        "--tools=runs",
    ]
    for args in (["--tools", "nosuch"], ["--server-arg=--tools=nosuch"]):
        refused = pybox_config(env, "--client", "cursor", *args)
        assert refused.returncode == 2 and refused.stdout == b""
        assert "no tool group 'nosuch'" in refused.stderr.decode()
