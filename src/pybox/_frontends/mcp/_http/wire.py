"""HTTP/1.1 on a socket, with every size and wait bounded before it is spent.

The standard library's `http.server` gives each connection a thread before a
single byte arrived, accepts 100 header lines of 64 KiB each, and reads a
body by its declared length: an anonymous client could hold threads and
memory without ever sending the token. This module is what the MCP transport
uses instead:

- `ConnectionGate`: at most `max_connections` connections at once. A
  connection still waiting for its request head can be pushed out by a new
  one (oldest first), so idle connections cannot keep clients out; when every
  slot serves a request, a new connection is refused at once (503).
- `SocketReader.read_head`: the request line and headers within
  `max_header_bytes`, `max_headers` lines and `read_timeout_s` from the first
  wait (a client trickling bytes is dropped when the time is up).
- `SocketReader.read_body`: a body by Content-Length or chunked, never over
  `max_body_bytes`, counted while read, each wait at most `read_timeout_s`.
- `ByteBudget`: bodies held at once across all connections.
- `json_values_within`: JSON values in a body, counted before it is parsed
  (a 60 MiB body of empty lists would otherwise take over 1.5 GB to parse).
- `ReplyQueue`: a request's replies on their way out; progress notifications
  wait there only while the client keeps up.
"""

from __future__ import annotations

import queue
import re
import socket
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, overload

MIB = 1024 * 1024
KIB = 1024
# Body bytes are received this many at a time (a bound on each recv's buffer).
RECV_BYTES = 256 * KIB
MAX_CHUNK_LINE_BYTES = 1024
MAX_JSON_VALUES = 250_000
REFUSAL = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
    b"Retry-After: 1\r\nConnection: close\r\nContent-Length: 64\r\n\r\n"
    b"Too many connections: every slot is serving a request. Retry.\n\n\n"
)
_TOKEN = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_HEAD_END = re.compile(rb"\r?\n\r?\n")
# A JSON string (possessive, so a body never makes the scan go back), or a
# character that starts or separates values. Strings run to the end when
# unterminated: the parser refuses such a body later, the count stays linear.
_JSON_TOKENS = re.compile(rb'"(?:[^"\\]++|\\.)*+(?:"|\\?\Z)|[\[{,]', re.S)


@dataclass(frozen=True)
class HttpLimits:
    """The operator's caps on HTTP clients (`pybox mcp --http-*`)."""

    max_connections: int = 64
    max_header_bytes: int = 32 * KIB
    max_headers: int = 64
    read_timeout_s: float = 10.0
    max_body_bytes: int = 64 * MIB
    max_json_values: int = MAX_JSON_VALUES

    @property
    def body_budget_bytes(self) -> int:
        # Two largest bodies at once: enough for one big upload while others talk.
        return 2 * self.max_body_bytes


class HttpError(Exception):
    """A request this server answers with `status` and `text`, then closes."""

    def __init__(self, status: int, text: str) -> None:
        super().__init__(text)
        self.status = status
        self.text = text


class Closed(Exception):
    """The client went away, or was too slow: nothing more is sent."""


class Headers:
    """Header fields by lower-case name; a repeated field keeps its first value."""

    def __init__(self, fields: list[tuple[str, str]]) -> None:
        self.fields = fields
        self._first: dict[str, str] = {}
        for name, value in fields:
            self._first.setdefault(name.lower(), value)

    @overload
    def get(self, name: str) -> str | None: ...
    @overload
    def get(self, name: str, default: str) -> str: ...
    def get(self, name: str, default: str | None = None) -> str | None:
        return self._first.get(name.lower(), default)

    def count(self, name: str) -> int:
        return sum(1 for field, _ in self.fields if field.lower() == name.lower())

    def lower(self) -> dict[str, str]:
        return dict(self._first)


@dataclass(frozen=True)
class Head:
    method: str
    target: str
    version: str
    headers: Headers


