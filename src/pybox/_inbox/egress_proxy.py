"""pybox's egress proxy: CONNECT to allowlisted host names, nothing else.

Runs in a pybox-owned container (docs/containment.md, "Network modes") and is
reachable from untrusted code, so it is small and every resource is bounded:
connections at once, header bytes, time to send the header (a whole-header
deadline, not a per-read one), idle time, a connection's lifetime and the bytes
it relays. It imports nothing from pybox (it runs with the image's Python) and
only the standard library.

A request is one line, `CONNECT name:port HTTP/1.x`, then headers that are read
(bounded) and ignored. The name is lowercased and one trailing dot dropped, and
must then equal an allowlisted name exactly: IP literals, other spellings of an
address, non-ASCII (IDN) bytes and anything else fail that comparison before any
lookup. An allowed name's addresses are checked before connecting (never
loopback, link-local, multicast, unspecified or reserved; non-global only when
the operator allows private addresses), and the connection goes to the checked
address, so a second lookup cannot change it. With an upstream proxy the
connection is chained through it (CONNECT again) and the upstream resolves.

What it did is kept in a tally, apart from any log: per allowed (name, port) the
connections opened and closed and the bytes each way; per refused name the
requests refused, up to `refused_names` distinct names (later names are counted
as dropped, never forgotten silently); refusals in all; connections in flight.
The allowed rows are bounded by the allowlist, so no flood can push them out.
Nothing a client does writes to stdout: the proxy prints one `listening` line,
then one `tally` line each time pybox asks for it (SIGUSR1, sent through the
engine, taken by a thread of its own with sigwait), so the log the engine caps
holds only answers and can not be flooded away. pybox reads the newest tally
after its ask.
"""

from __future__ import annotations

import ipaddress
import json
import select
import signal
import socket
import sys
import threading
import time
from typing import Any

LIMITS = {
    "max_connections": 16,
    "header_bytes": 4096,
    "header_s": 5.0,
    "connect_s": 10.0,
    "idle_s": 60.0,
    "lifetime_s": 900.0,
    "relay_bytes": 512 * 1024 * 1024,
    # Distinct refused names the tally keeps (with a count each); refusals to
    # names past it are counted as dropped. Bounds the tally's memory and line.
    "refused_names": 256,
}
REASONS = {
    400: "Bad Request",
    403: "Forbidden",
    408: "Request Timeout",
    431: "Request Header Fields Too Large",
    502: "Bad Gateway",
    503: "Service Unavailable",
}
MAX_NAME = 253


