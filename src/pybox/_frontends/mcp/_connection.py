"""What one MCP client shares across its messages (a stdio process, a handshake-era
HTTP session, or one stateless HTTP exchange): its protocol version, its requests
in flight (to cancel them) and its worker threads; and the server's log line."""

from __future__ import annotations

import sys
import threading
from typing import Any

from pybox._core.display import escape_lines
from pybox._frontends.mcp._protocol import RequestId, is_request_id


def log(message: str) -> None:
    """Logs go to stderr: stdout belongs to the protocol. A client's words in them
    (a cancel reason, a request line) are escaped, like everything pybox prints."""
    sys.stderr.write(f"pybox mcp: {escape_lines(message)}\n")
    sys.stderr.flush()


def _key(request_id: RequestId) -> tuple[str, RequestId]:
    # "1" and 1 are different JSON-RPC ids.
    return (type(request_id).__name__, request_id)


class Connection:
    """The state one client shares across its messages: a stdio process, a
    handshake-era HTTP session, or a single stateless HTTP exchange."""

    def __init__(self) -> None:
        self.protocol_version: str | None = None  # set by `initialize`
        self.client_info: Any = None
        self._in_flight: dict[tuple[str, RequestId], threading.Event] = {}
        self._lock = threading.Lock()
        self._workers: list[threading.Thread] = []

    def begin(self, request_id: RequestId) -> threading.Event | None:
        """Register a request in flight; None when its id is already in flight."""
        with self._lock:
            if _key(request_id) in self._in_flight:
                return None
            event = threading.Event()
            self._in_flight[_key(request_id)] = event
            return event

    def end(self, request_id: RequestId) -> None:
        with self._lock:
            self._in_flight.pop(_key(request_id), None)

    def cancel(self, request_id: Any) -> bool:
        if not is_request_id(request_id):
            return False
        with self._lock:
            event = self._in_flight.get(_key(request_id))
        if event is None:
            return False
        event.set()
        return True

    def cancel_all(self) -> None:
        with self._lock:
            events = list(self._in_flight.values())
        for event in events:
            event.set()

    def add_worker(self, thread: threading.Thread) -> None:
        with self._lock:
            self._workers = [t for t in self._workers if t.is_alive()]
            self._workers.append(thread)

    def join_workers(self, timeout_s: float) -> None:
        with self._lock:
            workers = list(self._workers)
        for thread in workers:
            thread.join(timeout_s)
