"""The MCP transports without an engine: stdio framing and hygiene, HTTP, and a fuzz test."""

from __future__ import annotations

import copy
import http.client
import io
import json
import queue
import random
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from pybox._adapters.state import StateStore
from pybox._core.errors import ConfigError
from pybox._frontends.mcp import ServerOptions, build_dispatcher
from pybox._frontends.mcp._http.server import HttpServer
from pybox._frontends.mcp._http.settings import HttpSettings, http_settings
from pybox._frontends.mcp._stdio import StdioServer
from pybox._frontends.mcp._tools import TOOLS
from tests.unit.conftest import make_session
from tests.unit.fake_engine import FakeEngine, Script
from tests.unit.mcp_harness import MODERN_META

TOKEN = "t" * 32


def serve_stdio(
    engine: FakeEngine, state: StateStore, data: bytes, options: ServerOptions | None = None
) -> list[bytes]:
    dispatcher = build_dispatcher(make_session(engine, state), options or ServerOptions())
    writer = io.BytesIO()
    assert StdioServer(dispatcher, io.BytesIO(data), writer).serve() == 0
    return writer.getvalue().splitlines(keepends=True)


def assert_protocol_only(lines: list[bytes]) -> list[dict[str, Any]]:
    """Every byte on stdout is a newline-terminated JSON-RPC message."""
    messages = []
    for line in lines:
        assert line.endswith(b"\n")
        message = json.loads(line)
        assert isinstance(message, dict) and message["jsonrpc"] == "2.0", line
        if "method" in message:
            assert message["method"] == "notifications/progress" and "id" not in message
        else:
            assert "id" in message and ("result" in message) != ("error" in message), line
            if "error" in message:
                assert isinstance(message["error"]["code"], int)
                assert isinstance(message["error"]["message"], str)
        messages.append(message)
    return messages


# -- stdio -------------------------------------------------------------------------------------


class QueueReader:
    """stdin that the test feeds line by line; None is end of input."""

    def __init__(self) -> None:
        self.lines: queue.Queue[bytes | None] = queue.Queue()

    def readline(self, limit: int = -1) -> bytes:
        line = self.lines.get()
        return b"" if line is None else line


class QueueWriter:
    def __init__(self) -> None:
        self.lines: queue.Queue[bytes] = queue.Queue()

    def write(self, data: bytes) -> int:
        self.lines.put(data)
        return len(data)

    def flush(self) -> None:
        pass


def test_stdio_huge_line_is_dropped_without_holding_it(
    engine: FakeEngine, state: StateStore
) -> None:
    huge = b'{"jsonrpc":"2.0","id":1,"method":"' + b"x" * 300_000 + b'"}\n'
    after = json.dumps({"jsonrpc": "2.0", "id": 2, "method": "server/discover"}).encode()
    lines = serve_stdio(engine, state, huge + after + b"\n", ServerOptions(max_message_bytes=1024))
    first, second = assert_protocol_only(lines)
    assert first["error"]["code"] == -32600 and str(len(huge)) in first["error"]["message"]
    assert second["id"] == 2 and "result" in second


@contextmanager
def live_stdio(engine: FakeEngine, state: StateStore) -> Iterator[tuple[QueueReader, QueueWriter]]:
    """A stdio server in a thread; the test writes lines and reads replies; end of
    input is sent on exit, and the server must then end by itself."""
    dispatcher = build_dispatcher(make_session(engine, state), ServerOptions())
    reader, writer = QueueReader(), QueueWriter()
    server = StdioServer(dispatcher, reader, writer)  # type: ignore[arg-type]
    thread = threading.Thread(target=server.serve)
    thread.start()
    try:
        yield reader, writer
    finally:
        reader.lines.put(None)
        thread.join(10)
    assert not thread.is_alive()


def next_response(writer: QueueWriter) -> dict[str, Any]:
    while True:
        [message] = assert_protocol_only([writer.lines.get(timeout=10)])
        if "id" in message:
            return message


def call_line(tool: str, arguments: dict[str, Any], request_id: int = 1) -> bytes:
    params = {"_meta": MODERN_META, "name": tool, "arguments": arguments}
    message = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}
    return json.dumps(message).encode() + b"\n"


def test_stdio_frames_and_exit_on_eof(engine: FakeEngine, state: StateStore) -> None:
    engine.script = Script(stdout=b"hello\n")
    with live_stdio(engine, state) as (reader, writer):
        reader.lines.put(call_line("run_python", {"code": "x"}))
        reader.lines.put(b"\n")
        reader.lines.put(b"   \r\n")
        answer = next_response(writer)
        assert answer["result"]["structuredContent"]["stdout"] == "hello\n"
    assert writer.lines.empty()


