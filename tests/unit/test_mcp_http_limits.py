"""The HTTP transport's caps, which hold before (and after) the token is checked."""

from __future__ import annotations

import argparse
import http.client
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from pybox._adapters.state import StateStore
from pybox._core.errors import ConfigError
from pybox._frontends.mcp import ServerOptions, build_dispatcher
from pybox._frontends.mcp._http.server import HttpServer
from pybox._frontends.mcp._http.sessions import Sessions
from pybox._frontends.mcp._http.settings import (
    HttpSettings,
    add_http_arguments,
    exposure_warning,
    http_limits,
)
from pybox._frontends.mcp._http.wire import (
    ByteBudget,
    ConnectionGate,
    HttpLimits,
    json_values_within,
)
from pybox._frontends.mcp._runs import add_registry_arguments, registry_from_args
from tests.unit.conftest import make_session
from tests.unit.fake_engine import FakeEngine
from tests.unit.mcp_harness import MODERN_META

TOKEN = "t" * 32
LIST = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": MODERN_META}}
MODERN = {"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/list"}

ServerFactory = Callable[..., HttpServer]


@pytest.fixture
def make_server(engine: FakeEngine, state: StateStore) -> Iterator[ServerFactory]:
    started: list[tuple[HttpServer, threading.Thread]] = []

    def factory(limits: HttpLimits | None = None, **options: Any) -> HttpServer:
        dispatcher = build_dispatcher(make_session(engine, state), ServerOptions(**options))
        settings = HttpSettings("127.0.0.1", 0, TOKEN, (), limits or HttpLimits())
        server = HttpServer(settings, dispatcher)
        thread = threading.Thread(target=server.serve, daemon=True)
        thread.start()
        started.append((server, thread))
        return server

    yield factory
    for server, thread in started:
        server.shutdown()
        thread.join(10)


def address(server: HttpServer) -> tuple[str, int]:
    host, port = server.url.split("/")[2].rsplit(":", 1)
    return host, int(port)


def raw(server: HttpServer, data: bytes, timeout_s: float = 10.0) -> bytes:
    """Send `data` on a fresh connection; everything the server says until it closes."""
    with socket.create_connection(address(server), timeout=timeout_s) as sock:
        sock.sendall(data)
        chunks = []
        while True:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            chunks.append(chunk)
    return b"".join(chunks)


def status_of(response: bytes) -> int:
    return int(response.split(b" ", 2)[1])


def request_bytes(body: bytes, headers: dict[str, str] | None = None, token: str = TOKEN) -> bytes:
    fields = {
        "Host": "127.0.0.1",
        "Authorization": f"Bearer {token}",
        "Content-Type": "application/json",
        "Content-Length": str(len(body)),
        "Connection": "close",
        **MODERN,
        **(headers or {}),
    }
    head = "POST /mcp HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in fields.items())
    return head.encode() + b"\r\n" + body


def list_tools(server: HttpServer) -> int:
    conn = http.client.HTTPConnection(*address(server), timeout=10)
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json", **MODERN}
    conn.request("POST", "/mcp", body=json.dumps(LIST), headers=headers)
    response = conn.getresponse()
    response.read()
    conn.close()
    return response.status


# -- connections ----------------------------------------------------------------------------------


def test_idle_connections_cannot_keep_a_client_out(make_server: ServerFactory) -> None:
    server = make_server(HttpLimits(max_connections=4))
    before = threading.active_count()
    idle = [socket.create_connection(address(server), timeout=10) for _ in range(30)]
    try:
        time.sleep(0.3)
        # The oldest idle connections were pushed out: the server closed them.
        idle[0].settimeout(5)
        assert idle[0].recv(1) == b""
        assert threading.active_count() <= before + 4 + 2
        assert list_tools(server) == 200
    finally:
        for sock in idle:
            sock.close()


def test_a_full_gate_refuses_at_once_and_a_pushed_out_connection_knows() -> None:
    gate = ConnectionGate(2)
    a, b, c, d = (socket.socketpair()[0] for _ in range(4))
    assert gate.admit(a) and gate.admit(b)
    assert gate.serving(a) and gate.serving(b)
    assert not gate.admit(c)  # both slots serve requests: refused
    gate.waiting(b)
    assert gate.admit(d)  # b waited longest: pushed out
    assert not gate.serving(b)
    assert gate.counts() == (1, 1)
    for sock in (a, b, c, d):
        sock.close()


def test_a_client_trickling_its_head_is_dropped(make_server: ServerFactory) -> None:
    server = make_server(HttpLimits(read_timeout_s=0.5))
    with socket.create_connection(address(server), timeout=10) as sock:
        started = time.monotonic()
        closed = False
        for char in b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 200:
            try:
                sock.sendall(bytes([char]))
            except OSError:
                closed = True
                break
            time.sleep(0.05)
            if time.monotonic() - started > 3:
                break
        if not closed:
            sock.settimeout(5)
            try:
                closed = sock.recv(1) == b""
            except ConnectionResetError:
                closed = True
        assert closed  # by the server, after its read timeout, not by the test


# -- heads ----------------------------------------------------------------------------------------


