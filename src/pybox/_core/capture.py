"""Bounded capture of an output stream: keep the head and the tail (pure).

However much a program prints, pybox keeps at most `limit_bytes` of it: the
first half and the last half, with the total count and a sha256 of the whole
stream so truncation is visible and the full stream is still identifiable.
"""

from __future__ import annotations

import hashlib

from pybox._core.receipt import StreamReport


class HeadTailCapture:
    def __init__(self, limit_bytes: int) -> None:
        self._head_limit = limit_bytes - limit_bytes // 2
        self._tail_limit = limit_bytes // 2
        self._head = bytearray()
        self._tail = bytearray()
        self._total = 0
        self._digest = hashlib.sha256()

    def feed(self, data: bytes) -> None:
        self._total += len(data)
        self._digest.update(data)
        room = self._head_limit - len(self._head)
        if room > 0:
            self._head += data[:room]
            data = data[room:]
        if data and self._tail_limit:
            self._tail += data[-self._tail_limit :]
            excess = len(self._tail) - self._tail_limit
            if excess > 0:
                del self._tail[:excess]

    @property
    def total_bytes(self) -> int:
        return self._total

    @property
    def truncated(self) -> bool:
        return self._total > len(self._head) + len(self._tail)

    def kept(self) -> bytes:
        """The kept bytes; when truncated, a marker line separates head and tail."""
        if not self.truncated:
            return bytes(self._head + self._tail)
        dropped = self._total - len(self._head) - len(self._tail)
        marker = (
            f"\n[pybox: output truncated: {dropped} bytes dropped between the first "
            f"{len(self._head)} and the last {len(self._tail)} bytes]\n"
        ).encode()
        return bytes(self._head) + marker + bytes(self._tail)

    def report(self) -> StreamReport:
        return StreamReport(
            bytes_total=self._total,
            bytes_kept=len(self._head) + len(self._tail),
            truncated=self.truncated,
            sha256=self._digest.hexdigest(),
        )
