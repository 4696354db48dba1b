"""A run's output while it runs, and pages of it by byte offset.

The run's events (`pybox._core.events.OutputChunk`) land in a `LiveOutput`:
per stream, the bytes in arrival order, never more than the run's output cap
(the relay stops there too), so a run that prints without end holds at most
`limits.output_bytes` per stream here. Readers page it by byte offset: a page
says where it starts, where the next one starts and whether more is buffered.
A page never ends inside a UTF-8 character while more bytes may follow, so a
character is never split between two pages.

Once the run has finished its output comes from the outcome (the receipt's
head-and-tail capture), and the live bytes are let go (`release`).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Literal

from pybox._core.events import OutputChunk, RunEvent

Stream = Literal["stdout", "stderr"]
STREAMS: tuple[Stream, Stream] = ("stdout", "stderr")


@dataclass(frozen=True)
class Page:
    """Bytes `offset` to `next_offset` of a stream, out of `buffered` so far."""

    stream: Stream
    offset: int
    data: bytes
    buffered: int
    more: bool  # more is buffered from next_offset on

    @property
    def next_offset(self) -> int:
        return self.offset + len(self.data)


def character_end(data: bytes | bytearray, start: int, end: int) -> int:
    """`end`, moved back so that data[start:end] does not end inside a UTF-8 character.

    Only a lead byte whose sequence runs past `end` moves it; bytes that are not
    UTF-8 at all are passed on as they are (they show as replacement characters).
    """
    for back in range(1, 5):  # a UTF-8 character is at most 4 bytes
        at = end - back
        if at < start:
            return end
        byte = data[at]
        if byte & 0xC0 == 0x80:  # a continuation byte: its lead is further back
            continue
        if byte < 0xC0 or byte >= 0xF8:  # ASCII, or never a lead byte: complete
            return end
        size = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
        return at if at + size > end else end
    return end


class LiveOutput:
    """What a running run printed so far, per stream, at most `cap_bytes` each."""

    def __init__(self, cap_bytes: int) -> None:
        self.cap_bytes = cap_bytes
        self._data: dict[Stream, bytearray] = {"stdout": bytearray(), "stderr": bytearray()}
        self._lock = threading.Lock()
        self._released = False

    def on_event(self, event: RunEvent) -> None:
        """The run's event sink: output is appended in order, up to the cap."""
        if not isinstance(event, OutputChunk):
            return
        with self._lock:
            buffer = self._data[event.stream]
            if self._released or event.offset != len(buffer):
                return  # only ever in order; a gap would make every offset after it wrong
            buffer += event.data[: max(self.cap_bytes - len(buffer), 0)]

    def sizes(self) -> dict[Stream, int]:
        with self._lock:
            return {stream: len(data) for stream, data in self._data.items()}

    def page(self, stream: Stream, offset: int, max_bytes: int) -> Page | None:
        """At most `max_bytes` from `offset` (clamped to what is buffered); None once
        released (the run has finished: read its outcome instead)."""
        with self._lock:
            if self._released:
                return None
            data = self._data[stream]
            size = len(data)
            start = min(max(offset, 0), size)
            end = min(start + max_bytes, size)
            more = end < size
            # Hold back a character cut off by the page's end (its rest is buffered) or
            # by the end of what arrived so far (its rest may come, unless at the cap).
            if more or size < self.cap_bytes:
                end = character_end(data, start, end)
            return Page(stream, start, bytes(data[start:end]), size, more)

    def tail(self, stream: Stream, since: int, max_bytes: int) -> Page | None:
        """The newest at most `max_bytes` from `since` on: bytes before the page's
        offset were skipped. None once released."""
        with self._lock:
            if self._released:
                return None
            data = self._data[stream]
            size = len(data)
            since = min(max(since, 0), size)
            start = max(since, size - max_bytes)
            for _ in range(3):  # begin at a character, not inside one
                if start > since and start < size and data[start] & 0xC0 == 0x80:
                    start += 1
            end = character_end(data, start, size) if size < self.cap_bytes else size
            return Page(stream, start, bytes(data[start:end]), size, False)

    def text(self, stream: Stream) -> str | None:
        """Everything buffered so far as text (None once released)."""
        with self._lock:
            if self._released:
                return None
            return self._data[stream].decode("utf-8", "replace")

    def release(self) -> None:
        """Let the bytes go: the finished run's outcome holds its output now."""
        with self._lock:
            self._released = True
            for data in self._data.values():
                data.clear()


def kept_from(kept: bytes, total: int, cap_bytes: int, offset: int) -> tuple[int, bytes]:
    """A finished stream's kept bytes from byte `offset` of what it printed, and where
    they start.

    The receipt keeps everything when the stream printed at most `cap_bytes`;
    otherwise the first half, a marker line and the last half (see
    `pybox._core.capture`). An offset in the dropped middle starts at the tail.
    """
    head_limit = cap_bytes - cap_bytes // 2
    offset = min(max(offset, 0), total)
    if total <= cap_bytes:  # kept whole
        return offset, kept[offset:]
    if offset <= head_limit:
        return offset, kept[offset:]
    tail_len = cap_bytes // 2
    tail_start = total - tail_len
    tail = kept[len(kept) - tail_len :] if tail_len else b""
    if offset <= tail_start:
        return tail_start, tail
    return offset, tail[offset - tail_start :]
