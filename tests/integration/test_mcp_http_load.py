"""A load test of `pybox mcp --http` on 127.0.0.1: what an anonymous client can
hold before the token is checked, and a big authenticated body, while a client
with the token keeps getting answers.

The server runs as its own process (the real `pybox mcp`, the real engine);
its threads and memory are read from /proc/<pid>/status. Every connection goes
to 127.0.0.1 and the listener this test started. Bounded: a fixed number of
connections and bytes, every wait has a deadline, and everything is closed at
the end.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_mcp import server_env

TOKEN = "load-test-token-" + "y" * 24
MIB = 1024 * 1024
MAX_CONNECTIONS = 64  # the server's default --http-max-connections
# Stated caps for this load: the server's own threads are at most its connection
# cap plus a fixed few (accept loop, warm pool, run threads); its memory stays
# far below what the same load took before (302 threads, 1.4 GB, 1.63 GB).
MAX_THREADS = MAX_CONNECTIONS + 24
MAX_PEAK_RSS_MIB = 450
MAX_FINAL_RSS_MIB = 300

IDLE_CONNECTIONS = 300
HEADER_FLOODERS = 40
FLOOD_HEADER_BYTES = 6 * MIB
BIG_BODY_BYTES = 60 * MIB
TRICKLERS = 10
TRICKLE_FOR_S = 20.0  # longer than the server's default read timeout (10 s)
DURATION_LIMIT_S = 120.0


def proc_status(pid: int) -> dict[str, int]:
    values: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("Threads", "VmRSS", "VmHWM"):
            values[key] = int(value.split()[0])  # Threads: a count; Vm*: kB
    return values


@pytest.fixture
def server(
    state_dir: Path, engine_name: str
) -> Iterator[tuple[subprocess.Popen[bytes], tuple[str, int]]]:
    env = {**server_env(state_dir, engine_name), "PYBOX_MCP_TOKEN": TOKEN}
    process = subprocess.Popen(
        [sys.executable, "-m", "pybox", "mcp", "--http", "127.0.0.1:0"],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert process.stderr is not None
    address = None
    for _ in range(20):
        found = re.search(rb"at http://127\.0\.0\.1:(\d+)/mcp", process.stderr.readline())
        if found:
            address = ("127.0.0.1", int(found.group(1)))
            break
    log: list[bytes] = []
    stderr = process.stderr
    reader = threading.Thread(target=lambda: log.extend(iter(stderr.readline, b"")), daemon=True)
    reader.start()
    try:
        assert address, "the server did not say where it listens"
        yield process, address
    finally:
        process.terminate()
        process.wait(timeout=60)
        reader.join(10)
        text = b"".join(log).decode(errors="replace")
        assert "Traceback" not in text, text[-3000:]
        assert process.returncode == 0, text[-3000:]


def request(body: bytes, token: str = TOKEN, extra: str = "") -> bytes:
    head = (
        "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer {token}\r\nMCP-Protocol-Version: 2026-07-28\r\n"
        f"Mcp-Method: tools/list\r\nConnection: close\r\n{extra}"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


LIST = json.dumps(
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/list",
        "params": {
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
            }
        },
    }
).encode()


def exchange(address: tuple[str, int], data: bytes, timeout_s: float = 20.0) -> bytes:
    """Send `data`, return the whole answer (b"" if the server closed without one)."""
    with socket.create_connection(address, timeout=timeout_s) as sock:
        try:
            sock.sendall(data)
        except OSError:
            pass  # the server answered early and closed; read what it said
        chunks = []
        try:
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        except OSError:
            pass
    return b"".join(chunks)


def status_of(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.1 ") else 0


class Client:
    """The token holder: asks for the tool list again and again during the load."""

    def __init__(self, address: tuple[str, int]) -> None:
        self.address = address
        self.answered = 0
        self.attempts = 0
        self.unanswered_calls = 0
        self.stop = threading.Event()

    def call(self) -> bool:
        for _ in range(3):  # a pushed-out connection is retried, as HTTP clients do
            self.attempts += 1
            try:
                answer = exchange(self.address, request(LIST))
            except OSError:
                continue
            if status_of(answer) == 200 and b'"run_python"' in answer:
                self.answered += 1
                return True
        self.unanswered_calls += 1
        return False

    def loop(self) -> None:
        while not self.stop.is_set():
            self.call()
            self.stop.wait(0.1)


def hold_idle(address: tuple[str, int], count: int) -> list[socket.socket]:
    sockets = []
    for _ in range(count):
        try:
            sockets.append(socket.create_connection(address, timeout=10))
        except OSError:
            pass  # refused under load: that is allowed
    return sockets


def flood_headers(address: tuple[str, int], results: list[int]) -> None:
    line = b"X-Flood: " + b"a" * 60000 + b"\r\n"
    sent = 0
    with socket.create_connection(address, timeout=20) as sock:
        try:
            sock.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            while sent < FLOOD_HEADER_BYTES:
                sock.sendall(line)
                sent += len(line)
        except OSError:
            pass
        try:
            answer = sock.recv(100)
        except OSError:
            answer = b""
    results.append(status_of(answer))


def trickle(address: tuple[str, int], closed_after: list[float]) -> None:
    """Send a request head a byte at a time; note when the server closed the connection."""
    started = time.monotonic()
    with socket.create_connection(address, timeout=TRICKLE_FOR_S) as sock:
        try:
            sock.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
            while time.monotonic() - started < TRICKLE_FOR_S:
                time.sleep(0.5)
                sock.sendall(b"a")
            return  # never closed: not appended, so the test fails
        except OSError:
            closed_after.append(time.monotonic() - started)


def test_anonymous_load_is_bounded_and_the_token_holder_is_served(
    server: tuple[subprocess.Popen[bytes], tuple[str, int]],
) -> None:
    process, address = server
    started = time.monotonic()
    peak: dict[str, int] = {"Threads": 0, "VmHWM": 0}
    sampling = threading.Event()

    def sample() -> None:
        while not sampling.is_set():
            status = proc_status(process.pid)
            peak["Threads"] = max(peak["Threads"], status["Threads"])
            sampling.wait(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    client = Client(address)
    assert client.call(), "the server does not answer even before the load"
    client_thread = threading.Thread(target=client.loop, daemon=True)
    client_thread.start()
    idle: list[socket.socket] = []
    try:
        # 1. 300 connections that never send a byte.
        idle = hold_idle(address, IDLE_CONNECTIONS)
        # 2. 40 connections each sending 6 MiB of headers, at once.
        header_results: list[int] = []
        flooders = [
            threading.Thread(target=flood_headers, args=(address, header_results), daemon=True)
            for _ in range(HEADER_FLOODERS)
        ]
        for thread in flooders:
            thread.start()
        for thread in flooders:
            thread.join(60)
        # 3. Connections that send their head a byte every half second.
        trickled: list[float] = []
        tricklers = [
            threading.Thread(target=trickle, args=(address, trickled), daemon=True)
            for _ in range(TRICKLERS)
        ]
        for thread in tricklers:
            thread.start()
        # 4. A 60 MiB body without the token: refused before a byte of it is read.
        anonymous = exchange(address, request(b"[" + b" " * (BIG_BODY_BYTES - 2) + b"]", "x" * 40))
        # 5. With the token: 60 MiB of tiny values (the parse would take over 1.5 GB) ...
        tiny = exchange(address, request(b"[" + b"[]," * (BIG_BODY_BYTES // 3 - 1) + b"[]]"))
        # ... and a 60 MiB message that is parsed and answered.
        padded = LIST[:-1] + b', "padding": "' + b"p" * (BIG_BODY_BYTES - len(LIST) - 20) + b'"}'
        big = exchange(address, request(padded))
        for thread in tricklers:
            thread.join(TRICKLE_FOR_S + 10)
        final = proc_status(process.pid)
    finally:
        client.stop.set()
        client_thread.join(30)
        sampling.set()
        sampler.join(10)
        for sock in idle:
            sock.close()
    elapsed_s = time.monotonic() - started
    peak["VmHWM"] = final["VmHWM"]
    summary: dict[str, Any] = {
        "peak_threads": peak["Threads"],
        "peak_rss_mib": round(final["VmHWM"] / 1024),
        "final_rss_mib": round(final["VmRSS"] / 1024),
        "client_answered": client.answered,
        "client_attempts": client.attempts,
        "client_unanswered_calls": client.unanswered_calls,
        "header_flood_statuses": sorted(set(header_results)),
        "tricklers_closed_after_s": sorted(round(t, 1) for t in trickled),
        "elapsed_s": round(elapsed_s, 1),
    }
    print(f"load summary: {summary}")
    assert elapsed_s < DURATION_LIMIT_S  # bounded: it stops by itself
    assert status_of(anonymous) == 401
    assert status_of(tiny) == 413 and b"JSON values" in tiny
    assert status_of(big) == 200
    assert set(header_results) <= {431, 0}  # 431, or closed while still sending
    assert len(trickled) == TRICKLERS, summary  # every one dropped by the server
    assert peak["Threads"] <= MAX_THREADS, summary
    assert final["VmHWM"] / 1024 <= MAX_PEAK_RSS_MIB, summary
    assert final["VmRSS"] / 1024 <= MAX_FINAL_RSS_MIB, summary
    assert client.unanswered_calls == 0 and client.answered >= 5, summary
    assert client.call(), "the server stopped answering after the load"
