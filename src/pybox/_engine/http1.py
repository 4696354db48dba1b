"""HTTP/1.1 on one connected socket: as much of it as the Engine API needs.

One request per connection, its answer read whole, or in pieces as it arrives
(`body_pieces`, for a body too large to hold): by Content-Length, chunked, or
up to the end of the connection. Not `http.client`: importing it
brings `ssl` and the `email` package along, several milliseconds on every
`pybox` command that talks to the engine, for TLS and MIME parsing a local
socket never uses. A transport that needs TLS wraps its socket itself.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable, Iterator, Mapping
from typing import Protocol

# Bounds on what pybox reads before the body, as http.client has them.
MAX_LINE_BYTES = 65536
MAX_HEADERS = 100
# The most of a body read at once when it is given in pieces (`body_pieces`).
PIECE_BYTES = 1024 * 1024
# Methods that carry a body: without one they say so (Content-Length: 0).
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


class ProtocolError(Exception):
    """The answer is not HTTP/1.1 as pybox reads it, or stopped short."""


class BodyTooLarge(ProtocolError):
    """The answer's body is longer than the caller allowed (it was not read whole)."""

    def __init__(self, limit_bytes: int) -> None:
        super().__init__(f"the answer's body is longer than {limit_bytes} bytes")
        self.limit_bytes = limit_bytes


class Headers:
    """An answer's header fields, looked up by name in any case (the first of a
    repeated name counts, as `http.client` gives it)."""

    def __init__(self, fields: Iterable[tuple[str, str]] = ()) -> None:
        self._fields: dict[str, str] = {}
        for name, value in fields:
            self._fields.setdefault(name.lower(), value)

    def get(self, name: str, default: str | None = None) -> str | None:
        return self._fields.get(name.lower(), default)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._fields


