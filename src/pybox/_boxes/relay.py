"""A run's events on their way to the caller's sink (see `pybox._core.events`)."""

from __future__ import annotations

from typing import Literal

from pybox._core.events import EventSink, OutputChunk, RunEvent


class EventRelay:
    """Passes a run's events to its sink, guarded: a sink that raises is dropped.

    Output is passed on as it arrives until a stream has delivered its cap
    (`limits.output_bytes`) live; offsets count every byte the stream printed.
    """

    def __init__(self, sink: EventSink | None, cap_bytes: int) -> None:
        self._sink = sink
        self._cap_bytes = cap_bytes
        self._offsets = {"stdout": 0, "stderr": 0}
        self.sink_error: str | None = None

    def emit(self, event: RunEvent) -> None:
        sink = self._sink
        if sink is None:
            return
        try:
            sink(event)
        except Exception as exc:  # a watcher's failure must not end the run
            self._sink = None
            self.sink_error = f"{type(exc).__name__}: {exc}"

    def output(self, stream: Literal["stdout", "stderr"], data: bytes) -> None:
        offset = self._offsets[stream]
        self._offsets[stream] = offset + len(data)
        room = self._cap_bytes - offset
        if room > 0 and data and self._sink is not None:
            self.emit(OutputChunk(stream, data[:room], offset))
