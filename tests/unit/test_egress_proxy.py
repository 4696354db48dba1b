"""The egress proxy against hostile clients: every test talks to it over loopback.

The proxy runs in a thread on a loopback listener; "registries" are loopback
listeners the test starts, reached only because the test replaces the address
check (loopback is always refused otherwise, as `test_address_refusals` shows).
"""

from __future__ import annotations

import io
import json
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pybox._inbox import egress_proxy
from pybox._inbox.egress_proxy import Proxy, Refused, address_refusal, parse_connect

ALLOWED = "registry.example"


class Echo:
    """A loopback listener standing in for a registry: echoes, counts connections."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            threading.Thread(target=self._echo, args=(conn,), daemon=True).start()

    @staticmethod
    def _echo(conn: socket.socket) -> None:
        with conn:
            while data := conn.recv(65536):
                conn.sendall(data)


def start(config: dict[str, Any], echo: Echo | None = None) -> tuple[Proxy, int, io.StringIO]:
    out = io.StringIO()
    proxy = Proxy({"allow": [ALLOWED], **config}, out=out)
    resolved: list[str] = []

    def resolve(host: str, port: int, **_: Any) -> list[Any]:
        resolved.append(host)
        target = echo.port if echo else 9
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", target))]

    proxy.resolve = resolve  # type: ignore[assignment]
    proxy.resolved = resolved  # type: ignore[attr-defined]
    proxy.check_address = lambda address, private_ok: None
    listener = socket.create_server(("127.0.0.1", 0))
    threading.Thread(target=proxy.serve, args=(listener,), daemon=True).start()
    return proxy, listener.getsockname()[1], out


def ask(port: int, data: bytes, wait_s: float = 5.0) -> bytes:
    with socket.create_connection(("127.0.0.1", port), 5) as sock:
        sock.sendall(data)
        sock.settimeout(wait_s)
        got = b""
        try:
            while chunk := sock.recv(65536):
                got += chunk
        except (TimeoutError, ConnectionResetError):
            pass
        return got


def events(out: io.StringIO) -> list[dict[str, Any]]:
    time.sleep(0.05)
    return [json.loads(line) for line in out.getvalue().splitlines()]


@pytest.fixture
def echo() -> Iterator[Echo]:
    server = Echo()
    yield server
    server.sock.close()


def wait_idle(proxy: Proxy) -> Proxy:
    """The proxy once every connection it accepted has ended (its tally is whole)."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and proxy.tally()["in_flight"]:
        time.sleep(0.02)
    return proxy


def test_allowed_name_is_relayed_and_counted(echo: Echo) -> None:
    proxy, port, out = start({}, echo)
    with socket.create_connection(("127.0.0.1", port), 5) as sock:
        sock.sendall(f"CONNECT {ALLOWED}:443 HTTP/1.1\r\nHost: x\r\n\r\nhello".encode())
        sock.settimeout(5)
        got = b""
        while b"hello" not in got:
            got += sock.recv(100)
        assert got.startswith(b"HTTP/1.1 200 ")
        sock.sendall(b"world!")
        assert sock.recv(100) == b"world!"
    proxy = wait_idle(proxy)
    assert proxy.tally()["reached"] == [[ALLOWED, 443, 1, 1, 11, 11]]
    assert out.getvalue() == ""  # a client writes nothing to the proxy's stdout


@pytest.mark.parametrize(
    "name",
    [
        "REGISTRY.EXAMPLE",
        "registry.example.",
        "Registry.Example.",
    ],
)
def test_case_and_one_trailing_dot_are_the_same_name(echo: Echo, name: str) -> None:
    _, port, _ = start({}, echo)
    assert ask(port, f"CONNECT {name}:443 HTTP/1.1\r\n\r\n".encode(), 0.5).startswith(
        b"HTTP/1.1 200 "
    )


