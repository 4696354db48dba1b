"""The Streamable HTTP transport, on the standard library's http.server.

One endpoint, `/mcp`, serves both eras:
- 2026-07-28: every POST is a self-contained request (no session); a client
  cancels by closing the response stream;
- 2025-11-25 and older: `initialize` opens a session (`Mcp-Session-Id`),
  later POSTs name it, `notifications/cancelled` cancels, DELETE ends it.

Every request needs the bearer token. A browser page cannot drive the server:
an `Origin` that is not this server's own (or one the operator allowed) is
refused, and so is a `Host` that is not a loopback name while bound to
loopback (DNS rebinding).
"""

from __future__ import annotations

import hmac
import queue
import secrets
import select
import socket
import threading
from collections import OrderedDict
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from pybox._core.addresses import is_loopback
from pybox._core.errors import ConfigError
from pybox._frontends.mcp._dispatcher import Connection, Dispatcher, log
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
TOKEN_ENV = "PYBOX_MCP_TOKEN"  # noqa: S105 (the variable's name, not a secret)
SESSION_HEADER = "Mcp-Session-Id"
MAX_SESSIONS = 64
POLL_S = 0.25
LOOPBACK_NAMES = {"localhost", "127.0.0.1", "::1"}


@dataclass(frozen=True)
class HttpSettings:
    host: str
    port: int
    token: str
    allowed_origins: tuple[str, ...] = ()


def parse_address(text: str) -> tuple[str, int]:
    """`HOST:PORT`, `[V6]:PORT` or `PORT` (loopback)."""
    host, sep, port_text = text.rpartition(":")
    if not sep:
        host, port_text = "127.0.0.1", text
    host = host.strip("[]") or "127.0.0.1"
    try:
        port = int(port_text)
    except ValueError:
        raise ConfigError(f"--http {text!r}: the port must be a number (HOST:PORT).") from None
    if not 0 <= port <= 65535:
        raise ConfigError(f"--http {text!r}: the port must be between 0 and 65535.")
    return host, port


