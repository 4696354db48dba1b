"""JSON-RPC 2.0 dispatch for MCP, both protocol eras, independent of the transport.

A transport hands each frame (or decoded message) to `Dispatcher.handle_*`
with a `Reply` for that message: it receives the progress notifications and
then exactly one final message, the response, or `None` when the request was
cancelled (no response is sent for a cancelled request). Every request gets a
response or a JSON-RPC error; notifications never get either. Nothing a client
sends raises out of the dispatcher.

The era is decided per request (`_eras`); what a client shares across its
messages is its `Connection` (`_connection`); what each method answers is in
`_methods`.
"""

from __future__ import annotations

import os
import sys
import threading
import traceback
from collections.abc import Mapping
from typing import Any

from pybox._core.errors import PyboxError
from pybox._frontends.mcp._connection import Connection, log
from pybox._frontends.mcp._eras import version_for
from pybox._frontends.mcp._methods import Reply, answer, shape
from pybox._frontends.mcp._protocol import (
    INTERNAL_ERROR,
    INVALID_REQUEST,
    JSONRPC_VERSION,
    PARSE_ERROR,
    JSONObject,
    RequestId,
    RpcError,
    decode,
    error_response,
    is_request_id,
    result_response,
)
from pybox._frontends.mcp._toolbox import Cancelled, Toolbox

MAX_NESTING = 64


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
            result = answer(self.toolbox, conn, method, params, version, cancel, reply)
            reply(result_response(request_id, shape(method, version, result)))
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