@pytest.mark.parametrize(
    "name",
    [
        "registry.example..",
        "evil.registry.example",
        "registry.example.evil",
        "registryXexample",
        "127.0.0.1",
        "[::1]",
        "2130706433",
        "0x7f.1",
        "localhost",
        "xn--registry-example",
        "registry.example@evil",
        "registry.example%2e",
        "*.example",
        "",
    ],
)
def test_other_names_are_refused_before_any_lookup(echo: Echo, name: str) -> None:
    proxy, port, _ = start({}, echo)
    answer = ask(port, f"CONNECT {name}:443 HTTP/1.1\r\n\r\n".encode())
    assert answer.split(b" ")[1] in (b"400", b"403"), answer
    assert proxy.resolved == []  # type: ignore[attr-defined]
    assert echo.accepted == 0
    assert wait_idle(proxy).tally()["refused_total"] == 1


def test_idn_homograph_bytes_are_refused() -> None:
    _, port, _ = start({})
    name = "registry.ex\u0430mple".encode()  # Cyrillic a
    assert ask(port, b"CONNECT " + name + b":443 HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 400 ")


@pytest.mark.parametrize(
    "line",
    [
        b"GET http://registry.example/ HTTP/1.1",
        b"connect registry.example:443 HTTP/1.1",
        b"CONNECT registry.example:80 HTTP/1.1",
        b"CONNECT registry.example:22 HTTP/1.1",
        b"CONNECT registry.example HTTP/1.1",
        b"CONNECT registry.example:443",
        b"CONNECT registry.example:443 HTTP/2",
        b"CONNECT  registry.example:443 HTTP/1.1",
        b"CONNECT registry.example:0443000 HTTP/1.1",
        b"CONNECT registry.example:-1 HTTP/1.1",
        b"CONNECT registry.example:443 HTTP/1.1 extra",
        b"CONNECT registry.example\x00:443 HTTP/1.1",
        b"\xff\xfe",
    ],
)
def test_bad_request_lines_are_refused(echo: Echo, line: bytes) -> None:
    _, port, _ = start({}, echo)
    answer = ask(port, line + b"\r\n\r\n")
    assert answer.split(b" ")[1] in (b"400", b"403"), answer
    assert echo.accepted == 0


def test_oversized_header_is_refused() -> None:
    _, port, _ = start({"limits": {"header_bytes": 1024}})
    flood = b"CONNECT registry.example:443 HTTP/1.1\r\nX: " + b"a" * 100_000
    with socket.create_connection(("127.0.0.1", port), 5) as sock:
        try:
            sock.sendall(flood)
        except OSError:
            pass  # the proxy hung up mid-flood: fine
        sock.settimeout(5)
        assert sock.recv(100).startswith(b"HTTP/1.1 431 ")


def test_slowloris_is_cut_at_the_header_deadline() -> None:
    _, port, _ = start({"limits": {"header_s": 0.5}})
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), 5) as sock:
        sock.settimeout(0.1)
        answer = b""
        for byte in b"CONNECT registry.example:443 HTTP/1.1\r\nX: y\r\n":
            try:
                sock.send(bytes([byte]))
                answer += sock.recv(100)
            except TimeoutError:
                continue
            except OSError:
                break
            if answer:
                break
    assert answer.startswith(b"HTTP/1.1 408 ")
    assert time.monotonic() - started < 3.0


def test_connections_at_once_are_bounded() -> None:
    _, port, _ = start({"limits": {"max_connections": 2, "header_s": 3}})
    held = [socket.create_connection(("127.0.0.1", port), 5) for _ in range(2)]
    time.sleep(0.1)
    try:
        assert ask(port, b"", 1.0).startswith(b"HTTP/1.1 503 ")
    finally:
        for sock in held:
            sock.close()