def http_settings(
    address: str, environ: dict[str, str] | Any, allowed_origins: tuple[str, ...]
) -> tuple[HttpSettings, bool]:
    """The settings, and whether the token was generated (so it must be shown)."""
    host, port = parse_address(address)
    token = environ.get(TOKEN_ENV) or ""
    if not is_loopback(host) and not token:
        raise ConfigError(
            f"Refusing to serve on {host}, which is not a loopback address, without a token "
            f"chosen by the operator: set {TOKEN_ENV} to a long random secret, or bind "
            "127.0.0.1."
        )
    if token and len(token) < 16:
        raise ConfigError(f"{TOKEN_ENV} is too short ({len(token)} characters); use 16 or more.")
    generated = not token
    return HttpSettings(host, port, token or secrets.token_urlsafe(32), allowed_origins), generated


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, settings: HttpSettings, dispatcher: Dispatcher) -> None:
        self.address_family = socket.AF_INET6 if ":" in settings.host else socket.AF_INET
        super().__init__((settings.host, settings.port), _Handler)
        self.settings = settings
        self.dispatcher = dispatcher
        self.sessions: OrderedDict[str, Connection] = OrderedDict()
        self.sessions_lock = threading.Lock()

    def new_session(self) -> tuple[str, Connection]:
        session_id = secrets.token_hex(16)
        conn = Connection()
        with self.sessions_lock:
            self.sessions[session_id] = conn
            while len(self.sessions) > MAX_SESSIONS:
                _, old = self.sessions.popitem(last=False)
                old.cancel_all()
        return session_id, conn

    def session(self, session_id: str) -> Connection | None:
        with self.sessions_lock:
            return self.sessions.get(session_id)

    def end_session(self, session_id: str) -> bool:
        with self.sessions_lock:
            conn = self.sessions.pop(session_id, None)
        if conn is None:
            return False
        conn.cancel_all()
        return True


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    server_version = "pybox-mcp"

    def log_message(self, format: str, *args: Any) -> None:
        log(f"http {self.address_string()} {format % args}")

    # -- checks every request passes ----------------------------------------------------

    def _allowed(self) -> bool:
        settings = self.server.settings
        if urlsplit(self.path).path != ENDPOINT:
            self._plain(HTTPStatus.NOT_FOUND, f"Not found: the MCP endpoint is {ENDPOINT}.")
            return False
        origin = self.headers.get("Origin")
        if origin is not None and not self._origin_ok(origin):
            self._plain(HTTPStatus.FORBIDDEN, f"Origin {origin!r} is not allowed.")
            return False
        if is_loopback(settings.host):
            host = urlsplit(f"//{self.headers.get('Host', '')}").hostname or ""
            if host not in LOOPBACK_NAMES:
                self._plain(HTTPStatus.FORBIDDEN, f"Host {host!r} is not a loopback name.")
                return False
        given = self.headers.get("Authorization", "")
        expected = f"Bearer {settings.token}"
        if not hmac.compare_digest(given.encode(), expected.encode()):
            self._plain(
                HTTPStatus.UNAUTHORIZED,
                "A bearer token is required (Authorization: Bearer <token>); the server "
                f"printed it at start, or the operator set it in {TOKEN_ENV}.",
                {"WWW-Authenticate": 'Bearer realm="pybox"'},
            )
            return False
        return True

    def _origin_ok(self, origin: str) -> bool:
        settings = self.server.settings
        if origin in settings.allowed_origins:
            return True
        parts = urlsplit(origin)
        return (
            parts.scheme == "http"
            and (parts.hostname or "") in LOOPBACK_NAMES
            and parts.port == self.server.server_address[1]
        )

    # -- responses ------------------------------------------------------------------------

    def _plain(self, status: HTTPStatus, text: str, headers: dict[str, str] | None = None) -> None:
        # A refusal leaves any request body unread: the connection cannot be reused.
        self.close_connection = True
        body = (text + "\n").encode()
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _json(
        self, status: int, message: JSONObject, headers: dict[str, str] | None = None
    ) -> None:
        body = encode(message)
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _empty(self, status: HTTPStatus, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", "0")
        self.end_headers()

    # -- methods --------------------------------------------------------------------------

    def do_GET(self) -> None:
        if self._allowed():
            # No server-initiated stream: this server only answers requests.
            self._empty(HTTPStatus.METHOD_NOT_ALLOWED, {"Allow": "POST, DELETE"})

    def do_DELETE(self) -> None:
        if not self._allowed():
            return
        session_id = self.headers.get(SESSION_HEADER)
        if session_id and self.server.end_session(session_id):
            self._empty(HTTPStatus.NO_CONTENT)
        else:
            self._plain(HTTPStatus.NOT_FOUND, "No such session.")

    def do_POST(self) -> None:
        if not self._allowed():
            return
        dispatcher = self.server.dispatcher
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            self._plain(HTTPStatus.LENGTH_REQUIRED, "Content-Length is required.")
            return
        if length > dispatcher.max_frame_bytes or length < 0:
            self.close_connection = True
            self._json(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, dispatcher.oversized(length))
            return
        body = self.rfile.read(length)
        try:
            message = decode(body)
        except (ValueError, RecursionError):
            self._json(400, error_response(None, RpcError(PARSE_ERROR, "Parse error.")))
            return
        self._dispatch(message)

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
        if stateless or method in ("initialize", "server/discover") or not is_dict:
            conn = Connection()
            if method == "initialize" and is_request:
                session_id, conn = server.new_session()
                extra[SESSION_HEADER] = session_id
        else:
            session_id = self.headers.get(SESSION_HEADER) or ""
            found = server.session(session_id) if session_id else None
            if found is None:
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
            conn = found
        if not is_request:
            replies: queue.Queue[JSONObject | None] = queue.Queue()
            server.dispatcher.handle_message(conn, message, replies.put)
            if replies.empty():
                self._empty(HTTPStatus.ACCEPTED)
            else:
                answer = replies.get()
                self._json(HTTPStatus.BAD_REQUEST, answer or {})
            return
        headers = {k.lower(): v for k, v in self.headers.items()} if stateless else None
        self._answer(conn, message, headers, stateless, extra)

    def _answer(
        self,
        conn: Connection,
        message: JSONObject,
        headers: dict[str, str] | None,
        stateless: bool,
        extra: dict[str, str],
    ) -> None:
        """Run the request and write its progress (as SSE events) and its response."""
        replies: queue.Queue[JSONObject | None] = queue.Queue()
        self.server.dispatcher.handle_message(conn, message, replies.put, headers)
        accepts_sse = "text/event-stream" in self.headers.get("Accept", "")
        streaming = accepts_sse and message.get("method") == "tools/call"
        if streaming:
            self.send_response(HTTPStatus.OK)
            for name, value in extra.items():
                self.send_header(name, value)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.end_headers()
            self.close_connection = True  # the stream ends with the response
        while True:
            try:
                item = replies.get(timeout=POLL_S)
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
            self.wfile.write(b"event: message\ndata: " + encode(message) + b"\n\n")
            self.wfile.flush()
        except OSError:
            return False
        return True

    def _client_gone(self) -> bool:
        """True when the client closed its side of the connection."""
        sock = self.connection
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
        with self._server.sessions_lock:
            sessions = list(self._server.sessions.values())
            self._server.sessions.clear()
        for conn in sessions:
            conn.cancel_all()
        self.dispatcher.toolbox.registry.close()
        self._server.server_close()
