"""The methods this MCP server answers, and the fields each era wants on a result.

`answer` serves one request the dispatcher has already classified and dated
(its era's `version`): the handshake, discovery, the tool and resource lists,
`tools/call` and `resources/read`. `shape` adds what the stateless era requires
on every result (`resultType`, the cache hints, the server's info).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from pybox._frontends.mcp import _experimentresources as experiment_resources
from pybox._frontends.mcp._connection import Connection
from pybox._frontends.mcp._protocol import (
    ALL_VERSIONS,
    ARGUMENT_ERRORS_AS_RESULTS_SINCE,
    HANDSHAKE_VERSIONS,
    INVALID_PARAMS,
    META_SERVER_INFO,
    METHOD_NOT_FOUND,
    MODERN_VERSIONS,
    RESOURCE_NOT_FOUND_HANDSHAKE,
    STRUCTURED_SINCE,
    ArgumentError,
    JSONObject,
    RpcError,
    is_request_id,
    notification,
    version_at_least,
)
from pybox._frontends.mcp._resources import (
    ResourceNotFound,
    read,
    run_resources,
    static_resources,
    templates,
)
from pybox._frontends.mcp._toolbox import CallContext, Toolbox, text_result
from pybox._version import __version__

Reply = Callable[[JSONObject | None], None]

SERVER_INFO: JSONObject = {"name": "pybox", "title": "pybox sandbox", "version": __version__}
INSTRUCTIONS = (
    "pybox runs Python in fresh, sealed sandbox boxes (no network, no host files). Use "
    "run_python for short programs; start_run, get_result and stop_run for long ones. Read "
    "pybox://capabilities for the exact limits and images before asking for more."
)
SERVER_CAPABILITIES: JSONObject = {
    "tools": {"listChanged": False},
    "resources": {"subscribe": False, "listChanged": False},
}
# How long a client may cache list and read results (2026-07-28 `ttlMs`).
TOOLS_TTL_MS = 60_000
CAPABILITIES_TTL_MS = 60_000
FINISHED_RUN_TTL_MS = 3_600_000

CACHEABLE = {
    "server/discover",
    "tools/list",
    "resources/list",
    "resources/templates/list",
    "resources/read",
}


def answer(
    toolbox: Toolbox,
    conn: Connection,
    method: str,
    params: JSONObject,
    version: str | None,
    cancel: threading.Event,
    reply: Reply,
) -> JSONObject:
    """The result of one request (not yet shaped for its era); raises `RpcError`."""
    modern = version in MODERN_VERSIONS
    if method == "initialize" and not modern:
        return _initialize(conn, params)
    if method == "ping" and not modern:
        return {}
    if method == "server/discover":
        return {
            "supportedVersions": list(ALL_VERSIONS),
            "capabilities": SERVER_CAPABILITIES,
            "serverInfo": SERVER_INFO,
            "instructions": INSTRUCTIONS,
        }
    if method == "tools/list":
        _page_params(params)
        return {"tools": [_tool_for(version, t) for t in toolbox.tools()]}
    if method == "tools/call":
        return _call_tool(toolbox, params, version, cancel, reply)
    if method == "resources/list":
        _page_params(params)
        runs = toolbox.registry.recent()
        return {
            "resources": static_resources()
            + experiment_resources.listed(toolbox)
            + run_resources(runs)
        }
    if method == "resources/templates/list":
        _page_params(params)
        return {"resourceTemplates": templates() + experiment_resources.templates(toolbox)}
    if method == "resources/read":
        return _read(toolbox, params, version)
    raise RpcError(
        METHOD_NOT_FOUND,
        f"Method not found: {method!r}. This server offers tools and resources "
        "(tools/list, tools/call, resources/list, resources/read, "
        "resources/templates/list).",
    )


def _initialize(conn: Connection, params: JSONObject) -> JSONObject:
    requested = params.get("protocolVersion")
    if not isinstance(requested, str):
        raise RpcError(INVALID_PARAMS, "initialize: protocolVersion must be a string.")
    capabilities = params.get("capabilities", {})
    if not isinstance(capabilities, dict):
        raise RpcError(INVALID_PARAMS, "initialize: capabilities must be an object.")
    chosen = requested if requested in HANDSHAKE_VERSIONS else HANDSHAKE_VERSIONS[0]
    conn.protocol_version = chosen
    conn.client_info = params.get("clientInfo")
    return {
        "protocolVersion": chosen,
        "capabilities": SERVER_CAPABILITIES,
        "serverInfo": SERVER_INFO,
        "instructions": INSTRUCTIONS,
    }


def _tool_for(version: str | None, tool: JSONObject) -> JSONObject:
    if version is None or version_at_least(version, STRUCTURED_SINCE):
        return tool
    return {k: v for k, v in tool.items() if k not in ("title", "outputSchema")}


def _call_tool(
    toolbox: Toolbox, params: JSONObject, version: str | None, cancel: threading.Event, reply: Reply
) -> JSONObject:
    name = params.get("name")
    if not isinstance(name, str):
        raise RpcError(INVALID_PARAMS, "tools/call: name must be a string (a tool's name).")
    arguments = params.get("arguments", {})
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise RpcError(INVALID_PARAMS, "tools/call: arguments must be an object.")
    token = (params.get("_meta") or {}).get("progressToken")
    progress = None
    if is_request_id(token):

        def progress(done: float, total: float | None, message: str) -> None:
            body: JSONObject = {"progressToken": token, "progress": done, "message": message}
            if total is not None:
                body["total"] = total
            reply(notification("notifications/progress", body))

    try:
        result = toolbox.call(name, arguments, CallContext(cancel, progress))
    except ArgumentError as exc:
        if version is not None and not version_at_least(version, ARGUMENT_ERRORS_AS_RESULTS_SINCE):
            raise
        return text_result(f"{exc.message} Fix the arguments and call again.", is_error=True)
    if version is not None and not version_at_least(version, STRUCTURED_SINCE):
        result.pop("structuredContent", None)
    return result


def _read(toolbox: Toolbox, params: JSONObject, version: str | None) -> JSONObject:
    uri = params.get("uri")
    if not isinstance(uri, str):
        raise RpcError(INVALID_PARAMS, "resources/read: uri must be a string.")
    try:
        contents, final = read(toolbox, uri)
    except ResourceNotFound as exc:
        code = INVALID_PARAMS if version in MODERN_VERSIONS else RESOURCE_NOT_FOUND_HANDSHAKE
        raise RpcError(code, str(exc), {"uri": uri}) from None
    result: JSONObject = {"contents": contents}
    if version in MODERN_VERSIONS:
        result["ttlMs"] = (
            CAPABILITIES_TTL_MS if uri.endswith("capabilities") else FINISHED_RUN_TTL_MS
        )
        if not final and not uri.endswith("capabilities"):
            result["ttlMs"] = 0
    return result


def shape(method: str, version: str | None, result: JSONObject) -> JSONObject:
    """Fields the stateless era requires on every result (and the cache hints)."""
    if version not in MODERN_VERSIONS and method != "server/discover":
        return result
    shaped = {"resultType": "complete", **result}
    if method in CACHEABLE:
        # The resource list grows with every run: never serve it from a cache.
        shaped.setdefault("ttlMs", 0 if method == "resources/list" else TOOLS_TTL_MS)
        # Run receipts belong to whoever holds this server's token.
        shaped["cacheScope"] = "private"
    meta = dict(shaped.get("_meta") or {})
    meta[META_SERVER_INFO] = SERVER_INFO
    shaped["_meta"] = meta
    return shaped


def _page_params(params: JSONObject) -> None:
    cursor = params.get("cursor")
    if cursor is not None:
        # Every list fits in one page, so no cursor this server issued exists.
        raise RpcError(INVALID_PARAMS, f"Unknown cursor {cursor!r}: this list has one page.")
