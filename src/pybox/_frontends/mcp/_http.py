"""The Streamable HTTP transport, on the standard library's http.server.

One endpoint, `/mcp`, serves both eras:
- 2026-07-28: every POST is a self-contained request (no session); a client
  cancels by closing the response stream;
- 2025-11-25 and older: `initialize` opens a session (`Mcp-Session-Id`),
  later POSTs name it, `notifications/cancelled` cancels, DELETE ends it.

Every request needs the bearer token, checked as soon as the request head is
read (before any body). A browser page cannot drive the server: an `Origin`
that is not this server's own (or one the operator allowed) is refused, and so
is a `Host` that is not a loopback name while bound to loopback (DNS
rebinding). Connections, heads, bodies and waits are bounded by `_httpwire`
before the token is known; sessions are never pushed out while in use.
"""

from __future__ import annotations

import hmac
import os
import queue
import re
import select
import socket
import socketserver
import threading
from dataclasses import replace
from http import HTTPStatus
from typing import Any, cast
from urllib.parse import urlsplit

from pybox._core.addresses import is_loopback
from pybox._frontends.mcp._connection import Connection, log
from pybox._frontends.mcp._dispatcher import Dispatcher
from pybox._frontends.mcp._httpsessions import Session, Sessions
from pybox._frontends.mcp._httpsettings import (
    TOKEN_ENV,
    HttpSettings,
    add_http_arguments,
    exposure_warning,
    http_limits,
    http_settings,
    parse_address,
)
from pybox._frontends.mcp._httpwire import (
    KIB,
    ByteBudget,
    Closed,
    ConnectionGate,
    Head,
    Headers,
    HttpError,
    ReplyQueue,
    SocketReader,
    json_values_within,
    refuse,
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
    encode,
    error_response,
)

ENDPOINT = "/mcp"
SESSION_HEADER = "Mcp-Session-Id"
# resources/read answers (up to the read cap each) built and sent at once.
READS_AT_ONCE = 2
READ_WAIT_S = 30.0
# Each piece of a response must be taken by the client within this time.
WRITE_PIECE_BYTES = 64 * KIB
WRITE_TIMEOUT_S = 30.0
POLL_S = 0.25
LOOPBACK_NAMES = {"localhost", "127.0.0.1", "::1"}
# Re-exported: the command line and the tests take the settings from here.
__all__ = [
    "HttpServer",
    "HttpSettings",
    "add_http_arguments",
    "exposure_warning",
    "http_limits",
    "http_settings",
    "parse_address",
]
_HOST_VALUE = re.compile(r"(?:[A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?")