def parse_head(raw: bytes, limits: HttpLimits) -> Head:
    """The request line and header fields; HttpError 400 or 431 for a bad one."""
    lines = raw.replace(b"\r\n", b"\n").split(b"\n")
    parts = lines[0].split(b" ")
    if len(parts) != 3 or not _TOKEN.fullmatch(parts[0]) or not parts[1]:
        raise HttpError(400, "Malformed request line.")
    version = parts[2].decode("latin-1")
    if version not in ("HTTP/1.1", "HTTP/1.0"):
        raise HttpError(505 if version.startswith("HTTP/") else 400, "Use HTTP/1.1.")
    if len(lines) - 1 > limits.max_headers:
        raise HttpError(
            431,
            f"{len(lines) - 1} header fields; this server accepts at most {limits.max_headers}.",
        )
    fields: list[tuple[str, str]] = []
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon or not _TOKEN.fullmatch(name):
            raise HttpError(400, "Malformed header field (folded lines are not accepted).")
        fields.append((name.decode("ascii"), value.strip(b" \t").decode("latin-1")))
    headers = Headers(fields)
    for single in ("host", "content-length", "transfer-encoding", "authorization"):
        if headers.count(single) > 1:
            raise HttpError(400, f"The {single} header appears more than once.")
    return Head(parts[0].decode("ascii"), parts[1].decode("latin-1"), version, headers)