def test_head_size_and_count_limits(make_server: ServerFactory) -> None:
    server = make_server(HttpLimits(max_header_bytes=4096, max_headers=10))
    big = raw(server, request_bytes(b"{}", {"X-Big": "a" * 8000}))
    assert status_of(big) == 431
    many = raw(server, request_bytes(b"{}", {f"X-{i}": "1" for i in range(20)}))
    assert status_of(many) == 431
    folded = raw(server, b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n folded\r\n\r\n")
    assert status_of(folded) == 400
    assert status_of(raw(server, b"NOT A REQUEST LINE AT ALL\r\n\r\n")) == 400


def test_a_huge_head_is_refused_without_being_held(make_server: ServerFactory) -> None:
    server = make_server()
    with socket.create_connection(address(server), timeout=10) as sock:
        sock.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        sent = 0
        try:
            while sent < 8 * 1024 * 1024:
                sock.sendall(b"X-Pad: " + b"a" * 60000 + b"\r\n")
                sent += 60009
        except OSError:
            pass  # the server answered and closed: it stopped reading long before
        sock.settimeout(5)
        answer = sock.recv(100)
    assert answer == b"" or status_of(answer) == 431
    assert sent < 8 * 1024 * 1024


def test_malformed_host_and_origin_get_a_clean_answer(
    make_server: ServerFactory, capfd: pytest.CaptureFixture[str]
) -> None:
    server = make_server()
    body = json.dumps(LIST).encode()
    assert status_of(raw(server, request_bytes(body, {"Host": "["}))) == 400
    assert status_of(raw(server, request_bytes(body, {"Host": "localhost:99999999"}))) == 400
    origin = {"Origin": "http://localhost:abc"}
    assert status_of(raw(server, request_bytes(body, origin))) == 403
    assert status_of(raw(server, request_bytes(body, {"Origin": "http://[::1"}))) == 403
    assert status_of(raw(server, b"POST http://[/mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")) == 400
    assert "Traceback" not in capfd.readouterr().err


# -- bodies ---------------------------------------------------------------------------------------


def test_the_token_is_checked_before_the_body_is_read(make_server: ServerFactory) -> None:
    server = make_server()
    with socket.create_connection(address(server), timeout=10) as sock:
        head = request_bytes(b"", {"Content-Length": str(50 * 1024 * 1024)}, token="x" * 32)
        sock.sendall(head)  # and no body at all
        sock.settimeout(5)
        answer = sock.recv(1000)
    assert status_of(answer) == 401


def chunked(body: bytes, piece: int) -> bytes:
    parts = [
        f"{len(body[i : i + piece]):x}\r\n".encode() + body[i : i + piece] + b"\r\n"
        for i in range(0, len(body), piece)
    ]
    return b"".join(parts) + b"0\r\n\r\n"


def test_chunked_bodies_are_counted_while_read(make_server: ServerFactory) -> None:
    server = make_server(max_message_bytes=64 * 1024)
    fields = {"Transfer-Encoding": "chunked"}
    small = request_bytes(b"", fields).replace(b"Content-Length: 0\r\n", b"")
    answer = raw(server, small + chunked(json.dumps(LIST).encode(), 7))
    assert status_of(answer) == 200 and b'"tools"' in answer
    too_big = small + chunked(b"[" + b" " * 100_000 + b"]", 4096)
    answer = raw(server, too_big)
    assert status_of(answer) == 413
    assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"]["code"] == -32600
    both = request_bytes(json.dumps(LIST).encode(), fields)
    assert status_of(raw(server, both)) == 400
    gzip = request_bytes(b"", {"Transfer-Encoding": "gzip"}).replace(b"Content-Length: 0\r\n", b"")
    assert status_of(raw(server, gzip)) == 501
    assert status_of(raw(server, request_bytes(b"{}", {"Content-Length": "+2"}))) == 400


def test_a_body_of_many_tiny_values_is_refused_before_parsing(make_server: ServerFactory) -> None:
    server = make_server()
    body = b"[" + b"[]," * 300_000 + b"[]]"
    answer = raw(server, request_bytes(body))
    assert status_of(answer) == 413
    assert b"JSON values" in answer


def test_json_values_are_counted_outside_strings() -> None:
    assert json_values_within(b'{"a": "' + b",[{" * 1000 + b'"}', 10)
    assert not json_values_within(b"[" + b"1," * 20 + b"1]", 10)
    assert json_values_within(b'["\\"' + b"," * 100 + b'"]', 10)
    # An unterminated string is counted to the end in one pass (and refused by the parser).
    assert json_values_within(b'["' + b'\\"' * 50_000, 10)


def test_the_body_budget_waits_then_refuses() -> None:
    budget = ByteBudget(100)
    assert budget.take(60, 1.0)
    assert not budget.take(60, 0.05)
    assert not budget.take(101, 1.0)
    threading.Timer(0.05, budget.give_back, (60,)).start()
    assert budget.take(60, 5.0)


# -- sessions, reads, exposure --------------------------------------------------------------------


def test_sessions_in_use_are_never_pushed_out() -> None:
    sessions = Sessions(cap=2, idle_s=3600)
    first = sessions.new()
    second = sessions.new()
    assert first is not None and second is not None
    assert sessions.new() is None  # refused, not evicting a live session
    assert sessions.use(first[0]) is not None and sessions.use(second[0]) is not None
    reclaiming = Sessions(cap=1, idle_s=0.0)
    old = reclaiming.new()
    assert old is not None
    held = reclaiming.use(old[0])
    assert held is not None
    assert reclaiming.new() is None  # idle long enough, but serving a request
    reclaiming.release(held)
    assert reclaiming.new() is not None  # now unused: its place is taken
    assert reclaiming.use(old[0]) is None


def test_initialize_at_the_session_cap_is_refused(make_server: ServerFactory) -> None:
    server = make_server()
    server._server.sessions = Sessions(cap=1, idle_s=3600)
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {}},
    }
    body = json.dumps(init).encode()
    first = raw(server, request_bytes(body, {"MCP-Protocol-Version": "2025-11-25"}))
    assert status_of(first) == 200 and b"Mcp-Session-Id" in first
    second = raw(server, request_bytes(body, {"MCP-Protocol-Version": "2025-11-25"}))
    assert status_of(second) == 503 and b"sessions are open" in second