_UNPARSED = object()  # the body was answered already (refused or not JSON)


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, settings: HttpSettings, dispatcher: Dispatcher) -> None:
        self.address_family = socket.AF_INET6 if ":" in settings.host else socket.AF_INET
        super().__init__((settings.host, settings.port), _Handler)
        # One body cap for both transports: the server's largest JSON-RPC message.
        self.limits = replace(settings.limits, max_body_bytes=dispatcher.max_frame_bytes)
        self.settings = settings
        self.dispatcher = dispatcher
        self.gate = ConnectionGate(self.limits.max_connections)
        self.bodies = ByteBudget(self.limits.body_budget_bytes)
        self.reads = threading.BoundedSemaphore(READS_AT_ONCE)
        self.read_wait_s = READ_WAIT_S
        self.sessions = Sessions()

    def process_request(self, request: Any, client_address: Any) -> None:
        # Runs in the accepting thread: never blocks, never waits for the client.
        if not self.gate.admit(request):
            refuse(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.gate.leave(request)
            raise

    def handle_error(self, request: Any, client_address: Any) -> None:
        # One line, never a traceback, whatever a client sent (PYBOX_DEBUG shows it).
        log(f"http {client_address[0]}: a connection ended on an internal error")
        if os.environ.get("PYBOX_DEBUG"):
            super().handle_error(request, client_address)


class _Handler(socketserver.BaseRequestHandler):
    server: _Server
    request: socket.socket
    head: Head
    headers: Headers
    close_connection: bool

    def handle(self) -> None:
        server = self.server
        self.reader = SocketReader(self.request, server.limits)
        try:
            while True:
                try:
                    self.head = self.reader.read_head()
                except HttpError as refused:
                    self.close_connection = True
                    self._plain(refused.status, refused.text)
                    return
                if not server.gate.serving(self.request):
                    return  # pushed out while its head arrived
                self.headers = self.head.headers
                connection = (self.headers.get("Connection") or "").lower()
                self.close_connection = self.head.version == "HTTP/1.0" or "close" in connection
                try:
                    self._route()
                except HttpError as refused:
                    self.close_connection = True
                    self._plain(refused.status, refused.text)
                if self.close_connection:
                    return
                server.gate.waiting(self.request)
        except (Closed, OSError):
            return  # the client left or was too slow: nothing more to say
        finally:
            server.gate.leave(self.request)

    # -- checks every request passes, before any body is read ---------------------------

    def _route(self) -> None:
        try:
            path = urlsplit(self.head.target).path
        except ValueError:
            raise HttpError(400, "Malformed request target.") from None
        if path != ENDPOINT:
            raise HttpError(404, f"Not found: the MCP endpoint is {ENDPOINT}.")
        self._check_host_and_origin()
        given = self.headers.get("Authorization") or ""
        expected = f"Bearer {self.server.settings.token}"
        # Header bytes were read as latin-1; the operator's token is text (UTF-8 on the wire).
        if not hmac.compare_digest(given.encode("latin-1"), expected.encode()):
            self.close_connection = True  # any body stays unread
            self._plain(
                HTTPStatus.UNAUTHORIZED,
                "A bearer token is required (Authorization: Bearer <token>); the server "
                f"printed it at start, or the operator set it in {TOKEN_ENV}.",
                {"WWW-Authenticate": 'Bearer realm="pybox"'},
            )
            return
        method = self.head.method
        if method == "POST":
            self._post()
        elif method == "DELETE":
            session_id = self.headers.get(SESSION_HEADER)
            if session_id and self.server.sessions.end(session_id):
                self._empty(HTTPStatus.NO_CONTENT)
            else:
                self._plain(HTTPStatus.NOT_FOUND, "No such session.")
        else:
            # GET included: this server sends nothing unasked.
            self.close_connection = True
            self._empty(HTTPStatus.METHOD_NOT_ALLOWED, {"Allow": "POST, DELETE"})

    def _check_host_and_origin(self) -> None:
        settings = self.server.settings
        host_value = self.headers.get("Host")
        if host_value is None or not _HOST_VALUE.fullmatch(host_value):
            raise HttpError(400, "The Host header is missing or malformed.")
        if is_loopback(settings.host):
            host = urlsplit(f"//{host_value}").hostname or ""
            if host not in LOOPBACK_NAMES:
                raise HttpError(403, f"Host {host!r} is not a loopback name.")
        origin = self.headers.get("Origin")
        if origin is not None and not self._origin_ok(origin):
            raise HttpError(403, f"Origin {origin[:200]!r} is not allowed.")

    def _origin_ok(self, origin: str) -> bool:
        if origin in self.server.settings.allowed_origins:
            return True
        try:
            parts = urlsplit(origin)
            port = parts.port
        except ValueError:
            return False  # a malformed Origin is simply not an allowed one
        return (
            parts.scheme == "http"
            and (parts.hostname or "") in LOOPBACK_NAMES
            and port == self.server.server_address[1]
        )

    # -- responses ------------------------------------------------------------------------

    def _send(self, status: int, headers: dict[str, str], body: bytes | None) -> None:
        lines = [f"HTTP/1.1 {status} {HTTPStatus(status).phrase}", "Server: pybox-mcp"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        if body is not None:
            lines.append(f"Content-Length: {len(body)}")
        if self.close_connection:
            lines.append("Connection: close")
        self._write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + (body or b""))

    def _write(self, data: bytes) -> None:
        # A timeout per piece: a client that stops reading cannot hold the thread.
        self.request.settimeout(WRITE_TIMEOUT_S)
        view = memoryview(data)
        for start in range(0, len(view), WRITE_PIECE_BYTES):
            self.request.sendall(view[start : start + WRITE_PIECE_BYTES])

    def _plain(self, status: int, text: str, headers: dict[str, str] | None = None) -> None:
        body = (text + "\n").encode()
        self._send(status, {**(headers or {}), "Content-Type": "text/plain; charset=utf-8"}, body)

    def _json(
        self, status: int, message: JSONObject, headers: dict[str, str] | None = None
    ) -> None:
        self._send(status, {**(headers or {}), "Content-Type": "application/json"}, encode(message))

    def _empty(self, status: int, headers: dict[str, str] | None = None) -> None:
        self._send(status, headers or {}, b"")

    # -- POST: the body, within its caps --------------------------------------------------

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

    def _event(self, message: JSONObject) -> bool:
        try:
            self._write(b"event: message\ndata: " + encode(message) + b"\n\n")
        except OSError:
            return False
        return True

    def _client_gone(self) -> bool:
        """True when the client closed its side of the connection."""
        sock = self.request
        try:
            readable, _, _ = select.select([sock], [], [], 0)
            return bool(readable) and sock.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True


class HttpServer:
    def __init__(self, settings: HttpSettings, dispatcher: Dispatcher) -> None:
        self._server = _Server(settings, dispatcher)
        self.dispatcher = dispatcher

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        host = host.decode() if isinstance(host, bytes) else str(host)
        shown = f"[{host}]" if ":" in host else host
        return f"http://{shown}:{port}{ENDPOINT}"

    def serve(self) -> int:
        warning = exposure_warning(self._server.settings.host)
        if warning is not None:
            log(warning)
        log(f"serving MCP over Streamable HTTP at {self.url}")
        try:
            self._server.serve_forever(poll_interval=0.5)
        except KeyboardInterrupt:
            log("stopping: every run is stopped and its box removed")
        finally:
            self.close()
        return 0

    def shutdown(self) -> None:
        """Ask `serve()` (running in another thread) to return."""
        self._server.shutdown()

    def close(self) -> None:
        self._server.sessions.end_all()
        self.dispatcher.toolbox.registry.close()
        self._server.server_close()
