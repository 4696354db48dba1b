"""`packages` and `open` egress on the real engine.

Connections go only to the real package registries (allowed, through the
proxy) and to listeners this test starts on this machine (to prove denial).
The registry host names are pip's own defaults, read from the pip installed
beside the tests, never written here; a name the proxy must refuse is never
looked up. pip itself is the ensurepip wheel of the test's Python, handed to
the box as an input file (the stdlib image has no pip).
"""

from __future__ import annotations

import ensurepip
import ipaddress
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pybox._adapters.state import StateStore
from pybox._core.egress import (
    INHIBIT_IPV4,
    LABEL_EGRESS,
    LABEL_EGRESS_FOR,
    EgressSettings,
    network_problems,
)
from pybox._core.errors import EgressRefused, PostureMismatch
from pybox._core.limits import MIB, LimitRequest, Policy
from pybox._core.request import InputFile, RunRequest
from pybox._engine import Engine, NetworkEngine
from pybox._engine.specgen import PodmanUnsupported
from pybox._orchestration.session import Session

pip_index = pytest.importorskip("pip._internal.models.index")
DENIED = "denied.invalid"
WHEELS = sorted((Path(ensurepip.__file__).parent / "_bundled").glob("pip-*.whl"))


def registry_hosts() -> tuple[str, ...]:
    return (pip_index.PyPI.netloc, pip_index.PyPI.file_storage_domain)


def non_global(hosts: tuple[str, ...]) -> bool:
    """Whether this machine's resolver answers a non-global address for a registry
    (here: every name resolves to one documentation-range address, 203.0.113.80,
    behind which the machine's intercepting proxy sits)."""
    for host in hosts:
        for info in socket.getaddrinfo(host, 443, type=socket.SOCK_STREAM):
            if not ipaddress.ip_address(info[4][0]).is_global:
                return True
    return False


@pytest.fixture(scope="module")
def egress_session(engine: Engine, state_dir: Path) -> Session:
    if not WHEELS:
        pytest.skip("no ensurepip pip wheel beside the test's Python")
    hosts = registry_hosts()
    settings = EgressSettings(
        modes=("none", "packages", "open"),
        allow_hosts=hosts,
        private_addresses=non_global(hosts),
    )
    return Session(engine, StateStore(state_dir), Policy(), egress_settings=settings)


class Listener:
    """A TCP listener on this machine (the packages tests: the docker bridge gateway,
    which nothing may reach)."""

    def __init__(self, address: str, port: int = 0, freebind: bool = False) -> None:
        self.sock = socket.socket()
        if freebind:
            self.sock.setsockopt(socket.IPPROTO_IP, getattr(socket, "IP_FREEBIND", 15), 1)
        self.sock.bind((address, port))
        self.sock.listen()
        self.address, self.port = address, self.sock.getsockname()[1]
        self.accepted: list[tuple[str, int]] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, peer = self.sock.accept()
            except OSError:
                return
            self.accepted.append(peer)
            conn.close()


@pytest.fixture
def listener(engine: Engine) -> Iterator[Listener]:
    assert isinstance(engine, NetworkEngine)
    bridge = engine.inspect_network("bridge") or {}
    config = ((bridge.get("IPAM") or {}).get("Config") or [{}])[0]
    gateway = str(config.get("Gateway") or "")
    if not gateway and config.get("Subnet"):  # the default bridge: its first address
        gateway = str(next(ipaddress.ip_network(config["Subnet"]).hosts()))
    try:
        server = Listener(gateway)
    except (OSError, ValueError):
        pytest.skip(f"no listener on the engine's bridge gateway {gateway!r} on this machine")
    yield server
    server.sock.close()


PROBE = """
import json, os, socket, subprocess, sys, threading
out = {}
wheel = os.path.join(os.environ["PYBOX_INPUT_DIR"], WHEEL)
pip = subprocess.run(
    [sys.executable, wheel + "/pip", "download", "six==1.16.0", "--no-deps",
     "--no-cache-dir", "--disable-pip-version-check", "-d", "/tmp/dl"],
    capture_output=True, text=True, timeout=120,
)
out["pip"] = pip.returncode
out["pip_tail"] = (pip.stdout + pip.stderr)[-600:]
out["downloaded"] = sorted(os.listdir("/tmp/dl")) if os.path.isdir("/tmp/dl") else []
proxy_host, proxy_port = os.environ["HTTPS_PROXY"].split("//")[1].rsplit(":", 1)
with socket.create_connection((proxy_host, int(proxy_port)), 5) as s:
    s.sendall(b"CONNECT " + DENIED.encode() + b":443 HTTP/1.1\\r\\n\\r\\n")
    out["denied"] = s.recv(100).decode("ascii", "replace").split("\\r\\n")[0]
gateway = None
for line in open("/proc/net/route").read().splitlines()[1:]:
    fields = line.split()
    if fields[1] == "00000000":
        gateway = socket.inet_ntoa(int(fields[2], 16).to_bytes(4, "little"))
out["direct"] = {}
for host in (LISTENER, gateway):
    try:
        socket.create_connection((host, PORT), 3).close()
        out["direct"][host] = "connected"
    except OSError as exc:
        out["direct"][host] = type(exc).__name__
answer = []
def look():
    try:
        answer.append(socket.getaddrinfo(ALLOWED, 443))
    except OSError as exc:
        answer.append(type(exc).__name__)
t = threading.Thread(target=look, daemon=True); t.start(); t.join(3)
out["lookup"] = "no answer in 3 s" if not answer else str(answer[0])[:100]
print(json.dumps(out))
"""