class Refused(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


def normalise_name(name: str) -> str:
    """Lowercase, one trailing dot dropped; the allowlist is compared against this."""
    name = name.lower()
    return name[:-1] if name.endswith(".") else name


def parse_connect(head: bytes, ports: frozenset[int]) -> tuple[str, int]:
    """The (name, port) of a CONNECT head, or Refused."""
    line, _, _ = head.partition(b"\r\n")
    try:
        text = line.decode("ascii")
    except UnicodeDecodeError:
        raise Refused(400, "the request line is not ASCII") from None
    parts = text.split(" ")
    if len(parts) != 3 or parts[2] not in ("HTTP/1.1", "HTTP/1.0"):
        raise Refused(400, "not a request line")
    if parts[0] != "CONNECT":
        raise Refused(403, "only CONNECT is served")
    host, sep, port_text = parts[1].rpartition(":")
    if not sep or not port_text.isdigit() or len(port_text) > 5:
        raise Refused(400, "the target is not name:port")
    port = int(port_text)
    if port not in ports:
        raise Refused(403, f"port {port} is not allowed")
    if not host or len(host) > MAX_NAME + 1 or not host.isprintable():
        raise Refused(400, "the target name is empty, too long or unprintable")
    return normalise_name(host), port


def address_refusal(address: str, private_ok: bool) -> str | None:
    """Why a resolved address is refused, or None."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.is_loopback or ip.is_link_local or ip.is_multicast:
        return "loopback, link-local or multicast"
    if ip.is_unspecified or ip.is_reserved:
        return "unspecified or reserved"
    if not ip.is_global and not private_ok:
        return "not a global address (the operator has not allowed private addresses)"
    return None


class Proxy:
    def __init__(self, config: dict[str, Any], out: Any = None) -> None:
        self.allow = frozenset(normalise_name(n) for n in config["allow"])
        self.ports = frozenset(int(p) for p in config.get("ports", [443]))
        self.private_ok = bool(config.get("private_addresses", False))
        self.upstream: tuple[str, int] | None = None
        if config.get("upstream"):
            up_host, up_port = config["upstream"]
            self.upstream = (str(up_host), int(up_port))
        subnet = config.get("client_subnet")
        self.clients = ipaddress.ip_network(subnet) if subnet else None
        self.limits = {**LIMITS, **config.get("limits", {})}
        self.resolve = socket.getaddrinfo
        self.check_address = address_refusal
        self._out = out if out is not None else sys.stdout
        self._lock = threading.Lock()
        self._seq = 0
        self._slots = threading.BoundedSemaphore(int(self.limits["max_connections"]))
        # The tally (guarded by _lock): (name, port) -> [opened, closed, up, down]
        # for allowed names; name -> refusals for refused ones.
        self._reached: dict[tuple[str, int], list[int]] = {}
        self._refused: dict[str, int] = {}
        self._refused_total = 0
        self._refused_dropped = 0
        self._in_flight = 0
        self._asked = threading.Event()

    def log(self, **fields: Any) -> None:
        with self._lock:
            self._seq += 1
            line = {"seq": self._seq, "t": round(time.time(), 3), **fields}
            self._out.write(json.dumps(line) + "\n")
            self._out.flush()

    def count_refused(self, host: str) -> None:
        with self._lock:
            self._refused_total += 1
            if not host:
                return  # no name to keep (a bad request line, say): counted above
            if host in self._refused:
                self._refused[host] += 1
            elif len(self._refused) < int(self.limits["refused_names"]):
                self._refused[host] = 1
            else:
                self._refused_dropped += 1

    def count_open(self, host: str, port: int) -> None:
        with self._lock:
            self._reached.setdefault((host, port), [0, 0, 0, 0])[0] += 1

    def count_close(self, host: str, port: int, up: int, down: int) -> None:
        with self._lock:
            row = self._reached.setdefault((host, port), [0, 0, 0, 0])
            row[1] += 1
            row[2] += up
            row[3] += down

    def tally(self) -> dict[str, Any]:
        """Everything counted since the proxy started (pybox subtracts its last ask)."""
        with self._lock:
            return {
                "reached": [[h, p, *row] for (h, p), row in self._reached.items()],
                "refused": [[name, count] for name, count in self._refused.items()],
                "refused_total": self._refused_total,
                "refused_dropped": self._refused_dropped,
                "refused_names_max": int(self.limits["refused_names"]),
                "in_flight": self._in_flight,
            }

    def report(self) -> None:
        self.log(event="tally", **self.tally())

    def ask(self, *_: Any) -> None:
        """An ask for the tally: the reporter thread writes it."""
        self._asked.set()

    def reporter(self, wait: Any = None) -> None:
        """Writes the tally at each ask: `wait()` returns at one (default: `ask()`)."""
        while True:
            if wait is not None:
                wait()
            else:
                self._asked.wait()
                self._asked.clear()
            self.report()

    def serve(self, listener: socket.socket) -> None:
        while True:
            try:
                conn, peer = listener.accept()
            except OSError:  # out of file descriptors, say: wait, never end
                time.sleep(0.1)
                continue
            if self.clients is not None and ipaddress.ip_address(peer[0]) not in self.clients:
                conn.close()
                continue
            if not self._slots.acquire(blocking=False):
                self._answer(conn, 503, "too many connections at once")
                conn.close()
                self.count_refused("")
                continue
            with self._lock:
                self._in_flight += 1
            threading.Thread(target=self._serve_one, args=(conn,), daemon=True).start()

    def _serve_one(self, conn: socket.socket) -> None:
        try:
            self.handle(conn)
        finally:
            conn.close()
            with self._lock:
                self._in_flight -= 1
            self._slots.release()

    def handle(self, conn: socket.socket) -> None:
        host, port = "", 0
        try:
            head, rest = self._read_head(conn)
            host, port = parse_connect(head, self.ports)
            if host not in self.allow:
                raise Refused(403, "the name is not on the operator's allowlist")
            upstream = self._open(host, port)
        except Refused as exc:
            self._answer(conn, exc.status, exc.reason)
            self.count_refused(host[:MAX_NAME])
            return
        self.count_open(host, port)
        up = down = 0
        try:
            conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            if rest:
                upstream.sendall(rest)
                up += len(rest)
            up, down = self._relay(conn, upstream, up)
        except OSError:
            pass
        finally:
            upstream.close()
            self.count_close(host, port, up, down)

    def _read_head(self, conn: socket.socket) -> tuple[bytes, bytes]:
        limit = int(self.limits["header_bytes"])
        deadline = time.monotonic() + float(self.limits["header_s"])
        data = b""
        while b"\r\n\r\n" not in data:
            if len(data) >= limit:
                raise Refused(431, f"the header is over {limit} bytes")
            left = deadline - time.monotonic()
            if left <= 0:
                raise Refused(408, f"the header did not arrive within {self.limits['header_s']} s")
            conn.settimeout(left)
            try:
                chunk = conn.recv(limit - len(data))
            except TimeoutError:
                continue
            except OSError:
                raise Refused(400, "the client went away") from None
            if not chunk:
                raise Refused(400, "the client closed before the header ended")
            data += chunk
        head, _, rest = data.partition(b"\r\n\r\n")
        if len(head) + 4 > limit:
            raise Refused(431, f"the header is over {limit} bytes")
        return head, rest

    def _open(self, host: str, port: int) -> socket.socket:
        timeout = float(self.limits["connect_s"])
        if self.upstream is not None:
            return self._chain(host, port, timeout)
        try:
            infos = self.resolve(host, port, type=socket.SOCK_STREAM)
        except OSError:
            raise Refused(502, "the name did not resolve") from None
        addresses = [info[4][0] for info in infos]
        for address in addresses:
            why = self.check_address(str(address), self.private_ok)
            if why:
                raise Refused(403, f"the name resolves to {address}: {why}")
        for family, kind, proto, _, sockaddr in infos:
            sock = socket.socket(family, kind, proto)
            sock.settimeout(timeout)
            try:
                sock.connect(sockaddr)
                return sock
            except OSError:
                sock.close()
        raise Refused(502, "no address of the name accepted the connection")

    def _chain(self, host: str, port: int, timeout: float) -> socket.socket:
        assert self.upstream is not None
        try:
            sock = socket.create_connection(self.upstream, timeout)
            sock.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
            head, rest = self._read_head(sock)
        except (OSError, Refused):
            raise Refused(502, "the upstream proxy did not answer") from None
        status = head.split(b" ", 2)
        if len(status) < 2 or status[1] != b"200" or rest:
            sock.close()
            raise Refused(502, "the upstream proxy refused the connection")
        return sock

    def _relay(self, client: socket.socket, upstream: socket.socket, up: int) -> tuple[int, int]:
        down = 0
        cap = int(self.limits["relay_bytes"])
        end = time.monotonic() + float(self.limits["lifetime_s"])
        idle = float(self.limits["idle_s"])
        peers = {client: upstream, upstream: client}
        client.settimeout(idle)
        upstream.settimeout(idle)
        while up + down < cap:
            left = min(idle, end - time.monotonic())
            if left <= 0:
                break
            ready, _, _ = select.select(list(peers), [], [], left)
            if not ready:
                break
            for sock in ready:
                data = sock.recv(min(65536, cap - up - down))
                if not data:
                    return up, down
                peers[sock].sendall(data)
                if sock is client:
                    up += len(data)
                else:
                    down += len(data)
        return up, down

    def _answer(self, conn: socket.socket, status: int, reason: str) -> None:
        body = f"pybox egress proxy: {reason}\n".encode()
        head = (
            f"HTTP/1.1 {status} {REASONS[status]}\r\nContent-Type: text/plain\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        )
        try:
            conn.settimeout(2.0)
            conn.sendall(head.encode() + body)
        except OSError:
            pass


def main(argv: list[str]) -> None:
    config = json.loads(argv[1])
    # Every address of its container: clients outside the box's subnet are hung up on.
    port = int(config.get("listen_port", 3128))
    listener = socket.create_server(("0.0.0.0", port), backlog=64)  # noqa: S104
    proxy = Proxy(config)
    # pybox asks with SIGUSR1. It is blocked in every thread (each inherits this
    # mask) and taken by the reporter with sigwait: a handler would run only in
    # the main thread, which may sit in accept() until the next client. A handler
    # is still set: PID 1 drops a signal whose action is the default.
    signal.signal(signal.SIGUSR1, proxy.ask)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
    wait = lambda: signal.sigwait({signal.SIGUSR1})  # noqa: E731
    threading.Thread(target=proxy.reporter, args=(wait,), daemon=True).start()
    proxy.log(event="listening", port=listener.getsockname()[1])
    proxy.serve(listener)


if __name__ == "__main__":
    main(sys.argv)
