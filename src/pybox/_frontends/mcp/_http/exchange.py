"""A POST: its body within the caps, its era and session, and its answer.

A 2026-07-28 request carries its protocol version and needs no session; an
older one names the session `initialize` opened. A tools/call whose client
accepts an event stream gets its progress as events before the response.
"""

from __future__ import annotations

import queue
from http import HTTPStatus
from typing import Any, cast

from pybox._frontends.mcp._connection import Connection
from pybox._frontends.mcp._http.listener import READS_AT_ONCE, Listener
from pybox._frontends.mcp._http.replies import Replies
from pybox._frontends.mcp._http.sessions import Session
from pybox._frontends.mcp._http.wire import (
    Head,
    Headers,
    HttpError,
    ReplyQueue,
    SocketReader,
    json_values_within,
)
from pybox._frontends.mcp._protocol import (
    ALL_VERSIONS,
    HTTP_STATUS_FOR_ERROR,
    INVALID_REQUEST,
    META_PROTOCOL_VERSION,
    MODERN_VERSIONS,
    PARSE_ERROR,
    UNSUPPORTED_PROTOCOL_VERSION,
    JSONObject,
    RpcError,
    decode,
    error_response,
)

SESSION_HEADER = "Mcp-Session-Id"
POLL_S = 0.25

_UNPARSED = object()  # the body was answered already (refused or not JSON)


