"""JSON-RPC 2.0 dispatch for MCP, both protocol eras, independent of the transport.

A transport hands each frame (or decoded message) to `Dispatcher.handle_*`
with a `Reply` for that message: it receives the progress notifications and
then exactly one final message, the response, or `None` when the request was
cancelled (no response is sent for a cancelled request). Every request gets a
response or a JSON-RPC error; notifications never get either. Nothing a client
sends raises out of the dispatcher.

The era is decided per request (`_eras`); what a client shares across its
messages is its `Connection` (`_connection`).
"""

from __future__ import annotations

import os
import sys
import threading
import traceback
from collections.abc import Callable, Mapping
from typing import Any

from pybox._core.errors import PyboxError
from pybox._frontends.mcp import _experimentresources as experiment_resources
from pybox._frontends.mcp._connection import Connection, log
from pybox._frontends.mcp._eras import version_for
from pybox._frontends.mcp._protocol import (
    ALL_VERSIONS,
    ARGUMENT_ERRORS_AS_RESULTS_SINCE,
    HANDSHAKE_VERSIONS,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    JSONRPC_VERSION,
    META_SERVER_INFO,
    METHOD_NOT_FOUND,
    MODERN_VERSIONS,
    PARSE_ERROR,
    RESOURCE_NOT_FOUND_HANDSHAKE,
    STRUCTURED_SINCE,
    ArgumentError,
    JSONObject,
    RequestId,
    RpcError,
    decode,
    error_response,
    is_request_id,
    notification,
    result_response,
    version_at_least,
)
from pybox._frontends.mcp._resources import (
    ResourceNotFound,
    read,
    run_resources,
    static_resources,
    templates,
)
from pybox._frontends.mcp._toolbox import CallContext, Cancelled, Toolbox, text_result
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
MAX_NESTING = 64

CACHEABLE = {
    "server/discover",
    "tools/list",
    "resources/list",
    "resources/templates/list",
    "resources/read",
}


def _nesting_ok(value: Any, depth: int = 0) -> bool:
    if depth > MAX_NESTING:
        return False
    if isinstance(value, dict):
        return all(_nesting_ok(v, depth + 1) for v in value.values())
    if isinstance(value, list):
        return all(_nesting_ok(v, depth + 1) for v in value)
    return True


