"""How bytes reach the engine: the seam where TCP+TLS or ssh would plug in.

The client asks a transport for a connected stream socket and speaks HTTP/1.1
over it (`http1`); it never opens a socket itself. `UnixTransport` is today's only one.
"""

from __future__ import annotations

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