def test_resource_reads_at_once_are_capped(make_server: ServerFactory) -> None:
    server = make_server()
    inner = server._server
    inner.read_wait_s = 0.1
    for _ in range(2):
        assert inner.reads.acquire(timeout=1)
    read = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "resources/read",
        "params": {"_meta": MODERN_META, "uri": "pybox://capabilities"},
    }
    headers = {"Mcp-Method": "resources/read", "Mcp-Name": "pybox://capabilities"}
    answer = raw(server, request_bytes(json.dumps(read).encode(), headers))
    assert status_of(answer) == 503 and b"resource reads" in answer
    inner.reads.release()
    inner.reads.release()
    assert status_of(raw(server, request_bytes(json.dumps(read).encode(), headers))) == 200


def test_plain_http_beyond_loopback_is_warned_about() -> None:
    warning = exposure_warning("0.0.0.0")
    assert warning is not None and "every interface" in warning and "plain HTTP" in warning
    assert "10.0.0.5" in (exposure_warning("10.0.0.5") or "")
    assert exposure_warning("127.0.0.1") is None and exposure_warning("::1") is None


def test_a_client_expecting_100_continue_is_told_to_send(make_server: ServerFactory) -> None:
    server = make_server()
    body = json.dumps(LIST).encode()
    with socket.create_connection(address(server), timeout=10) as sock:
        sock.sendall(
            request_bytes(body, {"Expect": "100-continue"}).split(b"\r\n\r\n")[0] + b"\r\n\r\n"
        )
        assert sock.recv(100).startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
        sock.sendall(body)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    assert status_of(answer) == 200


def test_the_caps_are_operator_flags_checked_at_start(
    engine: FakeEngine, state: StateStore
) -> None:
    parser = argparse.ArgumentParser()
    add_http_arguments(parser)
    add_registry_arguments(parser)
    defaults = parser.parse_args([])
    assert http_limits(defaults, 64 * 1024 * 1024) == HttpLimits()
    flags = "--http-max-connections 8 --http-max-header-kib 4 --http-max-headers 9 "
    flags += "--http-read-timeout-s 2.5 --keep-files-mib 5 --max-read-mib 2"
    args = parser.parse_args(flags.split())
    limits = http_limits(args, 1000)
    assert (limits.max_connections, limits.max_header_bytes, limits.max_headers) == (8, 4096, 9)
    assert (limits.read_timeout_s, limits.max_body_bytes) == (2.5, 1000)
    registry = registry_from_args(make_session(engine, state), args)
    assert (registry.keep_files_bytes, registry.read_max_bytes) == (
        5 * 1024 * 1024,
        2 * 1024 * 1024,
    )
    for bad in (["--http-max-connections", "0"], ["--http-read-timeout-s", "0"]):
        with pytest.raises(ConfigError, match=bad[0]):
            http_limits(parser.parse_args(bad), 1000)
    with pytest.raises(ConfigError, match="--max-read-mib"):
        registry_from_args(make_session(engine, state), parser.parse_args(["--max-read-mib", "0"]))


def test_a_token_beyond_latin_1_works_and_a_wrong_one_is_refused(
    engine: FakeEngine, state: StateStore
) -> None:
    token = "jeton-secret-\u20ac\u4e2d" + "x" * 16
    dispatcher = build_dispatcher(make_session(engine, state), ServerOptions())
    server = HttpServer(HttpSettings("127.0.0.1", 0, token), dispatcher)
    thread = threading.Thread(target=server.serve, daemon=True)
    thread.start()
    try:
        body = json.dumps(LIST).encode()
        good = request_bytes(body, token="@@").replace(b"Bearer @@", f"Bearer {token}".encode())
        assert status_of(raw(server, good)) == 200
        assert status_of(raw(server, request_bytes(body, token="x" * 40))) == 401
    finally:
        server.shutdown()
        thread.join(10)