class Response:
    """A whole answer: status code, header fields and body."""

    __slots__ = ("body", "headers", "status")

    def __init__(self, status: int, headers: Headers, body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body


def exchange(
    sock: socket.socket,
    method: str,
    target: str,
    headers: Mapping[str, str],
    body: bytes | Iterable[bytes] | None = None,
    max_body_bytes: int | None = None,
) -> Response:
    """Send one request on `sock` and read its answer. An iterable body goes chunked.

    Socket errors and timeouts are raised as they are; a malformed or cut-short
    answer is a `ProtocolError`, one longer than `max_body_bytes` a `BodyTooLarge`.
    """
    send_request(sock, method, target, headers, body)
    with sock.makefile("rb") as reader:
        return read_response(reader, method, max_body_bytes)


def send_request(
    sock: socket.socket,
    method: str,
    target: str,
    headers: Mapping[str, str],
    body: bytes | Iterable[bytes] | None = None,
) -> None:
    fields = dict(headers)
    if isinstance(body, bytes):
        fields["Content-Length"] = str(len(body))
    elif body is not None:
        fields["Transfer-Encoding"] = "chunked"
    elif method in _BODY_METHODS:
        fields["Content-Length"] = "0"
    head = f"{method} {target} HTTP/1.1\r\n" + "".join(
        f"{name}: {value}\r\n" for name, value in fields.items()
    )
    data = (head + "\r\n").encode("latin-1")
    if isinstance(body, bytes):
        sock.sendall(data + body)
        return
    sock.sendall(data)
    if body is not None:
        for chunk in body:
            if chunk:  # an empty chunk would end the body
                sock.sendall(f"{len(chunk):X}\r\n".encode() + chunk + b"\r\n")
        sock.sendall(b"0\r\n\r\n")


def read_response(
    reader: _Reader, method: str = "GET", max_body_bytes: int | None = None
) -> Response:
    status, headers = read_head(reader)
    body = b"".join(body_pieces(reader, status, headers, method, max_body_bytes))
    return Response(status, headers, body)


def read_head(reader: _Reader) -> tuple[int, Headers]:
    """The final answer's status and header fields (an interim 100 Continue skipped)."""
    while True:
        status_line = _line(reader)
        if not status_line:
            raise ConnectionResetError("the engine closed the connection without answering")
        status = _status(status_line)
        headers = _headers(reader)
        if not (100 <= status < 200) or status == 101:
            return status, headers  # an interim answer is followed by the real one


def body_pieces(
    reader: _Reader,
    status: int,
    headers: Headers,
    method: str = "GET",
    max_body_bytes: int | None = None,
    piece_bytes: int = PIECE_BYTES,
) -> Iterator[bytes]:
    """The answer's body as it arrives, in pieces of at most `piece_bytes`: by
    Content-Length, chunked, or up to the end of the connection. `BodyTooLarge`
    as soon as it is known to be longer than `max_body_bytes` (a Content-Length
    that says so: before any of it is read)."""
    if method == "HEAD" or status in (101, 204, 304):
        return
    if "chunked" in (headers.get("Transfer-Encoding") or "").lower():
        yield from _chunked_pieces(reader, max_body_bytes, piece_bytes)
        return
    length = headers.get("Content-Length")
    if length is None:
        # One byte more than allowed tells "too long" from "exactly the limit".
        total = 0
        while piece := reader.read(piece_bytes):
            total += len(piece)
            if max_body_bytes is not None and total > max_body_bytes:
                raise BodyTooLarge(max_body_bytes)
            yield piece
        return
    if not length.strip().isdigit():
        raise ProtocolError(f"the answer's Content-Length is {length!r}")
    if max_body_bytes is not None and int(length) > max_body_bytes:
        raise BodyTooLarge(max_body_bytes)
    yield from _exact_pieces(reader, int(length), piece_bytes)


class _Reader(Protocol):
    """What `socket.makefile("rb")` gives (a buffered reader), as used here."""

    def readline(self, limit: int = -1, /) -> bytes: ...
    def read(self, size: int = -1, /) -> bytes: ...


def _line(reader: _Reader) -> bytes:
    line = reader.readline(MAX_LINE_BYTES + 1)
    if len(line) > MAX_LINE_BYTES:
        raise ProtocolError(f"a line of the answer is longer than {MAX_LINE_BYTES} bytes")
    return line


def _status(line: bytes) -> int:
    parts = line.decode("latin-1").rstrip("\r\n").split(None, 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise ProtocolError(f"the answer starts with {line[:100]!r}, not an HTTP/1.1 status")
    status = int(parts[1])
    if not 100 <= status <= 999:
        raise ProtocolError(f"the answer's status {parts[1]} is not a status code")
    return status


def _headers(reader: _Reader) -> Headers:
    fields: list[tuple[str, str]] = []
    while True:
        line = _line(reader)
        if line in (b"\r\n", b"\n"):
            return Headers(fields)
        if not line:
            raise ProtocolError("the connection ended inside the answer's headers")
        text = line.decode("latin-1").rstrip("\r\n")
        if text[:1] in (" ", "\t") and fields:  # an obsolete folded line goes on the last
            name, value = fields[-1]
            fields[-1] = (name, f"{value} {text.strip()}")
            continue
        name, sep, value = text.partition(":")
        if not sep or not name.strip():
            raise ProtocolError(f"the answer has a header line without a name: {text[:100]!r}")
        fields.append((name.strip(), value.strip()))
        if len(fields) > MAX_HEADERS:
            raise ProtocolError(f"the answer has more than {MAX_HEADERS} header fields")


def _chunked_pieces(
    reader: _Reader, max_body_bytes: int | None, piece_bytes: int
) -> Iterator[bytes]:
    total = 0
    while True:
        size_text = _line(reader).split(b";", 1)[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError:
            raise ProtocolError(f"a chunk of the answer has the size {size_text[:20]!r}") from None
        if size < 0:
            raise ProtocolError(f"a chunk of the answer has the size {size_text[:20]!r}")
        if size == 0:
            break
        total += size
        if max_body_bytes is not None and total > max_body_bytes:
            raise BodyTooLarge(max_body_bytes)
        yield from _exact_pieces(reader, size, piece_bytes)
        if _line(reader) not in (b"\r\n", b"\n"):
            raise ProtocolError("a chunk of the answer does not end where its size says")
    while _line(reader) not in (b"\r\n", b"\n", b""):  # trailer fields, not used
        pass


def _exact_pieces(reader: _Reader, size: int, piece_bytes: int) -> Iterator[bytes]:
    """`size` bytes in pieces; `ProtocolError` when the answer stops short."""
    left = size
    while left:
        piece = reader.read(min(left, piece_bytes))
        if not piece:
            raise ProtocolError(f"the answer stopped after {size - left} of {size} bytes")
        left -= len(piece)
        yield piece
