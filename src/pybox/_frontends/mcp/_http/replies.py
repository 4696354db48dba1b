"""Writing to the client: responses, progress events, and whether it is still there."""

from __future__ import annotations

import select
import socket
import socketserver
from http import HTTPStatus

from pybox._frontends.mcp._http.wire import KIB
from pybox._frontends.mcp._protocol import JSONObject, encode

# Each piece of a response must be taken by the client within this time.
WRITE_PIECE_BYTES = 64 * KIB
WRITE_TIMEOUT_S = 30.0


class Replies(socketserver.BaseRequestHandler):
    """A connection's writing side; `close_connection` says whether it ends after this."""

    request: socket.socket
    close_connection: bool

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
