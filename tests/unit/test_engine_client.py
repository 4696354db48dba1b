"""The engine client over `socket.socketpair()`, answered with recorded engine replies.

Each test plays the engine's side of one or more connections: it reads the
request pybox sent and writes back bytes recorded from Docker 20.10 (headers
as the engine sends them), so the client's HTTP, stream demultiplexing,
hijacking, version negotiation and error mapping are tested without an engine.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest

from pybox._core.errors import EngineAPIError, EngineError, EngineUnavailable
from pybox._engine import DockerEngine, EngineEndpoint
from pybox._engine.plumbing import MAX_API_VERSION
from pybox._engine.podman import PodmanEngine

ENDPOINT = EngineEndpoint("/nonexistent/docker.sock", "a test")

ENGINE_HEADERS = (
    "Api-Version: {api}\r\n"
    "Docker-Experimental: false\r\n"
    "Ostype: linux\r\n"
    "Server: Docker/20.10.24+dfsg1 (linux)\r\n"
    "Date: Tue, 01 Dec 2026 11:06:02 GMT\r\n"
)


def reply(status: str, body: bytes = b"", *, api: str = "1.41", content_type: str = "") -> bytes:
    """An engine answer with a Content-Length body, as Docker 20.10 sends small ones."""
    head = f"HTTP/1.1 {status}\r\n" + ENGINE_HEADERS.format(api=api)
    if content_type:
        head += f"Content-Type: {content_type}\r\n"
    head += f"Content-Length: {len(body)}\r\n\r\n"
    return head.encode() + body


def chunked_reply(status: str, chunks: list[bytes]) -> bytes:
    """An answer with a chunked body, as the engine streams inspect and progress."""
    head = f"HTTP/1.1 {status}\r\n" + ENGINE_HEADERS.format(api="1.41")
    head += "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    body = b"".join(f"{len(c):x}\r\n".encode() + c + b"\r\n" for c in chunks) + b"0\r\n\r\n"
    return head.encode() + body


def frame(stream: int, data: bytes) -> bytes:
    return bytes([stream, 0, 0, 0]) + len(data).to_bytes(4, "big") + data


@dataclass
class Request:
    line: str
    headers: dict[str, str]
    body: bytes


def read_request(sock: socket.socket) -> Request:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise AssertionError("the client closed before sending a whole request")
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
    if headers.get("transfer-encoding") == "chunked":
        while not body.endswith(b"0\r\n\r\n"):
            body += sock.recv(65536)
        decoded, rest = b"", body
        while True:
            size_line, rest = rest.split(b"\r\n", 1)
            size = int(size_line, 16)
            if size == 0:
                break
            decoded, rest = decoded + rest[:size], rest[size + 2 :]
        body = decoded
    else:
        length = int(headers.get("content-length", "0"))
        while len(body) < length:
            body += sock.recv(65536)
    return Request(lines[0], headers, body)


Script = Callable[[socket.socket], None]


@dataclass
class PairTransport:
    """A `Transport` whose every connection is a socketpair served by the next script."""

    scripts: list[Script]
    requests: list[Request] = field(default_factory=list)
    threads: list[threading.Thread] = field(default_factory=list)
    errors: list[BaseException] = field(default_factory=list)

    @property
    def endpoint(self) -> EngineEndpoint:
        return ENDPOINT

    def open(self, timeout_s: float) -> socket.socket:
        if not self.scripts:
            raise AssertionError("the client opened more connections than the test expected")
        script = self.scripts.pop(0)
        client, server = socket.socketpair()
        client.settimeout(timeout_s)
        server.settimeout(5.0)

        def serve() -> None:
            try:
                script(server)
            except BaseException as exc:  # surfaced by the fixture, not lost in a thread
                self.errors.append(exc)
            finally:
                server.close()

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        self.threads.append(thread)
        return client

    def answer(self, *replies: bytes) -> Script:
        def script(server: socket.socket) -> None:
            self.requests.append(read_request(server))
            for part in replies:
                server.sendall(part)

        return script


@pytest.fixture
def transport() -> Iterator[PairTransport]:
    pair = PairTransport([])
    yield pair
    for thread in pair.threads:
        thread.join(5.0)
    assert not pair.errors, pair.errors
    assert not pair.scripts, "the client made fewer requests than the test expected"


def engine_on(transport: PairTransport) -> DockerEngine:
    return DockerEngine(ENDPOINT, "1.41", "20.10.24", transport=transport)


def podman_on(transport: PairTransport) -> PodmanEngine:
    return PodmanEngine(ENDPOINT, "1.41", "4.3.1", transport=transport)


# -- version negotiation ------------------------------------------------------


def test_connect_reads_the_api_version_and_release_from_ping(transport: PairTransport) -> None:
    transport.scripts.append(transport.answer(reply("200 OK", b"OK", content_type="text/plain")))
    engine = DockerEngine.connect(ENDPOINT, transport=transport)
    assert engine.api_version == "1.41"
    assert engine.server_version == "20.10.24+dfsg1"
    request = transport.requests[0]
    assert request.line == "GET /_ping HTTP/1.1"
    assert request.headers["host"] == "docker"


def test_connect_talks_the_newest_version_both_sides_know(transport: PairTransport) -> None:
    transport.scripts.append(transport.answer(reply("200 OK", b"OK", api="1.52")))
    engine = DockerEngine.connect(ENDPOINT, transport=transport)
    assert engine.api_version == ".".join(map(str, MAX_API_VERSION))


def test_connect_refuses_an_engine_older_than_pybox_needs(transport: PairTransport) -> None:
    transport.scripts.append(transport.answer(reply("200 OK", b"OK", api="1.40")))
    with pytest.raises(EngineError, match=r"speaks Engine API 1\.40; pybox needs 1\.41"):
        DockerEngine.connect(ENDPOINT, transport=transport)


def test_connect_falls_back_to_version_when_ping_says_too_little(
    transport: PairTransport,
) -> None:
    bare_ping = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nOK"
    version = json.dumps({"ApiVersion": "1.43", "Version": "24.0.7"}).encode()
    transport.scripts += [
        transport.answer(bare_ping),
        transport.answer(reply("200 OK", version, content_type="application/json")),
    ]
    engine = DockerEngine.connect(ENDPOINT, transport=transport)
    assert (engine.api_version, engine.server_version) == ("1.43", "24.0.7")
    assert transport.requests[1].line == "GET /version HTTP/1.1"


# -- requests, bodies and answers ----------------------------------------------


def test_create_sends_versioned_json_and_reads_the_id(transport: PairTransport) -> None:
    answer = json.dumps({"Id": "c0ffee", "Warnings": []}).encode()
    transport.scripts.append(
        transport.answer(reply("201 Created", answer, content_type="application/json"))
    )
    assert engine_on(transport).create_container("pybox-x", {"Image": "pybox/stdlib:1"}) == (
        "c0ffee"
    )
    request = transport.requests[0]
    assert request.line == "POST /v1.41/containers/create?name=pybox-x HTTP/1.1"
    assert request.headers["content-type"] == "application/json"
    assert json.loads(request.body) == {"Image": "pybox/stdlib:1"}


def test_a_chunked_answer_is_read_whole(transport: PairTransport) -> None:
    document = json.dumps({"Id": "c0ffee", "State": {"Status": "created"}}).encode()
    transport.scripts.append(
        transport.answer(chunked_reply("200 OK", [document[:10], document[10:]]))
    )
    inspected = engine_on(transport).inspect_container("c0ffee")
    assert inspected == {"Id": "c0ffee", "State": {"Status": "created"}}


def test_an_import_streams_its_body_chunked(transport: PairTransport) -> None:
    progress = [b'{"status":"Importing"}\r\n', b'{"status":"sha256:abc"}\r\n']
    transport.scripts.append(transport.answer(chunked_reply("200 OK", progress)))
    image_id = engine_on(transport).import_image(
        iter([b"tar-part-1", b"tar-part-2"]), "pybox/stdlib", "1", ["USER 1000"]
    )
    assert image_id == "sha256:abc"
    request = transport.requests[0]
    assert request.body == b"tar-part-1tar-part-2"
    assert request.headers["transfer-encoding"] == "chunked"
    assert "changes=USER+1000" in request.line


# -- the one place that maps errors ---------------------------------------------


def test_missing_is_an_answer_not_an_error(transport: PairTransport) -> None:
    missing = b'{"message":"No such container: nosuch"}\n'
    transport.scripts.append(
        transport.answer(reply("404 Not Found", missing, content_type="application/json"))
    )
    assert engine_on(transport).inspect_container("nosuch") is None


def test_a_refusal_carries_the_status_and_the_engines_own_words(
    transport: PairTransport,
) -> None:
    refusal = b'{"message":"No such image: nosuch:1"}\n'
    transport.scripts.append(
        transport.answer(reply("404 Not Found", refusal, content_type="application/json"))
    )
    with pytest.raises(EngineAPIError) as caught:
        engine_on(transport).create_container("pybox-x", {"Image": "nosuch:1"})
    assert caught.value.status == 404
    assert caught.value.engine_message == "No such image: nosuch:1"
    assert "HTTP 404" in str(caught.value)


def test_removal_already_in_progress_counts_as_removed(transport: PairTransport) -> None:
    conflict = b'{"message":"removal of container c0ffee is already in progress"}'
    gone = b'{"message":"No such container: c0ffee"}'
    transport.scripts += [
        transport.answer(reply("409 Conflict", conflict, content_type="application/json")),
        transport.answer(reply("404 Not Found", gone, content_type="application/json")),
    ]
    engine = engine_on(transport)
    assert engine.remove_container("c0ffee") is True
    assert engine.remove_container("c0ffee") is False
    assert "force=1" in transport.requests[0].line


def test_killing_a_stopped_box_is_not_an_error(transport: PairTransport) -> None:
    not_running = b'{"message":"Container c0ffee is not running"}'
    transport.scripts.append(
        transport.answer(reply("409 Conflict", not_running, content_type="application/json"))
    )
    assert engine_on(transport).kill_container("c0ffee") is False


def test_a_tag_answer_is_not_read(transport: PairTransport) -> None:
    """Docker answers a tag with nothing, Podman 4.3 with a bare newline."""
    transport.scripts += [
        transport.answer(reply("201 Created", b"")),
        transport.answer(reply("201 Created", b"\n", content_type="text/plain")),
    ]
    engine = engine_on(transport)
    engine.tag_image("sha256:" + "a" * 64, "127.0.0.1:5000/pybox/x", "t")
    engine.tag_image("sha256:" + "a" * 64, "127.0.0.1:5000/pybox/x", "t")
    assert "/tag?" in transport.requests[1].line


def test_an_error_event_in_a_progress_stream_is_a_refusal(transport: PairTransport) -> None:
    events = [
        b'{"status":"Pulling from pybox/data"}\r\n',
        b'{"errorDetail":{"message":"manifest unknown"},"error":"manifest unknown"}\r\n',
    ]
    transport.scripts.append(transport.answer(chunked_reply("200 OK", events)))
    with pytest.raises(EngineAPIError, match="manifest unknown"):
        engine_on(transport).pull_image("pybox/data", "sha256:" + "0" * 64, "linux/amd64")


def test_an_answer_that_is_not_json_is_named(transport: PairTransport) -> None:
    transport.scripts.append(transport.answer(reply("200 OK", b"<html>", content_type="text/html")))
    with pytest.raises(EngineError, match="not JSON"):
        engine_on(transport).info()


def test_permission_denied_points_at_the_docker_group() -> None:
    class Denied:
        endpoint = ENDPOINT

        def open(self, timeout_s: float) -> socket.socket:
            raise PermissionError(13, "Permission denied")

    with pytest.raises(EngineUnavailable, match="'docker' group"):
        DockerEngine(ENDPOINT, "1.41", transport=Denied()).info()


def test_an_engine_that_hangs_up_mid_answer_is_a_lost_connection(
    transport: PairTransport,
) -> None:
    transport.scripts.append(transport.answer(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{"))
    with pytest.raises(EngineUnavailable, match="Lost the connection to the engine"):
        engine_on(transport).info()


# -- the hijacked attach ------------------------------------------------------------


def test_attach_upgrades_then_demultiplexes_frames_split_anywhere(
    transport: PairTransport,
) -> None:
    received: list[bytes] = []
    output = frame(1, b"out line\n") + frame(2, b"err line\n") + frame(1, b"")

    def engine_side(server: socket.socket) -> None:
        transport.requests.append(read_request(server))
        server.sendall(
            b"HTTP/1.1 101 UPGRADED\r\nContent-Type: application/vnd.docker.raw-stream\r\n"
            b"Connection: Upgrade\r\nUpgrade: tcp\r\n\r\n" + output[:3]
        )
        received.append(server.recv(1024))
        for index in range(3, len(output), 5):  # headers and payloads split across sends
            server.sendall(output[index : index + 5])
        server.shutdown(socket.SHUT_WR)

    transport.scripts.append(engine_side)
    stream = engine_on(transport).attach("c0ffee")
    try:
        stream.send(b"payload")
        chunks: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            # None: no whole chunk yet (a header may have arrived in pieces); read on.
            chunk = stream.read(0.5)
            if chunk == (0, b""):
                break
            if chunk is not None:
                chunks.append(chunk)
        else:
            raise AssertionError(f"the stream never ended; got {chunks!r}")
    finally:
        stream.close()
    assert received == [b"payload"]
    assert transport.requests[0].line.startswith("POST /v1.41/containers/c0ffee/attach?stream=1")
    assert transport.requests[0].headers["upgrade"] == "tcp"
    joined: dict[int, bytes] = {1: b"", 2: b""}
    for stream_id, data in chunks:
        joined[stream_id] += data
    assert joined == {1: b"out line\n", 2: b"err line\n"}


def test_attach_refused_by_the_engine_says_so(transport: PairTransport) -> None:
    transport.scripts.append(
        transport.answer(reply("404 Not Found", b'{"message":"No such container: c0ffee"}'))
    )
    with pytest.raises(EngineError, match=r"refused to attach to c0ffee: HTTP/1\.1 404"):
        engine_on(transport).attach("c0ffee")