class Exchange(Replies):
    """Serves one POST whose head passed the checks (see `server`)."""

    server: Listener
    head: Head
    headers: Headers
    reader: SocketReader

    def _post(self) -> None:
        dispatcher = self.server.dispatcher
        limits = self.server.limits
        transfer = self.headers.get("Transfer-Encoding")
        length_text = self.headers.get("Content-Length")
        taken = 0
        try:
            if transfer is not None:
                if length_text is not None:
                    raise HttpError(400, "Send Content-Length or Transfer-Encoding, not both.")
                if transfer.strip().lower() != "chunked":
                    raise HttpError(501, f"Transfer-Encoding {transfer[:100]!r} is not supported.")
                self._continue()
                body, taken = self.reader.read_chunked(self.server.bodies)
            else:
                if length_text is None:
                    raise HttpError(411, "Content-Length (or chunked encoding) is required.")
                if not length_text.isascii() or not length_text.isdigit():
                    raise HttpError(400, "Content-Length must be a number of bytes.")
                length = int(length_text)
                if length > limits.max_body_bytes:
                    self.close_connection = True
                    self._json(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, dispatcher.oversized(length))
                    return
                if not self.server.bodies.take(length, limits.read_timeout_s):
                    raise HttpError(503, "The server holds too many request bodies; retry.")
                taken = length
                self._continue()
                body = self.reader.read_length(length)
            message = self._decode(body)
            del body
        except HttpError as refused:
            if refused.status != HTTPStatus.REQUEST_ENTITY_TOO_LARGE:
                raise
            self.close_connection = True
            self._json(refused.status, dispatcher.oversized(limits.max_body_bytes + 1))
            return
        finally:
            self.server.bodies.give_back(taken)
        if message is not _UNPARSED:
            self._dispatch(message)

    def _continue(self) -> None:
        """A client that waits before sending its body (curl does) may send it now."""
        expect = (self.headers.get("Expect") or "").lower()
        if expect == "100-continue" and self.head.version == "HTTP/1.1":
            self._write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def _decode(self, body: bytearray) -> Any:
        cap = self.server.limits.max_json_values
        if not json_values_within(body, cap):
            text = (
                f"The message has more than {cap} JSON values (brackets and commas); this "
                "server parses at most that many. Send fewer, larger values (files as one string)."
            )
            self._json(
                HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                error_response(None, RpcError(INVALID_REQUEST, text)),
            )
            return _UNPARSED
        try:
            return decode(cast(bytes, body))
        except (ValueError, RecursionError):
            self._json(400, error_response(None, RpcError(PARSE_ERROR, "Parse error.")))
            return _UNPARSED

    def _dispatch(self, message: Any) -> None:
        server = self.server
        header_version = self.headers.get("MCP-Protocol-Version", "")
        is_dict = isinstance(message, dict)
        method = message.get("method") if is_dict else None
        params = message.get("params") if is_dict else None
        meta = params.get("_meta") if isinstance(params, dict) else None
        enveloped = isinstance(meta, dict) and META_PROTOCOL_VERSION in meta
        stateless = method != "initialize" and (enveloped or header_version in MODERN_VERSIONS)
        is_request = is_dict and "id" in message and isinstance(method, str)
        if header_version and header_version not in ALL_VERSIONS:
            unsupported = RpcError(
                UNSUPPORTED_PROTOCOL_VERSION,
                f"Unsupported MCP-Protocol-Version {header_version!r}; supported: "
                f"{', '.join(ALL_VERSIONS)}.",
                {"supported": list(ALL_VERSIONS), "requested": header_version},
            )
            reply_id = message.get("id") if is_request else None
            self._json(HTTPStatus.BAD_REQUEST, error_response(reply_id, unsupported))
            return
        extra: dict[str, str] = {}
        session: Session | None = None
        if stateless or method in ("initialize", "server/discover") or not is_dict:
            conn = Connection()
            if method == "initialize" and is_request:
                created = server.sessions.new()
                if created is None:
                    text = (
                        f"{server.sessions.cap} sessions are open and in use; this server opens no "
                        "more until one ends (DELETE) or stays unused for "
                        f"{server.sessions.idle_s:.0f} s. Retry later, or use the 2026-07-28 "
                        "protocol, which needs no session."
                    )
                    busy = error_response(message["id"], RpcError(INVALID_REQUEST, text))
                    self._json(HTTPStatus.SERVICE_UNAVAILABLE, busy, {"Retry-After": "60"})
                    return
                session_id, conn = created
                extra[SESSION_HEADER] = session_id
        else:
            session_id = self.headers.get(SESSION_HEADER) or ""
            session = server.sessions.use(session_id) if session_id else None
            if session is None:
                status = HTTPStatus.NOT_FOUND if session_id else HTTPStatus.BAD_REQUEST
                text = (
                    "Unknown or ended session: send initialize again."
                    if session_id
                    else f"{SESSION_HEADER} is missing: send initialize first, or use the "
                    "2026-07-28 protocol (params._meta with the protocol version)."
                )
                reply_id = message.get("id") if is_request else None
                self._json(status, error_response(reply_id, RpcError(INVALID_REQUEST, text)))
                return
            conn = session.conn
        try:
            self._serve(conn, message, is_request, stateless, extra)
        finally:
            if session is not None:
                server.sessions.release(session)

    def _serve(
        self,
        conn: Connection,
        message: Any,
        is_request: bool,
        stateless: bool,
        extra: dict[str, str],
    ) -> None:
        server = self.server
        if not is_request:
            replies: queue.Queue[JSONObject | None] = queue.Queue()
            server.dispatcher.handle_message(conn, message, replies.put)
            if replies.empty():
                self._empty(HTTPStatus.ACCEPTED)
            else:
                answer = replies.get()
                self._json(HTTPStatus.BAD_REQUEST, answer or {})
            return
        headers = self.headers.lower() if stateless else None
        if message.get("method") != "resources/read":
            self._answer(conn, message, headers, stateless, extra)
            return
        # A read's answer is built and sent under the cap on reads at once.
        if not server.reads.acquire(timeout=server.read_wait_s):
            text = f"{READS_AT_ONCE} resource reads are being served; retry in a moment."
            busy = error_response(message["id"], RpcError(INVALID_REQUEST, text))
            self._json(HTTPStatus.SERVICE_UNAVAILABLE, busy, {"Retry-After": "5", **extra})
            return
        try:
            self._answer(conn, message, headers, stateless, extra)
        finally:
            server.reads.release()

    def _answer(
        self,
        conn: Connection,
        message: JSONObject,
        headers: dict[str, str] | None,
        stateless: bool,
        extra: dict[str, str],
    ) -> None:
        """Run the request and write its progress (as SSE events) and its response."""
        replies = ReplyQueue()
        self.server.dispatcher.handle_message(conn, message, replies.put, headers)
        accepts_sse = "text/event-stream" in self.headers.get("Accept", "")
        streaming = accepts_sse and message.get("method") == "tools/call"
        if streaming:
            self.close_connection = True  # the stream ends with the response
            stream_headers = {**extra, "Content-Type": "text/event-stream"}
            self._send(HTTPStatus.OK, {**stream_headers, "Cache-Control": "no-cache"}, None)
        while True:
            try:
                item = replies.get(POLL_S)
            except queue.Empty:
                if stateless and self._client_gone():
                    # 2026-07-28 over HTTP: closing the stream is the cancellation.
                    conn.cancel(message["id"])
                continue
            final = item is None or "id" in item
            if streaming:
                if item is not None and not self._event(item) and stateless:
                    conn.cancel(message["id"])
            elif item is None:
                self._empty(HTTPStatus.NO_CONTENT)
            elif final:
                status = HTTPStatus.OK
                if stateless and "error" in item:
                    status = HTTPStatus(HTTP_STATUS_FOR_ERROR.get(item["error"]["code"], 200))
                self._json(status, item, extra)
            if final:
                return
