"""A hijacked attach (or exec) connection: raw stdin out, multiplexed output in.

The engine frames each chunk of output with an 8-byte header: the stream
(1 stdout, 2 stderr), three zero bytes, and the length (big-endian).
"""

from __future__ import annotations

import select
import socket

from pybox._core.errors import EngineError

SEND_TIMEOUT_S = 60.0
_HEADER_BYTES = 8
_RECV_BYTES = 262144


def frame(source: int, data: bytes) -> bytes:
    """One chunk of output, framed as the engine frames it (what `DockerAttachStream` reads)."""
    return bytes([source, 0, 0, 0]) + len(data).to_bytes(_HEADER_BYTES - 4, "big") + data


class DockerAttachStream:
    """Implements `AttachStream` over a socket the engine has upgraded to a raw stream."""

    def __init__(self, sock: socket.socket, leftover: bytes) -> None:
        self._sock = sock
        self._buffer = bytearray(leftover)
        self._stream = 0
        self._remaining = 0
        self._ended = False

    def fileno(self) -> int:
        return self._sock.fileno()

    def has_pending(self) -> bool:
        if self._buffer or self._ended:
            return True
        try:
            readable, _, _ = select.select([self._sock], [], [], 0)
        except (OSError, ValueError):
            return True  # a connection that cannot be polled is no good either
        return bool(readable)

    def send(self, data: bytes) -> None:
        self._sock.settimeout(SEND_TIMEOUT_S)
        try:
            self._sock.sendall(data)
        except OSError as exc:
            raise EngineError(
                f"Lost the attach connection to the box while sending: {exc}"
            ) from exc

    def _take(self) -> tuple[int, bytes] | None:
        """One chunk from the buffer, if the buffer holds one."""
        while True:
            if self._remaining:
                if not self._buffer:
                    return None
                chunk = bytes(self._buffer[: self._remaining])
                del self._buffer[: len(chunk)]
                self._remaining -= len(chunk)
                return (self._stream, chunk)
            if len(self._buffer) < _HEADER_BYTES:
                return None
            self._stream = self._buffer[0]
            self._remaining = int.from_bytes(self._buffer[4:8], "big")
            del self._buffer[:_HEADER_BYTES]

    def read(self, timeout_s: float) -> tuple[int, bytes] | None:
        chunk = self._take()
        if chunk is not None:
            return chunk
        if self._ended:
            return (0, b"")
        try:
            readable, _, _ = select.select([self._sock], [], [], max(timeout_s, 0.0))
            if not readable:
                return None
            data = self._sock.recv(_RECV_BYTES)
        except OSError as exc:
            raise EngineError(
                f"Lost the attach connection to the box while reading: {exc}"
            ) from exc
        if not data:
            self._ended = True
            return (0, b"")
        self._buffer += data
        return self._take()

    def close(self) -> None:
        try:
            self._sock.close()
        except OSError:
            pass
