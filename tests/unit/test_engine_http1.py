"""pybox's HTTP/1.1 for the engine (`pybox._engine.http1`) over `socket.socketpair()`.

test_engine_client.py drives the whole client with recorded engine answers;
these pin the corners of the protocol itself that an engine (or something
pretending to be one) may send.
"""

from __future__ import annotations

import io
import socket
import threading
from collections.abc import Iterator

import pytest

from pybox._core.errors import EngineError, EngineUnavailable
from pybox._engine import DockerEngine, EngineEndpoint
from pybox._engine.http1 import (
    MAX_HEADERS,
    BodyTooLarge,
    ProtocolError,
    body_pieces,
    exchange,
    read_head,
)

ENDPOINT = EngineEndpoint("/nonexistent/docker.sock", "a test")


# Engine ends left open (close=False) stay referenced here until the session ends.
KEPT_OPEN: list[socket.socket] = []


def served(answer: bytes, *, close: bool = True) -> tuple[socket.socket, list[bytes]]:
    """A client socket whose peer reads one request, then sends `answer`."""
    client, server = socket.socketpair()
    if not close:
        KEPT_OPEN.append(server)
    client.settimeout(5.0)
    received: list[bytes] = []

    def serve() -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = server.recv(65536)
            if not chunk:
                break
            data += chunk
        received.append(data)
        server.sendall(answer)
        if close:
            server.close()

    threading.Thread(target=serve, daemon=True).start()
    return client, received


@pytest.fixture
def closing() -> Iterator[list[socket.socket]]:
    sockets: list[socket.socket] = []
    yield sockets
    for sock in sockets:
        sock.close()


def ask(answer: bytes, closing: list[socket.socket], method: str = "GET") -> tuple[int, bytes]:
    sock, _ = served(answer)
    closing.append(sock)
    response = exchange(sock, method, "/x", {"Host": "docker"})
    return response.status, response.body


def test_an_interim_continue_is_followed_by_the_real_answer(closing: list[socket.socket]) -> None:
    answer = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
    assert ask(answer, closing) == (200, b"ok")


def test_a_body_without_a_length_runs_to_the_end_of_the_connection(
    closing: list[socket.socket],
) -> None:
    assert ask(b"HTTP/1.1 200 OK\r\n\r\nall of it", closing) == (200, b"all of it")


def test_no_content_has_no_body(closing: list[socket.socket]) -> None:
    assert ask(b"HTTP/1.1 204 No Content\r\n\r\n", closing) == (204, b"")


def test_chunks_with_extensions_and_trailers(closing: list[socket.socket]) -> None:
    answer = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"3;name=value\r\nabc\r\n2\r\nde\r\n0\r\nX-Trailer: t\r\n\r\n"
    )
    assert ask(answer, closing) == (200, b"abcde")


def test_header_names_in_any_case_first_one_wins_folded_lines_joined(
    closing: list[socket.socket],
) -> None:
    sock, _ = served(
        b"HTTP/1.1 200 OK\r\napi-version: 1.41\r\nAPI-Version: 9.9\r\n"
        b"Server: Docker/20.10\r\n (linux)\r\nContent-Length: 0\r\n\r\n"
    )
    closing.append(sock)
    headers = exchange(sock, "GET", "/_ping", {"Host": "docker"}).headers
    assert headers.get("Api-Version") == "1.41"
    assert headers.get("server") == "Docker/20.10 (linux)"
    assert "content-length" in headers and "Missing" not in headers