class Dispatcher:
    def __init__(self, toolbox: Toolbox) -> None:
        self.toolbox = toolbox
        self.max_frame_bytes = toolbox.options.max_message_bytes

    # -- entry points -------------------------------------------------------------------

    def oversized(self, size: int) -> JSONObject:
        return error_response(
            None,
            RpcError(
                INVALID_REQUEST,
                f"The message is {size} bytes; this server accepts at most "
                f"{self.max_frame_bytes} bytes per message. Send less (for example fewer "
                "or smaller files).",
            ),
        )

    def handle_frame(self, conn: Connection, frame: bytes, reply: Reply) -> None:
        """One raw message (a stdio line or an HTTP body)."""
        if len(frame) > self.max_frame_bytes:
            reply(self.oversized(len(frame)))
            return
        try:
            message = decode(frame)
        except (ValueError, RecursionError) as exc:
            reply(error_response(None, RpcError(PARSE_ERROR, f"Parse error: {_short(exc)}")))
            return
        self.handle_message(conn, message, reply)

    def handle_message(
        self,
        conn: Connection,
        message: Any,
        reply: Reply,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """One decoded message. `headers` (lower-case names) come with HTTP only."""
        try:
            self._handle(conn, message, reply, headers)
        except Exception as exc:  # never let a client's message kill the server
            _debug_traceback()
            request_id = message.get("id") if isinstance(message, dict) else None
            if is_request_id(request_id) and "method" in message:
                reply(error_response(request_id, _internal(exc)))

    # -- classification -----------------------------------------------------------------

    def _handle(
        self,
        conn: Connection,
        message: Any,
        reply: Reply,
        headers: Mapping[str, str] | None,
    ) -> None:
        if isinstance(message, list):
            reply(
                error_response(
                    None, RpcError(INVALID_REQUEST, "Batches are not supported: send one message.")
                )
            )
            return
        if not isinstance(message, dict) or not _nesting_ok(message):
            text = (
                "Invalid Request: the message is not a JSON object."
                if not isinstance(message, dict)
                else f"Invalid Request: the message is nested deeper than {MAX_NESTING} levels."
            )
            reply(error_response(None, RpcError(INVALID_REQUEST, text)))
            return
        request_id = message.get("id")
        has_id = "id" in message
        if "method" not in message and ("result" in message or "error" in message):
            return  # a response: this server never sends requests, so nothing waits for it
        problem = None
        if message.get("jsonrpc") != JSONRPC_VERSION:
            problem = 'jsonrpc must be "2.0"'
        elif not isinstance(message.get("method"), str):
            problem = "method must be a string"
        elif has_id and not is_request_id(request_id):
            problem = "id must be a string or an integer"
        elif "params" in message and not isinstance(message["params"], dict):
            problem = "params must be an object"
        if problem is not None:
            reply_id = request_id if is_request_id(request_id) else None
            if has_id or problem.startswith(("jsonrpc", "method")):
                reply(
                    error_response(
                        reply_id, RpcError(INVALID_REQUEST, f"Invalid Request: {problem}.")
                    )
                )
            return
        method: str = message["method"]
        params: JSONObject = message.get("params") or {}
        if not is_request_id(request_id):
            self._notify(conn, method, params)
            return
        self._request(conn, request_id, method, params, reply, headers)

    def _notify(self, conn: Connection, method: str, params: JSONObject) -> None:
        if method == "notifications/cancelled" and conn.cancel(params.get("requestId")):
            log(f"request {params.get('requestId')!r} cancelled: {params.get('reason', '')}")
        # notifications/initialized, progress and unknown notifications need no action.

    def _request(
        self,
        conn: Connection,
        request_id: RequestId,
        method: str,
        params: JSONObject,
        reply: Reply,
        headers: Mapping[str, str] | None,
    ) -> None:
        try:
            version = version_for(conn, method, params, headers)
        except RpcError as error:
            reply(error_response(request_id, error))
            return
        cancel = conn.begin(request_id)
        if cancel is None:
            reply(
                error_response(
                    request_id,
                    RpcError(
                        INVALID_REQUEST,
                        f"Request id {request_id!r} is already in use by a request in flight; "
                        "use a new id.",
                    ),
                )
            )
            return
        if method == "tools/call":
            # Runs take time: serve them in a thread so cancellations keep arriving.
            worker = threading.Thread(
                target=self._serve,
                args=(conn, request_id, method, params, version, cancel, reply),
                name=f"pybox-mcp-call-{request_id}",
                daemon=True,
            )
            conn.add_worker(worker)
            worker.start()
        else:
            self._serve(conn, request_id, method, params, version, cancel, reply)

    # -- serving ------------------------------------------------------------------------

    def _serve(
        self,
        conn: Connection,
        request_id: RequestId,
        method: str,
        params: JSONObject,
        version: str | None,
        cancel: threading.Event,
        reply: Reply,
    ) -> None:
        try:
            result = self._method(conn, method, params, version, cancel, reply)
            reply(result_response(request_id, self._shape(method, version, result)))
        except Cancelled:
            reply(None)
        except RpcError as error:
            reply(error_response(request_id, error))
        except PyboxError as exc:  # pybox's own state (an unreadable state file, say)
            reply(error_response(request_id, RpcError(INTERNAL_ERROR, str(exc))))
        except Exception as exc:
            _debug_traceback()
            reply(error_response(request_id, _internal(exc)))
        finally:
            conn.end(request_id)

    def _method(
        self,
        conn: Connection,
        method: str,
        params: JSONObject,
        version: str | None,
        cancel: threading.Event,
        reply: Reply,
    ) -> JSONObject:
        modern = version in MODERN_VERSIONS
        if method == "initialize" and not modern:
            return self._initialize(conn, params)
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
            return {"tools": [self._tool_for(version, t) for t in self.toolbox.tools()]}
        if method == "tools/call":
            return self._call_tool(params, version, cancel, reply)
        if method == "resources/list":
            _page_params(params)
            runs = self.toolbox.registry.recent()
            return {
                "resources": static_resources()
                + experiment_resources.listed(self.toolbox)
                + run_resources(runs)
            }
        if method == "resources/templates/list":
            _page_params(params)
            return {"resourceTemplates": templates() + experiment_resources.templates(self.toolbox)}
        if method == "resources/read":
            return self._read(params, version)
        raise RpcError(
            METHOD_NOT_FOUND,
            f"Method not found: {method!r}. This server offers tools and resources "
            "(tools/list, tools/call, resources/list, resources/read, "
            "resources/templates/list).",
        )

    def _initialize(self, conn: Connection, params: JSONObject) -> JSONObject:
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

    def _tool_for(self, version: str | None, tool: JSONObject) -> JSONObject:
        if version is None or version_at_least(version, STRUCTURED_SINCE):
            return tool
        return {k: v for k, v in tool.items() if k not in ("title", "outputSchema")}

    def _call_tool(
        self, params: JSONObject, version: str | None, cancel: threading.Event, reply: Reply
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
            result = self.toolbox.call(name, arguments, CallContext(cancel, progress))
        except ArgumentError as exc:
            if version is not None and not version_at_least(
                version, ARGUMENT_ERRORS_AS_RESULTS_SINCE
            ):
                raise
            return text_result(f"{exc.message} Fix the arguments and call again.", is_error=True)
        if version is not None and not version_at_least(version, STRUCTURED_SINCE):
            result.pop("structuredContent", None)
        return result

    def _read(self, params: JSONObject, version: str | None) -> JSONObject:
        uri = params.get("uri")
        if not isinstance(uri, str):
            raise RpcError(INVALID_PARAMS, "resources/read: uri must be a string.")
        try:
            contents, final = read(self.toolbox, uri)
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

    def _shape(self, method: str, version: str | None, result: JSONObject) -> JSONObject:
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


def _short(exc: BaseException) -> str:
    return str(exc)[:200]


def _internal(exc: BaseException) -> RpcError:
    return RpcError(
        INTERNAL_ERROR,
        f"Internal error: {type(exc).__name__}: {_short(exc)}. This is a bug in pybox; "
        "run the server with PYBOX_DEBUG=1 for details and report it.",
    )


def _debug_traceback() -> None:
    if os.environ.get("PYBOX_DEBUG"):
        traceback.print_exc(file=sys.stderr)
