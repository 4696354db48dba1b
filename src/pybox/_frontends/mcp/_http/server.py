"""The HTTP server: `HttpServer`, each connection's loop, and the checks every
request passes before any body is read (path, Host, Origin, bearer token)."""

from __future__ import annotations

import hmac
import re
from http import HTTPStatus
from urllib.parse import urlsplit

from pybox._core.addresses import is_loopback
from pybox._frontends.mcp._connection import log
from pybox._frontends.mcp._dispatcher import Dispatcher
from pybox._frontends.mcp._http.exchange import SESSION_HEADER, Exchange
from pybox._frontends.mcp._http.listener import Listener
from pybox._frontends.mcp._http.settings import TOKEN_ENV, HttpSettings, exposure_warning
from pybox._frontends.mcp._http.wire import Closed, HttpError, SocketReader

ENDPOINT = "/mcp"
LOOPBACK_NAMES = {"localhost", "127.0.0.1", "::1"}
_HOST_VALUE = re.compile(r"(?:[A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?")


class _Handler(Exchange):
    """One connection: its requests one after another (keep-alive), each checked."""

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


class HttpServer:
    def __init__(self, settings: HttpSettings, dispatcher: Dispatcher) -> None:
        self._server = Listener(settings, dispatcher, _Handler)
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
