"""The `egress_packages` case: a box in `packages` mode tries to get past pybox's
egress proxy (names off the list, an IP literal, another port, a plain request)
and around it (a listener on this machine's bridge, its own gateway, a lookup).

It runs when the operator's policy allows `packages` (with no registry named, its
allowlist is one name that can never resolve, which it never asks for);
otherwise it says so and passes (nothing was opened). It never asks the proxy for
an allowed name, so it reaches no registry.
"""

from __future__ import annotations

import dataclasses
import socket
import threading
from typing import TYPE_CHECKING

from pybox._adapters.host_facts import bridge_gateway
from pybox._core.egress import LABEL_EGRESS_FOR, PACKAGES, PROXY_ULIMITS, REFUSED_NAMES_DROPPED
from pybox._core.errors import EgressRefused, EngineCannotApply, PyboxError
from pybox._core.limits import LimitRequest
from pybox._core.request import RunRequest
from pybox._core.runtimes import GVISOR
from pybox._engine import Engine, JSONObject, NetworkEngine
from pybox._features.verify.case_runs import _drain_listener, _verify_json
from pybox._features.verify.verdict import (
    Verdict,
    case_source,
    judge_posture_read_back,
    program_report,
)

if TYPE_CHECKING:
    from pybox._boxes.record import RunOutcome
    from pybox._core.receipt import Receipt
    from pybox._features.verify.harness import Suite
    from pybox._orchestration.session import Session

REFUSED = ("HTTP/1.1 403 Forbidden", "HTTP/1.1 400 Bad Request")
ASKED = 4  # requests the program sends the proxy before its flood
FIRST_ASKED = "pybox-verify.invalid"
# Distinct names past which the proxy must have dropped some (it keeps 256).
FLOOD_PAST_BOUND = 300
PROBE = "pybox-verify-allowed.invalid"  # not the name the case asks for


def run_egress_packages(suite: Suite, verdict: Verdict) -> None:
    session = suite.session
    try:
        egress = session.egress_request(PACKAGES)
    except PyboxError as exc:
        verdict.saw("pybox", f"packages mode is not enabled by the operator's policy: {exc}")
        return
    if not egress.hosts():
        # No registry is configured here: the case still proves the denials, with an
        # allowlist of one name that can never resolve (RFC 2606's .invalid), which
        # the case never asks for. The operator's own settings are put back after.
        verdict.saw("pybox", f"packages mode names no registry here; the case allows {PROBE}")
        settings = session.egress_settings
        session.egress_settings = dataclasses.replace(settings, allow_hosts=(PROBE,))
        try:
            _run_case(suite, verdict)
        finally:
            session.egress_settings = settings
        return
    _run_case(suite, verdict)


def _run_case(suite: Suite, verdict: Verdict) -> None:
    session = suite.session
    gateway = bridge_gateway()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as tcp:
        target = {}
        if gateway is not None:
            tcp.bind((gateway, 0))
            tcp.listen(8)
            target = {"listener": {"host": gateway, "tcp_port": tcp.getsockname()[1]}}
        request = RunRequest(
            code=case_source("egress_packages"),
            code_name="egress_packages.py",
            inputs=_verify_json(target),
            limits=LimitRequest(timeout_s=120),  # its flood ends after 45 s at most
            egress=PACKAGES,
        )
        choice = session.runtime_choice()
        if choice.lane == GVISOR and "--network=none" in choice.engine_runtime_args:
            _judge_refused_without_network(session, request, verdict)
            return
        prepared = session.prepare(request)
        watch = ProxyWatch(suite.engine, prepared.run_id)
        try:
            outcome = session.run(prepared)
        except EngineCannotApply as exc:
            _judge_refused_by_engine(suite, prepared.run_id, exc, verdict)
            return
        finally:
            watch.stop()
        judge_proxy_posture(watch.inspected, verdict)
        verdict.run_ids.append(outcome.receipt.run_id)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
            connections = _drain_listener(tcp, udp)[0]
    judge_egress_packages(outcome, verdict, gateway, connections)
    left = _egress_of(suite.engine, outcome.receipt.run_id) or []
    if verdict.check(not left, f"{len(left)} egress networks or proxies left behind"):
        verdict.saw("engine", "its egress network and proxy were removed: none is listed")
    suite.gone(verdict, outcome.receipt)