def test_eof_stops_a_run_in_flight_and_removes_its_box(
    engine: FakeEngine, state: StateStore
) -> None:
    engine.script = Script(hang=True)
    with live_stdio(engine, state) as (reader, writer):
        reader.lines.put(call_line("start_run", {"code": ""}))
        assert next_response(writer)["result"]["structuredContent"]["state"] == "running"
        deadline = time.monotonic() + 10
        while not engine.containers:  # the run's thread creates the box
            assert time.monotonic() < deadline
            time.sleep(0.01)
    assert not engine.containers
    assert any(name == "kill" for name, _ in engine.calls)


CLAIM_PROGRAM = """
import subprocess, sys
from pybox._frontends.mcp._stdio import claim_stdio
with claim_stdio() as (reader, writer):
    print("a stray print")
    subprocess.run(["sh", "-c", "echo from a child; cat"], check=True)
    writer.write(reader.readline())
    writer.flush()
print("after")
"""


def test_no_child_and_no_print_reaches_the_protocol_stream() -> None:
    done = subprocess.run(
        [sys.executable, "-c", CLAIM_PROGRAM],
        input=b'{"jsonrpc":"2.0","id":1,"result":{}}\n',
        capture_output=True,
        timeout=30,
        check=True,
    )
    assert done.stdout == b'{"jsonrpc":"2.0","id":1,"result":{}}\nafter\n'
    assert b"a stray print" in done.stderr and b"from a child" in done.stderr


# -- fuzz -----------------------------------------------------------------------------------


SEEDS: list[Any] = [
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {}},
    },
    {"jsonrpc": "2.0", "method": "notifications/initialized"},
    {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
    {"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {"_meta": MODERN_META}},
    {
        "jsonrpc": "2.0",
        "id": 4,
        "method": "tools/call",
        "params": {
            "_meta": {**MODERN_META, "progressToken": 1},
            "name": "run_python",
            "arguments": {
                "code": "print(1)",
                "files": [{"name": "a.txt", "content": "aGk=", "encoding": "base64"}],
                "limits": {"timeout_s": 5, "memory_mib": 64},
                "return_files": True,
            },
        },
    },
    {
        "jsonrpc": "2.0",
        "id": "g",
        "method": "tools/call",
        "params": {"name": "get_run", "arguments": {"run_id": "00", "wait_s": 0}},
    },
    {
        "jsonrpc": "2.0",
        "id": 5,
        "method": "tools/call",
        "params": {"_meta": MODERN_META, "name": "stop_run", "arguments": {"run_id": "00"}},
    },
    {
        "jsonrpc": "2.0",
        "id": 6,
        "method": "resources/read",
        "params": {"uri": "pybox://capabilities"},
    },
    {"jsonrpc": "2.0", "id": 7, "method": "resources/templates/list", "params": {}},
    {"jsonrpc": "2.0", "id": 8, "method": "server/discover", "params": {"_meta": MODERN_META}},
    {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 4}},
    {"jsonrpc": "2.0", "id": 9, "method": "ping"},
]

ODD_VALUES: list[Any] = [
    None,
    True,
    False,
    0,
    -1,
    2**70,
    1e308,
    -0.0,
    "",
    "\u0000\ud800",
    "x" * 5000,
    [],
    [[[[[]]]]],
    {},
    {"_meta": None},
    "2026-07-28",
    "tools/call",
]


def _mutate_value(rng: random.Random, value: Any) -> Any:
    if isinstance(value, dict) and value:
        value = dict(value)
        key = rng.choice(list(value))
        roll = rng.random()
        if roll < 0.3:
            del value[key]
        elif roll < 0.8:
            value[key] = _mutate_value(rng, value[key])
        else:
            value[rng.choice(["extra", "_meta", "id", "params", key + "x"])] = rng.choice(
                ODD_VALUES
            )
        return value
    if isinstance(value, list) and value:
        value = list(value)
        index = rng.randrange(len(value))
        value[index] = _mutate_value(rng, value[index])
        return value
    return rng.choice(ODD_VALUES)