def probe(listener: Listener) -> bytes:
    return (
        f"WHEEL = {WHEELS[-1].name!r}; DENIED = {DENIED!r}; LISTENER = {listener.address!r}; "
        f"PORT = {listener.port}; ALLOWED = {registry_hosts()[0]!r}\n" + PROBE
    ).encode()


def leftovers(engine: Engine, box_id: str) -> list[str]:
    assert isinstance(engine, NetworkEngine)
    labels = {LABEL_EGRESS_FOR: box_id}
    found = [str(c.get("Names")) for c in engine.list_containers(labels)]
    found += [str(n.get("Name")) for n in engine.list_networks(labels)]
    return found


def check_contained(report: dict[str, object], listener: Listener) -> None:
    assert report["pip"] == 0, report["pip_tail"]
    assert report["downloaded"] == ["six-1.16.0-py2.py3-none-any.whl"]
    assert report["denied"] == "HTTP/1.1 403 Forbidden"
    direct = report["direct"]
    assert isinstance(direct, dict) and "connected" not in direct.values(), direct
    assert listener.accepted == []
    assert not str(report["lookup"]).startswith("[("), report["lookup"]


def refused_on_podman(engine_name: str, session: Session, engine: Engine, make: Any) -> bool:
    """On Podman a `packages` box is refused before anything is made
    (docs/engines.md, "Egress on Podman"): that refusal is what runs there."""
    if engine_name != "podman":
        return False
    assert isinstance(engine, NetworkEngine)
    with pytest.raises(PodmanUnsupported, match=INHIBIT_IPV4):
        make()
    owned = [n for n in engine.list_networks({LABEL_EGRESS: None}) if _owned(n, session)]
    assert owned == []
    assert [c for c in engine.list_containers({LABEL_EGRESS: None}) if _owned(c, session)] == []
    return True


def _owned(item: dict[str, Any], session: Session) -> bool:
    return bool((item.get("Labels") or {}).get("io.pybox.owner") == session.owner)


def test_packages_run_reaches_the_registries_and_nothing_else(
    egress_session: Session, engine: Engine, engine_name: str, request: pytest.FixtureRequest
) -> None:
    limits = LimitRequest(timeout_s=150, memory_bytes=512 * MIB)
    refused = RunRequest(code=b"", egress="packages", limits=limits)
    if refused_on_podman(engine_name, egress_session, engine, lambda: egress_session.run(refused)):
        return
    listener: Listener = request.getfixturevalue("listener")
    run = RunRequest(
        code=probe(listener),
        inputs=(InputFile(WHEELS[-1].name, WHEELS[-1].read_bytes()),),
        egress="packages",
        limits=limits,
    )
    outcome = egress_session.run(run)
    receipt = outcome.receipt.to_dict()
    assert receipt["status"] == "succeeded", outcome.stderr[-2000:]
    check_contained(json.loads(outcome.stdout), listener)
    assert receipt["configured"]["network"] == "packages"
    assert receipt["observed_by_engine"]["posture_verified"] is True
    seen = receipt["observed_by_pybox"]["egress"]
    assert {h["host"] for h in seen["hosts"]} == set(registry_hosts())  # exactly these
    assert all(h["port"] == 443 and h["down_bytes"] > 1000 for h in seen["hosts"])
    assert (seen["refused"], seen["refused_names"]) == (1, [DENIED])
    assert "pybox-egress-ca.pem" in [i["name"] for i in receipt["configured"]["inputs"]]
    assert leftovers(engine, outcome.receipt.run_id) == []