class ProxyWatch:
    """The run's egress proxy as the engine shows it while the box runs: read by the
    case itself, apart from pybox's read-back before the proxy started."""

    def __init__(self, engine: Engine, run_id: str) -> None:
        self.engine, self.run_id = engine, run_id
        self.inspected: JSONObject | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        if isinstance(engine, NetworkEngine):
            self._thread.start()

    def _watch(self) -> None:
        while not self._stop.is_set():
            try:
                for found in self.engine.list_containers({LABEL_EGRESS_FOR: self.run_id}):
                    inspected = self.engine.inspect_container(str(found.get("Id")))
                    if inspected and (inspected.get("State") or {}).get("Running"):
                        self.inspected = inspected
                        return
            except PyboxError:
                pass  # the next look
            self._stop.wait(0.2)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)


def judge_proxy_posture(inspected: JSONObject | None, verdict: Verdict) -> None:
    """The proxy holds a box's standard: its ulimits, no /dev/shm (IPC none), no
    tmpfs, a read-only root and no mount: nothing in it is writable."""
    if not verdict.check(inspected is not None, "the egress proxy was never seen running"):
        return
    assert inspected is not None
    host = inspected.get("HostConfig") or {}
    ulimits = {
        str(u.get("Name")): (u.get("Soft"), u.get("Hard"))
        for u in host.get("Ulimits") or []
        if isinstance(u, dict)
    }
    expected = {name: (soft, hard) for name, soft, hard in PROXY_ULIMITS}
    verdict.check(ulimits == expected, f"the egress proxy's ulimits are {ulimits}, not {expected}")
    verdict.check(
        host.get("IpcMode") == "none",
        f"the egress proxy's IPC mode is {host.get('IpcMode')!r}: it has a /dev/shm",
    )
    writable = {
        "Tmpfs": host.get("Tmpfs"),
        "ReadonlyRootfs": host.get("ReadonlyRootfs"),
        "Mounts": inspected.get("Mounts"),
    }
    verdict.check(
        not writable["Tmpfs"] and writable["ReadonlyRootfs"] is True and not writable["Mounts"],
        f"something in the egress proxy is writable: {writable}",
    )
    verdict.saw(
        "engine",
        "the egress proxy while the box ran: ulimits "
        + ", ".join(f"{name} {soft}" for name, (soft, _) in sorted(ulimits.items()))
        + f"; IPC mode {host.get('IpcMode')!r} ('none': no /dev/shm); read-only root "
        f"{writable['ReadonlyRootfs']}, tmpfs {writable['Tmpfs'] or 'none'}, "
        f"mounts {writable['Mounts'] or 'none'}",
    )


def _egress_of(engine: Engine, run_id: str) -> list[JSONObject] | None:
    """The egress networks and proxies the engine lists for the run (None: the
    engine makes no networks)."""
    if not isinstance(engine, NetworkEngine):
        return None
    labels = {LABEL_EGRESS_FOR: run_id}
    return engine.list_networks(labels) + engine.list_containers(labels)


def _judge_refused_by_engine(
    suite: Suite, run_id: str, exc: EngineCannotApply, verdict: Verdict
) -> None:
    """An engine that cannot make a `packages` network as pybox needs it (Podman
    gives the host an address there) has it refused before anything is made: no
    box exists to get out, so the case is contained if nothing of it is listed."""
    verdict.saw("pybox", f"packages mode refused on this engine before any box: {exc}")
    left = _egress_of(suite.engine, run_id)
    if left is None:
        verdict.saw("pybox", "this engine makes no networks: nothing of the run to list")
        return
    if verdict.check(not left, f"{len(left)} egress networks or proxies made despite the refusal"):
        verdict.saw("engine", "no network, proxy or box of the refused run is listed")


