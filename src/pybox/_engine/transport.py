"""How bytes reach the engine: the seam where TCP+TLS or ssh would plug in.

The client asks a transport for a connected stream socket and speaks HTTP/1.1
over it; it never opens a socket itself. `UnixTransport` is today's only one.
"""

from __future__ import annotations

import http.client
import socket
from typing import Protocol

from pybox._engine.endpoint import EngineEndpoint


class Transport(Protocol):
    """Opens a fresh connection to the engine for each request."""

    @property
    def endpoint(self) -> EngineEndpoint: ...

    def open(self, timeout_s: float) -> socket.socket:
        """A connected socket, or OSError (the client maps it in one place)."""
        ...


class UnixTransport:
    """The engine's API on a local unix socket."""

    def __init__(self, endpoint: EngineEndpoint) -> None:
        self._endpoint = endpoint

    @property
    def endpoint(self) -> EngineEndpoint:
        return self._endpoint

    def open(self, timeout_s: float) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout_s)
        try:
            sock.connect(self._endpoint.socket_path)
        except BaseException:
            sock.close()
            raise
        return sock


class TransportHTTPConnection(http.client.HTTPConnection):
    """http.client over whatever socket the transport opens."""

    def __init__(self, transport: Transport, timeout_s: float) -> None:
        # The Host header is fixed ("docker"); the name here is never resolved.
        super().__init__("localhost", timeout=timeout_s)
        self._transport = transport

    def connect(self) -> None:
        self.sock = self._transport.open(self.timeout if self.timeout is not None else 60.0)