def test_packages_sandbox_keeps_its_network_and_each_receipt_its_hosts(
    egress_session: Session, engine: Engine, engine_name: str, request: pytest.FixtureRequest
) -> None:
    sandboxes = egress_session.sandboxes()
    limits = LimitRequest(timeout_s=150, memory_bytes=512 * MIB)
    create = lambda: sandboxes.create(egress="packages", limits=limits)  # noqa: E731
    if refused_on_podman(engine_name, egress_session, engine, create):
        return
    listener: Listener = request.getfixturevalue("listener")
    info = sandboxes.create(egress="packages", limits=limits)
    try:
        sandboxes.write_file(info.sandbox_id, "probe.py", probe(listener))
        sandboxes.write_file(info.sandbox_id, WHEELS[-1].name, WHEELS[-1].read_bytes())
        argv = ["python3", "-c", "import os, runpy; os.environ['PYBOX_INPUT_DIR'] = "
                "'/pybox/work'; runpy.run_path('probe.py')"]  # fmt: skip
        for _ in range(2):
            outcome = sandboxes.exec(info.sandbox_id, argv, timeout_s=150)
            assert outcome.receipt.exit_code == 0, outcome.stderr[-2000:]
            check_contained(json.loads(outcome.stdout), listener)
            seen = outcome.receipt.to_dict()["observed_by_pybox"]["egress"]
            assert {h["host"] for h in seen["hosts"]} == set(registry_hosts())
            assert seen["refused"] == 1
    finally:
        sandboxes.destroy(info.sandbox_id)
    assert leftovers(engine, info.sandbox_id) == []


class OwnGateway:
    """A listener on the `open` box's own network's gateway (the host's address on
    that bridge, made by pybox), started once the network exists and before the box:
    bound with IP_FREEBIND, since Podman makes the bridge only when the box starts."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.port = _free_port()
        self.listener: Listener | None = None
        self.subnet = ""

        def start(inspected: dict[str, Any], mode: str, labels: dict[str, str]) -> list[str]:
            config = ((inspected.get("IPAM") or {}).get("Config") or [{}])[0]
            self.subnet = str(config.get("Subnet") or "")
            self.listener = Listener(str(config.get("Gateway") or ""), self.port, freebind=True)
            return network_problems(inspected, mode, labels)

        monkeypatch.setattr("pybox._boxes.egress.network_problems", start)

    def close(self) -> None:
        if self.listener is not None:
            self.listener.sock.close()


def _free_port() -> int:
    """A port nothing on this machine listens on (a wildcard listener would hold it)."""
    with socket.create_server(("127.0.0.1", 0)) as sock:
        return int(sock.getsockname()[1])


OPEN_PROBE = """
import json, socket
gateway = None
for line in open("/proc/net/route").read().splitlines()[1:]:
    fields = line.split()
    if fields[1] == "00000000":
        gateway = socket.inet_ntoa(int(fields[2], 16).to_bytes(4, "little"))
with socket.create_connection((gateway, PORT), 5) as s:
    print(json.dumps({"gateway": gateway, "from": s.getsockname()[0]}))
"""


def test_open_is_general_egress_and_says_so_first(
    egress_session: Session, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The box's default route is its network's gateway, and it reaches the host's
    listener there; the same proof on Docker and Podman."""
    own = OwnGateway(monkeypatch)
    try:
        code = f"PORT = {own.port}\n{OPEN_PROBE}"
        outcome = egress_session.run(RunRequest(code=code.encode(), egress="open"))
    finally:
        own.close()
    assert outcome.receipt.status.value == "succeeded", (outcome.stderr, outcome.receipt)
    assert outcome.receipt.summary_lines()[0].startswith(
        "pybox: [network open: general egress] succeeded"
    )
    assert own.listener is not None
    seen = json.loads(outcome.stdout)
    assert seen["gateway"] == own.listener.address
    assert ipaddress.ip_address(seen["from"]) in ipaddress.ip_network(own.subnet)
    assert [peer[0] for peer in own.listener.accepted] == [seen["from"]]
    assert outcome.receipt.to_dict()["observed_by_engine"]["posture_verified"] is True
    assert leftovers(engine, outcome.receipt.run_id) == []


def test_a_mode_the_operator_does_not_allow_is_refused(session: Session) -> None:
    with pytest.raises(EgressRefused, match="'open' is not allowed"):
        session.run(RunRequest(code=b"", egress="open"))