class ByteBudget:
    """Bytes that may be held at once; a taker waits a bounded time for room."""

    def __init__(self, total_bytes: int) -> None:
        self.total_bytes = total_bytes
        self._used = 0
        self._cond = threading.Condition()

    def take(self, size: int, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._used + size > self.total_bytes:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or size > self.total_bytes:
                    return False
                self._cond.wait(remaining)
            self._used += size
            return True

    def give_back(self, size: int) -> None:
        with self._cond:
            self._used -= size
            self._cond.notify_all()


PENDING_NOTIFICATIONS = 16


class ReplyQueue:
    """A request's replies, from the call's thread to the one writing the response.

    The response (or the end marker `None`) always goes in. A progress notification
    goes in only while fewer than `max_pending` wait to be written: a client that
    reads an event stream slowly loses notifications (their output stays readable
    with get_result), and the server never holds more than these for it."""

    def __init__(self, max_pending: int = PENDING_NOTIFICATIONS) -> None:
        self.max_pending = max_pending
        self.dropped = 0
        self._queue: queue.Queue[dict[str, Any] | None] = queue.Queue()

    def put(self, message: dict[str, Any] | None) -> None:
        notice = message is not None and "id" not in message
        if notice and self._queue.qsize() >= self.max_pending:
            self.dropped += 1
            return
        self._queue.put(message)

    def get(self, timeout_s: float) -> dict[str, Any] | None:
        """The next reply; queue.Empty when none came within `timeout_s`."""
        return self._queue.get(timeout=timeout_s)


class ConnectionGate:
    """Which connections hold a slot: waiting for a request head, or serving one."""

    def __init__(self, max_connections: int) -> None:
        self.max_connections = max_connections
        self._waiting: OrderedDict[socket.socket, None] = OrderedDict()
        self._serving: set[socket.socket] = set()
        self._lock = threading.Lock()
        self.pushed_out = 0
        self.refused = 0

    def admit(self, sock: socket.socket) -> bool:
        """A slot for a new connection: pushes out the oldest waiting one if need be."""
        with self._lock:
            if len(self._waiting) + len(self._serving) >= self.max_connections:
                if not self._waiting:
                    self.refused += 1
                    return False
                oldest, _ = self._waiting.popitem(last=False)
                self.pushed_out += 1
                _shut(oldest)  # its thread sees the end of the stream and leaves
            self._waiting[sock] = None
            return True

    def serving(self, sock: socket.socket) -> bool:
        """The connection starts serving a request; False when it was pushed out."""
        with self._lock:
            if sock not in self._waiting:
                return False
            del self._waiting[sock]
            self._serving.add(sock)
            return True

    def waiting(self, sock: socket.socket) -> None:
        """Back to waiting for the next request head (it is now the newest)."""
        with self._lock:
            self._serving.discard(sock)
            self._waiting[sock] = None

    def leave(self, sock: socket.socket) -> None:
        with self._lock:
            self._serving.discard(sock)
            self._waiting.pop(sock, None)

    def counts(self) -> tuple[int, int]:
        with self._lock:
            return len(self._waiting), len(self._serving)


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def refuse(sock: socket.socket) -> None:
    """Tell a connection there is no slot, without ever blocking the caller."""
    try:
        sock.setblocking(False)
        sock.send(REFUSAL)
    except OSError:
        pass
    _shut(sock)
    sock.close()


class SocketReader:
    """Reads requests from one connection, keeping what arrived past the last one."""

    def __init__(self, sock: socket.socket, limits: HttpLimits) -> None:
        self.sock = sock
        self.limits = limits
        self.buffer = bytearray()

    def _recv(self, timeout_s: float, size: int) -> bytes:
        if timeout_s <= 0:
            raise Closed("timed out")
        self.sock.settimeout(timeout_s)
        try:
            data = self.sock.recv(size)
        except (TimeoutError, OSError) as exc:
            raise Closed(str(exc)) from None
        if not data:
            raise Closed("end of stream")
        return data

    def read_head(self) -> Head:
        """The next request's head, all of it within the read timeout."""
        limit = self.limits.max_header_bytes
        deadline = time.monotonic() + self.limits.read_timeout_s
        while True:
            # Empty lines before a request line are allowed (RFC 9112, 2.2).
            while self.buffer and self.buffer[0] in b"\r\n":
                del self.buffer[:1]
            end = _HEAD_END.search(self.buffer, 0, limit + 4)
            if end is not None:
                raw = bytes(self.buffer[: end.start()])
                del self.buffer[: end.end()]
                return parse_head(raw, self.limits)
            if len(self.buffer) > limit:
                raise HttpError(
                    431,
                    f"The request head is over {limit} bytes; this server accepts at most that.",
                )
            self.buffer += self._recv(deadline - time.monotonic(), limit + 4 - len(self.buffer))

    def _read_into(self, out: bytearray, size: int) -> None:
        taken = min(size, len(self.buffer))
        out += self.buffer[:taken]
        del self.buffer[:taken]
        remaining = size - taken
        while remaining > 0:
            data = self._recv(self.limits.read_timeout_s, min(remaining, RECV_BYTES))
            out += data
            remaining -= len(data)

    def _read_line(self, limit: int) -> bytes:
        deadline = time.monotonic() + self.limits.read_timeout_s
        while True:
            end = self.buffer.find(b"\n", 0, limit)
            if end >= 0:
                line = bytes(self.buffer[:end]).rstrip(b"\r")
                del self.buffer[: end + 1]
                return line
            if len(self.buffer) >= limit:
                raise HttpError(400, "A chunk-size or trailer line is too long.")
            self.buffer += self._recv(deadline - time.monotonic(), limit - len(self.buffer))

    def read_length(self, length: int) -> bytearray:
        out = bytearray()
        self._read_into(out, length)
        return out

    def read_chunked(self, budget: ByteBudget) -> tuple[bytearray, int]:
        """A chunked body, refused (413) once it passes the cap; and the budget it took."""
        out = bytearray()
        taken = 0
        cap = self.limits.max_body_bytes
        try:
            while True:
                size_text = self._read_line(MAX_CHUNK_LINE_BYTES).split(b";", 1)[0].strip()
                if (
                    not size_text
                    or len(size_text) > 16
                    or not re.fullmatch(rb"[0-9A-Fa-f]+", size_text)
                ):
                    raise HttpError(400, "Malformed chunk size.")
                size = int(size_text, 16)
                if size == 0:
                    break
                if len(out) + size > cap:
                    raise HttpError(413, f"The body is over {cap} bytes.")
                if not budget.take(size, self.limits.read_timeout_s):
                    raise HttpError(503, "The server holds too many request bodies; retry.")
                taken += size
                self._read_into(out, size)
                if self._read_line(MAX_CHUNK_LINE_BYTES) != b"":
                    raise HttpError(400, "A chunk does not end where its size says.")
            for _ in range(self.limits.max_headers + 1):  # trailer fields, ignored
                if self._read_line(MAX_CHUNK_LINE_BYTES) == b"":
                    return out, taken
            raise HttpError(431, "Too many trailer fields.")
        except BaseException:
            budget.give_back(taken)
            raise


def json_values_within(body: bytes | bytearray, cap: int) -> bool:
    """True when `body` has at most `cap` brackets and commas outside strings: a bound on
    its JSON values, so on the memory parsing it takes (about 64 bytes a value)."""
    # A quick upper bound first: most messages have few brackets and commas at all.
    if body.count(b"[") + body.count(b"{") + body.count(b",") <= cap:
        return True
    count = 0
    for match in _JSON_TOKENS.finditer(body):
        if body[match.start()] != 0x22:  # strings are skipped whole, not counted
            count += 1
            if count > cap:
                return False
    return True