def fuzz_frames(seed: int, count: int) -> Iterator[bytes]:
    rng = random.Random(seed)
    for _ in range(count):
        roll = rng.random()
        base = copy.deepcopy(rng.choice(SEEDS))
        if roll < 0.55:
            yield json.dumps(_mutate_value(rng, base), ensure_ascii=rng.random() < 0.5).encode(
                "utf-8", "surrogatepass"
            )
        elif roll < 0.8:
            raw = bytearray(json.dumps(base).encode())
            for _ in range(rng.randint(1, 4)):
                position = rng.randrange(len(raw))
                action = rng.random()
                if action < 0.4:
                    raw[position] = rng.randrange(256)
                elif action < 0.7:
                    del raw[position]
                else:
                    raw.insert(position, rng.choice(b'{}[]",:\\0e-'))
            yield bytes(raw).replace(b"\n", b" ")
        elif roll < 0.9:
            yield bytes(rng.randrange(1, 256) for _ in range(rng.randint(1, 200))).replace(
                b"\n", b" "
            )
        else:
            yield json.dumps(base).encode()


def test_fuzz_never_crashes_and_stdout_stays_json_rpc(
    engine: FakeEngine, state: StateStore
) -> None:
    engine.script = Script(stdout=b"1\n")
    data = b"\n".join(fuzz_frames(seed=20261129, count=3000)) + b"\n"
    lines = serve_stdio(engine, state, data, ServerOptions(max_message_bytes=64 * 1024))
    messages = assert_protocol_only(lines)
    assert len(messages) > 1000
    assert not engine.containers


# -- Streamable HTTP ------------------------------------------------------------------------------


@pytest.fixture
def http_server(engine: FakeEngine, state: StateStore) -> Iterator[HttpServer]:
    dispatcher = build_dispatcher(make_session(engine, state), ServerOptions())
    server = HttpServer(HttpSettings("127.0.0.1", 0, TOKEN), dispatcher)
    thread = threading.Thread(target=server.serve, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    thread.join(10)


def post(
    server: HttpServer,
    body: Any,
    headers: dict[str, str] | None = None,
    *,
    token: str | None = TOKEN,
    method: str = "POST",
) -> tuple[int, dict[str, str], bytes]:
    host_port = server.url.split("/")[2]
    conn = http.client.HTTPConnection(host_port, timeout=30)
    sent = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    if token is not None:
        sent["Authorization"] = f"Bearer {token}"
    sent.update(headers or {})
    payload = body if isinstance(body, bytes) else json.dumps(body).encode()
    conn.request(method, "/mcp", body=payload if method == "POST" else None, headers=sent)
    response = conn.getresponse()
    data = response.read()
    conn.close()
    return response.status, {k.lower(): v for k, v in response.getheaders()}, data


MODERN_HEADERS = {"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/list"}
LIST = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": MODERN_META}}


def test_http_needs_the_token_and_a_good_origin(http_server: HttpServer) -> None:
    assert post(http_server, LIST, MODERN_HEADERS, token=None)[0] == 401
    assert post(http_server, LIST, MODERN_HEADERS, token="wrong" * 8)[0] == 401
    evil = {**MODERN_HEADERS, "Origin": "http://evil.invalid"}
    assert post(http_server, LIST, evil)[0] == 403
    rebinding = {**MODERN_HEADERS, "Host": "evil.invalid"}
    assert post(http_server, LIST, rebinding)[0] == 403
    port = http_server.url.split(":")[2].split("/")[0]
    own = {**MODERN_HEADERS, "Origin": f"http://localhost:{port}"}
    assert post(http_server, LIST, own)[0] == 200


def test_http_stateless_requests(http_server: HttpServer) -> None:
    status, headers, body = post(http_server, LIST, MODERN_HEADERS)
    assert status == 200 and "mcp-session-id" not in headers
    assert json.loads(body)["result"]["resultType"] == "complete"
    status, _, body = post(http_server, LIST, {**MODERN_HEADERS, "Mcp-Method": "tools/call"})
    assert status == 400 and json.loads(body)["error"]["code"] == -32020
    status, _, body = post(http_server, LIST, {"Mcp-Method": "tools/list"})
    assert status == 400 and json.loads(body)["error"]["code"] == -32020
    read = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "resources/read",
        "params": {"_meta": MODERN_META, "uri": "pybox://capabilities"},
    }
    read_headers = {**MODERN_HEADERS, "Mcp-Method": "resources/read"}
    status, _, body = post(http_server, read, {**read_headers, "Mcp-Name": "pybox://other"})
    assert status == 400 and json.loads(body)["error"]["code"] == -32020
    encoded = "=?base64?cHlib3g6Ly9jYXBhYmlsaXRpZXM=?="  # pybox://capabilities
    status, _, body = post(http_server, read, {**read_headers, "Mcp-Name": encoded})
    assert status == 200 and json.loads(body)["result"]["contents"]
    unknown = {**LIST, "method": "nope/nope"}
    status, _, body = post(http_server, unknown, {**MODERN_HEADERS, "Mcp-Method": "nope/nope"})
    assert status == 404 and json.loads(body)["error"]["code"] == -32601
    status, _, body = post(http_server, b"{not json", MODERN_HEADERS)
    assert status == 400 and json.loads(body)["error"]["code"] == -32700
    assert post(http_server, b"", MODERN_HEADERS, method="GET")[0] == 405
    status, _, body = post(http_server, LIST, {"MCP-Protocol-Version": "1999-01-01"})
    assert status == 400 and json.loads(body)["error"]["code"] == -32022