def test_a_weakened_network_stops_the_run_before_any_box(
    egress_session: Session, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pybox._core.egress import network_body

    def weakened(mode: str, labels: dict[str, str]) -> dict[str, object]:
        return {**network_body(mode, labels), "Internal": False, "Options": {}}

    monkeypatch.setattr("pybox._boxes.egress.network_body", weakened)
    with pytest.raises(PostureMismatch, match="Internal is False"):
        egress_session.run(RunRequest(code=b"print(1)", egress="packages"))
    assert isinstance(engine, NetworkEngine)
    assert engine.list_networks({LABEL_EGRESS: None}) == [] or all(
        (n.get("Labels") or {}).get("io.pybox.owner") != egress_session.owner
        for n in engine.list_networks({LABEL_EGRESS: None})
    )


# -- a flood of refusals does not hide the hosts reached (issue 29, finding 2) -------------

ALLOWED_HERE = "allowed.invalid"  # allowlisted, never looked up: the upstream "resolves"
RELAYED_BYTES = 5000
FLOOD = """
import json, os, socket, threading, time
host, port = os.environ["HTTPS_PROXY"].split("//")[1].rsplit(":", 1)
port = int(port)
out = {}
if REAL:
    with socket.create_connection((host, port), 5) as s:
        s.sendall(b"CONNECT " + ALLOWED.encode() + b":443 HTTP/1.1\\r\\n\\r\\n")
        s.settimeout(10)
        got = b""
        while chunk := s.recv(65536):
            got += chunk
    out["allowed"] = got.split(b"\\r\\n")[0].decode("ascii", "replace")
    out["relayed"] = len(got.split(b"\\r\\n\\r\\n", 1)[-1])
# Names near the longest the proxy takes: each refusal was one long line of its log.
pad = "r" * 236
counts = []
def flood(first):
    n = 0
    for i in range(first, COUNT, THREADS):
        try:
            with socket.create_connection((host, port), 5) as s:
                s.sendall(b"CONNECT n%05d.%s.invalid:443 HTTP/1.1\\r\\n\\r\\n" % (i, pad.encode()))
                n += s.recv(12) == b"HTTP/1.1 403"
        except OSError:
            pass
    counts.append(n)
started = time.monotonic()
threads = [threading.Thread(target=flood, args=(k,)) for k in range(THREADS)]
for t in threads: t.start()
for t in threads: t.join()
out["refused"] = sum(counts)
out["flood_s"] = round(time.monotonic() - started, 1)
print(json.dumps(out))
"""


def flood_code(count: int, real: bool = True, threads: int = 8) -> bytes:
    head = f"ALLOWED = {ALLOWED_HERE!r}; COUNT = {count}; THREADS = {threads}; REAL = {real}\n"
    return (head + FLOOD).encode()


class Upstream:
    """An upstream CONNECT proxy on the engine's bridge gateway (this machine): it
    answers 200 and sends RELAYED_BYTES, so the proxy relays a real connection
    without any traffic leaving the machine."""

    def __init__(self, address: str) -> None:
        self.sock = socket.create_server((address, 0))
        self.address, self.port = address, self.sock.getsockname()[1]
        self.heads: list[bytes] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(10)
            head = b""
            while b"\r\n\r\n" not in head and len(head) < 4096:
                head += conn.recv(4096) or b"\r\n\r\n"
            self.heads.append(head)
            conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            time.sleep(0.3)  # the proxy reads the head alone: no bytes behind it
            conn.sendall(b"x" * RELAYED_BYTES)


@pytest.fixture
def upstream_session(
    engine: Engine, engine_name: str, state_dir: Path, tmp_path: Path
) -> Iterator[tuple[Session, Upstream]]:
    if engine_name == "podman":
        pytest.skip("egress packages is refused on Podman (its refusal: the tests above)")
    assert isinstance(engine, NetworkEngine)
    bridge = engine.inspect_network("bridge") or {}
    config = ((bridge.get("IPAM") or {}).get("Config") or [{}])[0]
    gateway = str(config.get("Gateway") or "")
    if not gateway and config.get("Subnet"):  # the default bridge: its first address
        gateway = str(next(ipaddress.ip_network(config["Subnet"]).hosts()))
    try:
        upstream = Upstream(gateway)
    except (OSError, ValueError):
        pytest.skip(f"no listener on the engine's bridge gateway {gateway!r} on this machine")
    settings = EgressSettings(
        modes=("none", "packages"),
        allow_hosts=(ALLOWED_HERE,),
        machine_config=False,
        ca_bundle="none",
    )
    environ = {"HOME": str(tmp_path), "HTTPS_PROXY": f"http://{gateway}:{upstream.port}"}
    session = Session(
        engine, StateStore(state_dir), Policy(), egress_settings=settings, environ=environ
    )
    yield session, upstream
    upstream.sock.close()


def hosts_named(seen: dict[str, Any]) -> list[tuple[str, int, int]]:
    return [(h["host"], h["connections"], h["down_bytes"]) for h in seen["hosts"]]


def test_a_flood_of_refusals_does_not_hide_the_host_reached(
    upstream_session: tuple[Session, Upstream], engine: Engine
) -> None:
    """One real connection, then more refused ones than the proxy's 16 MiB log held
    (one line each before): the receipt still names the host, and says that the
    refused names past the proxy's bound were not kept."""
    session, upstream = upstream_session
    count = 40_000
    limits = LimitRequest(timeout_s=240)
    outcome = session.run(RunRequest(code=flood_code(count), egress="packages", limits=limits))
    report = json.loads(outcome.stdout)
    assert report["allowed"].startswith("HTTP/1.1 200 "), report
    assert report["relayed"] == RELAYED_BYTES, report
    assert upstream.heads[0].startswith(f"CONNECT {ALLOWED_HERE}:443 ".encode())
    receipt = outcome.receipt.to_dict()
    seen = receipt["observed_by_pybox"]["egress"]
    assert hosts_named(seen) == [(ALLOWED_HERE, 1, RELAYED_BYTES)], seen
    assert report["refused"] == count, report  # every one answered 403
    assert seen["refused"] == count
    names = seen["refused_names"]  # the first kept, as the box's threads sent them
    assert len(names) == 20 and all(n.endswith(f".{'r' * 236}.invalid") for n in names)
    (dropped,) = [u for u in receipt["unknown"] if "refused" in u["fact"]]
    assert f"{count - 256} of the {count} refused requests" in dropped["reason"]
    assert leftovers(engine, outcome.receipt.run_id) == []


def test_a_sandbox_receipt_counts_its_own_run_after_a_flood(
    upstream_session: tuple[Session, Upstream], engine: Engine
) -> None:
    """Each run's receipt is that run's: a flood and a real connection in the first,
    one refusal in the second (the proxy's counts before a run are subtracted)."""
    session, _ = upstream_session
    sandboxes = session.sandboxes()
    info = sandboxes.create(egress="packages", limits=LimitRequest(timeout_s=240))
    try:
        sandboxes.write_file(info.sandbox_id, "flood.py", flood_code(1000))
        sandboxes.write_file(info.sandbox_id, "one.py", flood_code(1, real=False, threads=1))
        first = sandboxes.exec(info.sandbox_id, ["python3", "flood.py"], timeout_s=240)
        assert first.receipt.exit_code == 0, first.stderr[-2000:]
        receipt = first.receipt.to_dict()
        seen = receipt["observed_by_pybox"]["egress"]
        assert hosts_named(seen) == [(ALLOWED_HERE, 1, RELAYED_BYTES)], seen
        assert seen["refused"] == 1000
        assert [u for u in receipt["unknown"] if "refused" in u["fact"]]
        second = sandboxes.exec(info.sandbox_id, ["python3", "one.py"], timeout_s=60)
        assert second.receipt.exit_code == 0, second.stderr[-2000:]
        receipt = second.receipt.to_dict()
        seen = receipt["observed_by_pybox"]["egress"]
        assert (seen["hosts"], seen["refused"]) == ([], 1), seen
        assert seen["refused_names"] == [f"n00000.{'r' * 236}.invalid"]
        # The bound was hit in the first run, not this one: nothing unknown here.
        assert not [u for u in receipt["unknown"] if "egress" in u["fact"]], receipt["unknown"]
    finally:
        sandboxes.destroy(info.sandbox_id)
    assert leftovers(engine, info.sandbox_id) == []


def test_a_proxy_without_its_ulimits_or_with_dev_shm_is_refused_before_start(
    upstream_session: tuple[Session, Upstream], engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The proxy container's posture is read back off the real container: one made
    without its ulimits and with a /dev/shm (IPC private) stops the run."""
    from pybox._core.egress import PROXY_HOSTNAME
    from pybox._core.seal import BoxSpec
    from pybox._engine.docker_seal import DockerSeal

    create_request = DockerSeal.create_request

    def weakened(self: DockerSeal, spec: BoxSpec) -> dict[str, Any]:
        body = create_request(self, spec)
        if spec.hostname == PROXY_HOSTNAME:
            body["HostConfig"].pop("Ulimits", None)
            body["HostConfig"]["IpcMode"] = "private"
        return body

    session, _ = upstream_session
    monkeypatch.setattr(DockerSeal, "create_request", weakened)
    with pytest.raises(PostureMismatch, match="egress proxy was refused before start") as caught:
        session.run(RunRequest(code=b"print(1)", egress="packages"))
    assert {"HostConfig.Ulimits", "HostConfig.IpcMode"} <= set(caught.value.fields)