def _judge_refused_without_network(session: Session, request: RunRequest, verdict: Verdict) -> None:
    """runsc with --network=none gives a box no network stack, so no egress mode can
    reach pybox's proxy: the request must be refused before anything is made, never
    run without the network its receipt would name. (The box's lack of any network
    is the `network` case's, judged there in this lane too.)"""
    try:
        session.prepare(request)
    except EgressRefused as exc:
        verdict.saw("pybox", f"packages mode refused before any box, network or proxy: {exc}")
        return
    verdict.check(False, "packages mode was accepted in a gVisor lane without a network stack")


def judge_flood(receipt: Receipt, flood: object, verdict: Verdict) -> None:
    """After its 4 asks the box floods the proxy with refused requests to distinct
    long names (once one log line each, more than the proxy's 16 MiB log held): the
    receipt must count every refusal the box had answered, still name the first
    name it asked, and say under `unknown` that names past the proxy's bound were
    not kept. Never fewer, never silence."""
    seen = receipt.observed_by_pybox.egress
    flood = flood if isinstance(flood, dict) else {}
    answered = flood.get("answered")
    answered = answered if isinstance(answered, int) and answered >= 0 else 0
    expected = ASKED + answered
    verdict.check(
        seen.refused >= expected,
        f"the receipt counts {seen.refused} refusals; the box had {expected} answered",
    )
    named = FIRST_ASKED in seen.refused_names
    verdict.check(
        named,
        f"the first name the box asked, {FIRST_ASKED}, is not among the receipt's refused "
        f"names: {[name[:24] + '...' for name in seen.refused_names[:3]]}",
    )
    dropped = [u for u in receipt.unknown if u.fact == REFUSED_NAMES_DROPPED]
    if answered > FLOOD_PAST_BOUND:
        verdict.check(
            bool(dropped),
            f"{answered} distinct names were refused and the receipt says nothing was dropped",
        )
    verdict.saw(
        "pybox",
        f"the proxy's tally: {len(seen.hosts)} hosts reached; {seen.refused} requests "
        f"refused, {FIRST_ASKED} {'named' if named else 'NOT named'}; "
        + (dropped[0].reason if dropped else "no name dropped"),
    )
    verdict.saw(
        "program",
        f"flooded the proxy with {flood.get('sent')} refused requests to distinct names in "
        f"{flood.get('seconds')} s; {answered} answered",
    )


def judge_egress_packages(
    outcome: RunOutcome, verdict: Verdict, gateway: str | None, connections: int
) -> None:
    receipt = outcome.receipt
    report = program_report(outcome.stdout, outcome.stderr, verdict)
    judge_posture_read_back(receipt, verdict)
    seen = receipt.observed_by_pybox.egress
    verdict.check(receipt.configured.network == PACKAGES, "the box was not in packages mode")
    verdict.check(seen.hosts == (), f"the proxy relayed connections: {seen.hosts}")
    judge_flood(receipt, (report or {}).get("flood"), verdict)
    if not report:
        return
    asked = report.get("through_proxy") or {}
    for what, answer in asked.items():
        verdict.check(answer in REFUSED, f"the proxy answered {what!r} with {answer!r}")
    verdict.saw("program", "; ".join(f"{what}: {answer}" for what, answer in asked.items()))
    direct = report.get("direct") or {}
    verdict.check(
        "connected" not in direct.values(),
        f"a direct connection: {direct}; its ends (box, peer): {report.get('connected_ends')}; "
        f"the box's addresses {report.get('own_addresses')}; "
        f"its neighbours {report.get('neighbours')}",
    )
    verdict.check(not str(report.get("dns")).startswith("[("), f"a name resolved: {report}")
    verdict.saw(
        "program",
        f"interfaces {report.get('interfaces')}, addresses {report.get('own_addresses')}; "
        "direct TCP "
        + ", ".join(f"{a}: {r}" for a, r in direct.items())
        + f"; lookup: {report.get('dns')}",
    )
    if gateway is not None and verdict.check(
        connections == 0, f"the listener on {gateway} got {connections} connections"
    ):
        verdict.saw("host", f"the TCP listener on the bridge {gateway} received nothing")
