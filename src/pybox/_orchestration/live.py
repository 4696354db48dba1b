"""A run's events, delivered away from the thread that watches its box.

The watch loop enforces the deadline, the kill and the removal, so it must
never wait on a caller's code (a slow callback, a stalled terminal, a pipe
nobody reads). `EventPump` hands events to a sink on a thread of its own, in
order. `EventStream` runs a whole run on a worker thread and gives its events
to whoever iterates; leaving early stops the run, and the box is still
removed. Memory stays bounded either way: output events stop at the output
cap of each stream (see `pybox._core.events`).
"""

from __future__ import annotations

import queue
import threading
import weakref
from collections.abc import Callable
from typing import Generic, TypeVar

from pybox._core.events import EventSink, RunEvent

T = TypeVar("T")


class _End:
    """Put after the last event: nothing more comes."""


_END = _End()


class EventPump:
    """Calls `sink` with each event handed in, in order, on a thread of its own.

    Handing in never blocks. A sink that raises is not called again; its
    exception is kept in `error` for the caller to report once the run is over.
    """

    def __init__(self, sink: EventSink, *, name: str = "pybox-events") -> None:
        self._sink = sink
        self._queue: queue.SimpleQueue[RunEvent | _End] = queue.SimpleQueue()
        self.error: Exception | None = None
        self._thread = threading.Thread(target=self._deliver, name=name, daemon=True)
        self._thread.start()

    def __call__(self, event: RunEvent) -> None:
        self._queue.put(event)

    def _deliver(self) -> None:
        while True:
            event = self._queue.get()
            if isinstance(event, _End):
                return
            if self.error is not None:
                continue
            try:
                self._sink(event)
            except Exception as exc:  # the caller's code: kept, reported after the run
                self.error = exc

    def close(self) -> None:
        """Wait until every event handed in so far has reached the sink."""
        self._queue.put(_END)
        self._thread.join()


class EitherEvent(threading.Event):
    """A cancel flag that is set when it is, or when `other` (the caller's) is.

    The watch loop only asks `is_set()`, so a stream's own stop and the caller's
    `cancel` can end the same run without one touching the other's flag.
    """

    def __init__(self, other: threading.Event | None) -> None:
        super().__init__()
        self._other = other

    def is_set(self) -> bool:
        return super().is_set() or (self._other is not None and self._other.is_set())


# What a stream runs: given the sink for its events and its cancel flag, the result.
StreamJob = Callable[[EventSink, threading.Event], T]


class _Worker(Generic[T]):
    """What the worker thread shares with the stream. It holds no reference to the
    stream itself, so dropping the stream (leaving a `for` loop) lets it be stopped."""

    def __init__(self, cancel: threading.Event) -> None:
        self.events: queue.SimpleQueue[RunEvent | _End] = queue.SimpleQueue()
        self.cancel = cancel
        self.done = threading.Event()
        self.result: list[T] = []
        self.error: BaseException | None = None
        self.thread: threading.Thread | None = None

    def work(self, job: StreamJob[T]) -> None:
        try:
            self.result.append(job(self.events.put, self.cancel))
        except BaseException as exc:  # handed to the caller's thread, raised there
            self.error = exc
        finally:
            self.done.set()
            self.events.put(_END)

    def stop(self) -> None:
        self.cancel.set()
        if self.thread is not None and self.thread is not threading.current_thread():
            self.thread.join()


class EventStream(Generic[T]):
    """The events of a run that happens on a worker thread, as an iterator.

    Iterating yields each event as it arrives and ends after the run is over;
    an error the run raised is raised by the iteration. `result` waits for the
    end and returns what the run returned. `close()` (also: leaving a `with`
    block, or dropping the stream, as a `for` loop left with `break` does)
    stops the run if it is still going and waits until it is over, box removed.
    """

    def __init__(
        self, job: StreamJob[T], *, cancel: threading.Event | None = None, name: str = "pybox-run"
    ) -> None:
        self._worker: _Worker[T] = _Worker(EitherEvent(cancel))
        self._ended = False
        thread = threading.Thread(target=self._worker.work, args=(job,), name=name, daemon=True)
        self._worker.thread = thread
        self._stop = weakref.finalize(self, self._worker.stop)
        thread.start()

    def __iter__(self) -> EventStream[T]:
        return self

    def __next__(self) -> RunEvent:
        if self._ended:
            raise StopIteration
        item = self._worker.events.get()
        if isinstance(item, _End):
            self._ended = True
            if self._worker.error is not None:
                raise self._worker.error
            raise StopIteration
        return item

    @property
    def done(self) -> bool:
        """Whether the run is over (its box removed)."""
        return self._worker.done.is_set()

    @property
    def result(self) -> T:
        """What the run returned, once it is over (waits for that); its error, if it raised."""
        self._worker.done.wait()
        if self._worker.error is not None:
            raise self._worker.error
        return self._worker.result[0]

    def close(self) -> None:
        """Stop the run if it is still going; return once it is over and its box removed."""
        self._stop()
        self._ended = True

    def __enter__(self) -> EventStream[T]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