def test_relayed_bytes_are_capped(echo: Echo) -> None:
    proxy, port, _ = start({"limits": {"relay_bytes": 1000}}, echo)
    with socket.create_connection(("127.0.0.1", port), 5) as sock:
        sock.sendall(b"CONNECT registry.example:443 HTTP/1.1\r\n\r\n")
        sock.settimeout(5)
        assert sock.recv(100).startswith(b"HTTP/1.1 200 ")
        try:
            for _ in range(100):
                sock.sendall(b"x" * 100)
                sock.recv(1000)
        except OSError:
            pass
    ((_, _, opened, closed, up, down),) = wait_idle(proxy).tally()["reached"]
    assert (opened, closed) == (1, 1) and 0 < up + down <= 1000


def test_clients_outside_the_subnet_are_hung_up_on() -> None:
    _, port, _ = start({"client_subnet": "10.99.0.0/16"})
    assert ask(port, b"CONNECT registry.example:443 HTTP/1.1\r\n\r\n") == b""


def test_allowed_name_resolving_to_a_refused_address_is_refused() -> None:
    out = io.StringIO()
    proxy = Proxy({"allow": [ALLOWED]}, out=out)
    proxy.resolve = lambda host, port, **_: [
        (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.0.0.5", port)),
    ]
    listener = socket.create_server(("127.0.0.1", 0))
    threading.Thread(target=proxy.serve, args=(listener,), daemon=True).start()
    answer = ask(listener.getsockname()[1], b"CONNECT registry.example:443 HTTP/1.1\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 403 ")
    assert b"10.0.0.5" in answer


@pytest.mark.parametrize(
    ("address", "private_ok", "refused"),
    [
        ("127.0.0.1", True, True),
        ("::1", True, True),
        ("::ffff:127.0.0.1", True, True),
        ("169.254.169.254", True, True),
        ("fe80::1%eth0", True, True),
        ("224.0.0.1", True, True),
        ("0.0.0.0", True, True),
        ("240.0.0.1", True, True),
        ("10.1.2.3", False, True),
        ("172.17.0.1", False, True),
        ("192.168.1.1", False, True),
        ("fd00::1", False, True),
        ("203.0.113.80", False, True),
        ("10.1.2.3", True, False),
        ("203.0.113.80", True, False),
        ("151.101.0.223", False, False),
        ("2a04:4e42::223", False, False),
    ],
)
def test_address_refusals(address: str, private_ok: bool, refused: bool) -> None:
    assert (address_refusal(address, private_ok) is not None) == refused


def test_parse_connect_normalises() -> None:
    assert parse_connect(b"CONNECT A.B.:443 HTTP/1.1", frozenset({443})) == ("a.b", 443)
    with pytest.raises(Refused):
        parse_connect(b"CONNECT a.b:443 HTTP/1.1", frozenset({8443}))


def test_upstream_proxy_is_chained(echo: Echo) -> None:
    seen: list[bytes] = []
    upstream = socket.create_server(("127.0.0.1", 0))

    def serve_upstream() -> None:
        conn, _ = upstream.accept()
        head = b""
        while b"\r\n\r\n" not in head:
            head += conn.recv(100)
        seen.append(head)
        conn.sendall(b"HTTP/1.1 200 OK\r\n\r\n")
        while data := conn.recv(100):
            conn.sendall(data.upper())
        conn.close()

    threading.Thread(target=serve_upstream, daemon=True).start()
    proxy, port, _ = start({"upstream": ["127.0.0.1", upstream.getsockname()[1]]}, echo)
    with socket.create_connection(("127.0.0.1", port), 5) as sock:
        sock.sendall(b"CONNECT registry.example:443 HTTP/1.1\r\n\r\n")
        sock.settimeout(5)
        assert sock.recv(100).startswith(b"HTTP/1.1 200 ")
        sock.sendall(b"abc")
        assert sock.recv(100) == b"ABC"
    assert seen[0].startswith(b"CONNECT registry.example:443 HTTP/1.1\r\n")
    assert proxy.resolved == []  # type: ignore[attr-defined]  # the upstream resolves
    upstream.close()


def test_the_proxy_imports_nothing_from_pybox() -> None:
    lines = Path(egress_proxy.__file__).read_text(encoding="utf-8").splitlines()
    imports = [line for line in lines if line.startswith(("import ", "from "))]
    assert imports and not [line for line in imports if "pybox" in line]


def test_a_flood_of_refusals_keeps_every_host_reached_and_counts_what_it_drops(
    echo: Echo,
) -> None:
    """The tally is apart from any log: past its bound of refused names it counts
    what it dropped; the allowed rows (bounded by the allowlist) are never pushed out."""
    proxy, port, out = start({"limits": {"refused_names": 3}}, echo)
    with socket.create_connection(("127.0.0.1", port), 5) as sock:
        sock.sendall(f"CONNECT {ALLOWED}:443 HTTP/1.1\r\n\r\nhi".encode())
        sock.settimeout(5)
        got = b""
        while b"hi" not in got:
            got += sock.recv(100)
    for i in range(10):
        assert ask(port, f"CONNECT n{i}.invalid:443 HTTP/1.1\r\n\r\n".encode()).startswith(
            b"HTTP/1.1 403 "
        )
    ask(port, b"CONNECT n0.invalid:443 HTTP/1.1\r\n\r\n")  # a kept name: counted again
    ask(port, b"GET / HTTP/1.1\r\n\r\n")  # no name at all: counted, nothing kept
    tally = wait_idle(proxy).tally()
    assert tally["reached"] == [[ALLOWED, 443, 1, 1, 2, 2]]
    assert tally["refused"] == [["n0.invalid", 2], ["n1.invalid", 1], ["n2.invalid", 1]]
    assert (tally["refused_total"], tally["refused_dropped"]) == (12, 7)
    assert (tally["refused_names_max"], tally["in_flight"]) == (3, 0)
    assert out.getvalue() == ""  # nothing the clients did was written


def test_the_tally_is_written_only_when_asked() -> None:
    out = io.StringIO()
    proxy = Proxy({"allow": [ALLOWED]}, out=out)
    proxy.count_refused("x.invalid")
    assert out.getvalue() == ""
    threading.Thread(target=proxy.reporter, daemon=True).start()
    proxy.ask()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not out.getvalue():
        time.sleep(0.01)
    (line,) = events(out)
    assert line["event"] == "tally" and line["refused"] == [["x.invalid", 1]]
    assert abs(line["t"] - time.time()) < 10


def test_the_real_entrypoint_answers_sigusr1_with_its_tally() -> None:
    """As in its container: `python -I -S -c <source> <config>`, asked by signal."""
    source = Path(egress_proxy.__file__).read_text(encoding="utf-8")
    config = json.dumps({"allow": [ALLOWED], "listen_port": 0, "client_subnet": "127.0.0.0/8"})
    proc = subprocess.Popen(
        [sys.executable, "-I", "-S", "-c", source, config],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        listening = json.loads(proc.stdout.readline())
        assert listening["event"] == "listening"
        answer = ask(listening["port"], b"CONNECT off.invalid:443 HTTP/1.1\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 403 ")
        # Clients in the middle of their heads: threads the signal could land on,
        # while the main thread waits in accept() (no new client comes).
        held = [socket.create_connection(("127.0.0.1", listening["port"]), 5) for _ in range(3)]
        time.sleep(0.5)  # each accepted: three threads reading heads (5 s allowed)
        for _ in range(30):
            proc.send_signal(signal.SIGUSR1)
            ready, _, _ = select.select([proc.stdout], [], [], 3.0)
            assert ready, "the proxy did not answer an ask within 3 s"
            tally = json.loads(proc.stdout.readline())
            assert tally["event"] == "tally" and tally["in_flight"] == 3
            assert (tally["refused"], tally["refused_total"]) == ([["off.invalid", 1]], 1)
        for sock in held:
            sock.close()
    finally:
        proc.kill()
        proc.wait(10)