@pytest.mark.parametrize(
    "answer",
    [
        b"SSH-2.0-OpenSSH\r\n\r\n",
        b"HTTP/1.1 OK\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: lots\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcXX\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n",
        b"HTTP/1.1 200 OK\r\n" + b"X-A: b\r\n" * (MAX_HEADERS + 1) + b"\r\n",
        b"HTTP/1.1 200 OK\r\nX-Long: " + b"a" * 70000 + b"\r\n\r\n",
    ],
    ids=[
        "not-http",
        "no-status-code",
        "header-without-colon",
        "bad-length",
        "cut-short",
        "bad-chunk-size",
        "chunk-too-long",
        "ends-in-headers",
        "too-many-headers",
        "line-too-long",
    ],
)
def test_what_is_not_http_as_pybox_reads_it_is_a_protocol_error(
    answer: bytes, closing: list[socket.socket]
) -> None:
    with pytest.raises(ProtocolError):
        ask(answer, closing)


def test_a_body_goes_with_its_length_and_a_bodiless_post_says_zero(
    closing: list[socket.socket],
) -> None:
    sock, received = served(b"HTTP/1.1 204 No Content\r\n\r\n")
    closing.append(sock)
    exchange(sock, "POST", "/containers/x/start", {"Host": "docker"})
    sock2, received2 = served(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
    closing.append(sock2)
    exchange(sock2, "GET", "/info", {"Host": "docker"})
    assert b"\r\nContent-Length: 0\r\n" in received[0]
    assert b"Content-Length" not in received2[0]
    assert received2[0].startswith(b"GET /info HTTP/1.1\r\nHost: docker\r\n")


class OneAnswer:
    """A transport whose one connection gets `answer` (and is then closed, or not)."""

    def __init__(self, answer: bytes, *, close: bool = True) -> None:
        self.answer, self.close = answer, close
        self.sockets: list[socket.socket] = []

    @property
    def endpoint(self) -> EngineEndpoint:
        return ENDPOINT

    def open(self, timeout_s: float) -> socket.socket:
        sock, _ = served(self.answer, close=self.close)
        sock.settimeout(timeout_s)
        self.sockets.append(sock)
        return sock


def test_an_engine_that_hangs_up_without_answering_is_unreachable() -> None:
    engine = DockerEngine(ENDPOINT, "1.41", transport=OneAnswer(b""))
    with pytest.raises(EngineUnavailable, match="Cannot reach the container engine"):
        engine.info()


def test_a_garbled_answer_is_a_lost_connection_naming_the_request() -> None:
    engine = DockerEngine(ENDPOINT, "1.41", transport=OneAnswer(b"garbage\r\n\r\n"))
    with pytest.raises(EngineUnavailable, match=r"Lost the connection .* during GET /info"):
        engine.info()


def test_an_engine_that_never_finishes_answering_times_out() -> None:
    transport = OneAnswer(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab", close=False)
    engine = DockerEngine(ENDPOINT, "1.41", transport=transport)
    with pytest.raises(EngineError, match=r"did not answer GET /containers/c0ffee/json within"):
        engine._call("GET", "/containers/c0ffee/json", timeout_s=0.2)


@pytest.mark.parametrize(
    "framing",
    [
        b"Content-Length: 2500\r\n\r\n" + b"x" * 2500,
        b"Transfer-Encoding: chunked\r\n\r\n9C4\r\n" + b"x" * 2500 + b"\r\n0\r\n\r\n",
        b"\r\n" + b"x" * 2500,  # to the end of the connection
    ],
)
def test_a_body_in_pieces_is_the_body_never_more_than_a_piece_at_a_time(framing: bytes) -> None:
    reader = io.BufferedReader(io.BytesIO(b"HTTP/1.1 200 OK\r\n" + framing))
    status, headers = read_head(reader)
    pieces = list(body_pieces(reader, status, headers, piece_bytes=1000))
    assert b"".join(pieces) == b"x" * 2500
    assert max(len(piece) for piece in pieces) <= 1000
    reader = io.BufferedReader(io.BytesIO(b"HTTP/1.1 200 OK\r\n" + framing))
    status, headers = read_head(reader)
    with pytest.raises(BodyTooLarge):
        list(body_pieces(reader, status, headers, max_body_bytes=2499, piece_bytes=1000))