def test_http_sessions_for_the_handshake_era(http_server: HttpServer) -> None:
    legacy = {"MCP-Protocol-Version": "2025-11-25"}
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    status, _, body = post(http_server, listing, legacy)
    assert status == 400 and json.loads(body)["error"]["code"] == -32600
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {}},
    }
    status, headers, body = post(http_server, init)
    assert status == 200 and json.loads(body)["result"]["protocolVersion"] == "2025-11-25"
    session = {**legacy, "Mcp-Session-Id": headers["mcp-session-id"]}
    notified = post(http_server, {"jsonrpc": "2.0", "method": "notifications/initialized"}, session)
    assert notified[0] == 202
    status, _, body = post(http_server, listing, session)
    assert status == 200 and len(json.loads(body)["result"]["tools"]) == len(TOOLS)
    assert post(http_server, listing, {**legacy, "Mcp-Session-Id": "unknown"})[0] == 404
    assert post(http_server, b"", session, method="DELETE")[0] == 204
    assert post(http_server, listing, session)[0] == 404


def test_http_tool_call_streams_progress_then_the_result(
    http_server: HttpServer, engine: FakeEngine
) -> None:
    engine.script = Script(stdout=b"ok\n")
    call = {
        "jsonrpc": "2.0",
        "id": 3,
        "method": "tools/call",
        "params": {
            "_meta": {**MODERN_META, "progressToken": "p"},
            "name": "run_python",
            "arguments": {"code": "print('ok')"},
        },
    }
    headers = {**MODERN_HEADERS, "Mcp-Method": "tools/call", "Mcp-Name": "run_python"}
    status, response_headers, body = post(http_server, call, headers)
    assert status == 200 and response_headers["content-type"] == "text/event-stream"
    events = [
        json.loads(chunk.split(b"data: ", 1)[1]) for chunk in body.split(b"\n\n") if chunk.strip()
    ]
    assert events[0]["method"] == "notifications/progress"
    assert events[-1]["result"]["structuredContent"]["stdout"] == "ok\n"


def test_http_progress_carries_the_output_while_the_run_runs(
    http_server: HttpServer, engine: FakeEngine
) -> None:
    engine.script = Script(stdout=b"live line\n", hang=True)
    call = {
        "jsonrpc": "2.0",
        "id": 4,
        "method": "tools/call",
        "params": {
            "_meta": {**MODERN_META, "progressToken": "p"},
            "name": "run_python",
            "arguments": {"code": "...", "limits": {"timeout_s": 1}},
        },
    }
    headers = {**MODERN_HEADERS, "Mcp-Method": "tools/call", "Mcp-Name": "run_python"}
    status, _, body = post(http_server, call, headers)
    events = [
        json.loads(chunk.split(b"data: ", 1)[1]) for chunk in body.split(b"\n\n") if chunk.strip()
    ]
    notices = [e["params"]["message"] for e in events if "method" in e]
    assert status == 200 and any("begin program stdout" in m and "live line" in m for m in notices)
    assert events[-1]["result"]["structuredContent"]["status"] == "timed_out"


def test_http_refuses_a_huge_body(http_server: HttpServer) -> None:
    host_port = http_server.url.split("/")[2]
    conn = http.client.HTTPConnection(host_port, timeout=30)
    conn.putrequest("POST", "/mcp")
    conn.putheader("Authorization", f"Bearer {TOKEN}")
    conn.putheader("Content-Length", str(10**12))
    conn.endheaders()
    response = conn.getresponse()
    assert response.status == 413
    assert json.loads(response.read())["error"]["code"] == -32600
    conn.close()


def test_a_public_address_needs_an_operator_token() -> None:
    with pytest.raises(ConfigError, match="not a loopback address"):
        http_settings("0.0.0.0:8080", {}, ())
    settings, generated = http_settings("127.0.0.1:0", {}, ())
    assert generated and len(settings.token) >= 32
    settings, generated = http_settings("0.0.0.0:8080", {"PYBOX_MCP_TOKEN": TOKEN}, ())
    assert not generated and settings.token == TOKEN
    with pytest.raises(ConfigError, match="port"):
        http_settings("127.0.0.1:http", {}, ())
