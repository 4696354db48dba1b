"""A box's egress network and (in `packages` mode) its proxy container.

Made before the box (the box's posture names the network and its environment
the proxy's address), read back before anything starts (the network's settings
and the proxy container's whole posture), and removed, confirmed, after the box.

`packages`: an internal bridge network of the box's own on which the host has
no address (`inhibit_ipv4`), so the box reaches no host service and no route
out; its only other member is the proxy container, which is also on the
engine's bridge and so reaches out. `open`: a bridge network of the box's own.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from pybox._boxes.cleanup import remove_and_confirm
from pybox._boxes.spec import BoxContext, new_box_uid
from pybox._core.egress import (
    CA_BUNDLE_NAME,
    LABEL_EGRESS,
    LABEL_EGRESS_CREATED,
    LABEL_EGRESS_FOR,
    NONE,
    PACKAGES,
    PROXY_PORT,
    EgressObserved,
    EgressPlan,
    EgressSettings,
    ProxySpec,
    ProxyTally,
    network_body,
    network_problems,
    newest_tally,
    observed_between,
    proxy_box,
)
from pybox._core.errors import EngineError, InvalidRequest, PostureMismatch, SandboxError
from pybox._core.images import ImageRecord
from pybox._core.posture import LABEL_EXPIRES_AT, LABEL_OWNER, box_user
from pybox._core.receipt import Unknown
from pybox._core.request import InputFile, RunRequest
from pybox._core.seal import BoxFacts, check
from pybox._engine import Engine, NetworkEngine
from pybox._inbox import inbox_program

if TYPE_CHECKING:  # configparser with it: only a `packages` box reads pip's and npm's files
    from pybox._adapters.egress_config import MachineRegistries

LISTEN_WAIT_S = 15.0
DRAIN_WAIT_S = 3.0
# How long the proxy has to answer an ask for its tally (it answers in milliseconds).
ANSWER_WAIT_S = 5.0
HOSTS_FACT = "the hosts reached through the egress proxy"
CA_MAX_BYTES = 4 * 1024 * 1024
BRIDGE = "bridge"
SWEEP_GRACE_S = 120.0


@dataclass(frozen=True)
class EgressRequest:
    """What a box's egress is made from: its mode, the operator's settings and what
    this machine's pip and npm configuration named (read by the session)."""

    mode: str = NONE
    settings: EgressSettings = field(default_factory=EgressSettings)
    machine: MachineRegistries | None = None

    def hosts(self) -> tuple[str, ...]:
        found = list(self.settings.allow_hosts)
        if self.machine is not None and self.settings.machine_config:
            found += [h for h in self.machine.hosts if h not in found]
        return tuple(found)

    def ca_bundle_path(self) -> str | None:
        choice = self.settings.ca_bundle
        if choice == "none":
            return None
        if choice != "auto":
            return choice
        return self.machine.ca_bundle if self.machine is not None else None


def network_engine(context: BoxContext) -> NetworkEngine:
    engine = context.engine
    if not isinstance(engine, NetworkEngine):
        raise InvalidRequest("This engine client cannot make egress networks; use egress none.")
    return engine


class EgressNetwork:
    """One box's network (and proxy): `open()` before the box, `close()` after."""

    def __init__(
        self,
        context: BoxContext,
        request: EgressRequest,
        *,
        box_id: str,
        image_id: str,
        python_path: str,
        expires_at: int,
        sandbox_store: str = "",
    ) -> None:
        self.context = context
        self.request = request
        self.mode = request.mode
        self.name = f"pybox-egress-{box_id}"
        self.labels = {
            LABEL_EGRESS: self.mode,
            LABEL_EGRESS_FOR: box_id,
            LABEL_EGRESS_CREATED: str(int(time.time())),
            LABEL_OWNER: context.owner,
            LABEL_EXPIRES_AT: str(expires_at),
        }
        self.opened_at = time.time()
        self.image_id = image_id
        self.python_path = python_path
        self.proxy_id: str | None = None
        self.network_id: str | None = None
        self.ca_bundle: bytes | None = None
        self.plan = EgressPlan()

    def open(self) -> EgressPlan:
        engine = network_engine(self.context)
        hosts = self.request.hosts()
        if self.mode == PACKAGES and not hosts:
            raise InvalidRequest(
                "egress 'packages' has no registry to allow: this machine's pip and npm "
                "configuration names no https registry and the operator's [egress] "
                "allow_hosts is empty. The operator names the registries there."
            )
        self.network_id = engine.create_network(self.name, network_body(self.mode, self.labels))
        inspected = engine.inspect_network(self.network_id) or {}
        problems = network_problems(inspected, self.mode, self.labels)
        if problems:
            raise PostureMismatch(
                f"The egress network {self.name} was refused before use: " + "; ".join(problems),
                fields=tuple(problems),
            )
        if self.mode != PACKAGES:
            self.plan = EgressPlan(self.mode, self.name)
            return self.plan
        subnet = ((inspected.get("IPAM") or {}).get("Config") or [{}])[0].get("Subnet", "")
        address = self._start_proxy(engine, hosts, str(subnet))
        self.ca_bundle = self._read_ca()
        self.plan = EgressPlan(PACKAGES, self.name, address, hosts, self.ca_bundle is not None)
        return self.plan

    def record(self) -> dict[str, object]:
        """What a later process needs to ask this box's proxy and remove it all."""
        plan = self.plan
        return {
            "mode": plan.mode,
            "network": plan.network,
            "proxy_address": plan.proxy_address,
            "hosts": list(plan.hosts),
            "ca_bundle": self.request.ca_bundle_path() if plan.ca_bundle else None,
            "proxy_id": self.proxy_id,
            "network_id": self.network_id,
        }

    @classmethod
    def from_record(
        cls, context: BoxContext, box_id: str, record: Mapping[str, Any]
    ) -> EgressNetwork:
        net = cls(
            context,
            EgressRequest(str(record["mode"])),
            box_id=box_id,
            image_id="",
            python_path="",
            expires_at=0,
        )
        net.proxy_id = record.get("proxy_id") or None
        net.network_id = record.get("network_id") or None
        net.plan = plan_of(record)
        return net

    def _start_proxy(self, engine: NetworkEngine, hosts: tuple[str, ...], subnet: str) -> str:
        settings, machine = self.request.settings, self.request.machine
        config = {
            "allow": list(hosts),
            "ports": [443],
            "listen_port": PROXY_PORT,
            "private_addresses": settings.private_addresses,
            "client_subnet": subnet or None,
            "upstream": list(machine.upstream) if machine and machine.upstream else None,
        }
        source = inbox_program("egress_proxy").decode("utf-8")
        uid = new_box_uid()
        spec = ProxySpec(
            image_id=self.image_id,
            entrypoint=(self.python_path, "-I", "-S", "-c", source, json.dumps(config)),
            user=box_user(uid),
            labels=tuple(self.labels.items()),
            network=self.name,
            confinement=self.context.confinement,
            runtime="runc",  # pybox's own proxy always runs under runc
        )
        sealed = proxy_box(spec)
        box = self.context.engine
        self.proxy_id = box.create_box(f"{self.name}-proxy", sealed)
        posture = check(sealed, box.box_facts(self.proxy_id) or BoxFacts(box.seal, {}))
        if not posture.ok:
            details = "; ".join(m.describe() for m in posture.mismatches[:5])
            raise PostureMismatch(
                f"The egress proxy was refused before start: {details}",
                fields=tuple(m.field for m in posture.mismatches),
            )
        engine.connect_network(BRIDGE, self.proxy_id)
        box.start_container(self.proxy_id)
        return self._wait_listening(engine)

    def _wait_listening(self, engine: NetworkEngine) -> str:
        assert self.proxy_id is not None
        deadline = time.monotonic() + LISTEN_WAIT_S
        while time.monotonic() < deadline:
            lines = engine.container_stdout(self.proxy_id).decode("utf-8", "replace")
            if '"event": "listening"' in lines:
                break
            state = (self.context.engine.inspect_container(self.proxy_id) or {}).get("State") or {}
            if not state.get("Running"):
                raise SandboxError(f"The egress proxy ended before it listened: {lines[-500:]}")
            time.sleep(0.05)
        else:
            raise SandboxError(f"The egress proxy did not listen within {LISTEN_WAIT_S:g} s.")
        inspected = self.context.engine.inspect_container(self.proxy_id) or {}
        networks: Mapping[str, object] = (inspected.get("NetworkSettings") or {}).get(
            "Networks"
        ) or {}
        if sorted(networks) != sorted([self.name, BRIDGE]):
            raise PostureMismatch(
                f"The egress proxy is on {sorted(networks)}, not [{self.name!r}, 'bridge'].",
                fields=("NetworkSettings.Networks",),
            )
        endpoint = networks[self.name]
        address = endpoint.get("IPAddress") if isinstance(endpoint, Mapping) else None
        if not isinstance(address, str) or not address:
            raise SandboxError(f"The egress proxy has no address on {self.name}.")
        return address

    def _read_ca(self) -> bytes | None:
        path = self.request.ca_bundle_path()
        if path is None:
            return None
        try:
            with open(path, "rb") as handle:
                data = handle.read(CA_MAX_BYTES + 1)
        except OSError as exc:
            raise InvalidRequest(
                f"The CA bundle {path} (egress ca_bundle) cannot be read: {exc.strerror}."
            ) from None
        if len(data) > CA_MAX_BYTES:
            raise InvalidRequest(f"The CA bundle {path} is over {CA_MAX_BYTES} bytes.")
        return data

    def tally(self) -> ProxyTally:
        """The proxy's counts now: asked for (SIGUSR1, through the engine), then its
        answer read off its stdout. A proxy that is gone or silent is an error."""
        assert self.proxy_id is not None
        engine = network_engine(self.context)
        # Its answer carries its clock (the host's: one kernel), to the millisecond.
        asked_at = int(time.time() * 1000) / 1000 - 0.001
        if not self.context.engine.kill_container(self.proxy_id, "USR1"):
            raise SandboxError("the egress proxy is no longer running, so it could not answer")
        deadline = time.monotonic() + ANSWER_WAIT_S
        while True:
            raw = engine.container_stdout(self.proxy_id, int(asked_at) - 1)
            found = newest_tally(raw.decode("utf-8", "replace").splitlines(), asked_at)
            if found is not None:
                return found
            if time.monotonic() > deadline:
                raise SandboxError(f"the egress proxy did not answer within {ANSWER_WAIT_S:g} s")
            time.sleep(0.02)

    def tally_or_unknown(self, unknown: list[Unknown]) -> ProxyTally | None:
        """The tally a sandbox's run starts from; a failure is an unknown, not an error."""
        if self.mode != PACKAGES or self.proxy_id is None:
            return None
        try:
            return self.tally()
        except (EngineError, SandboxError) as exc:
            unknown.append(
                Unknown(
                    "which of the hosts reached through the egress proxy this run reached",
                    f"the proxy's counts before the run could not be read ({exc}); the "
                    "hosts and counts shown are the sandbox's since it was made",
                )
            )
            return None

    def observed(self, before: ProxyTally | None, unknown: list[Unknown]) -> EgressObserved:
        """What the proxy relayed and refused since `before` (None: since it started):
        waits (briefly) for the connections it is serving to end."""
        if self.mode != PACKAGES or self.proxy_id is None:
            return EgressObserved(self.mode)
        deadline = time.monotonic() + DRAIN_WAIT_S
        while True:
            after = self.tally()
            if after.in_flight <= 0 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        seen, gaps = observed_between(self.mode, before, after)
        unknown.extend(Unknown(gap.fact, gap.reason) for gap in gaps)
        return seen

    def observed_or_unknown(
        self, before: ProxyTally | None, unknown: list[Unknown]
    ) -> EgressObserved:
        try:
            return self.observed(before, unknown)
        except (EngineError, SandboxError) as exc:
            unknown.append(Unknown(HOSTS_FACT, str(exc)))
            return EgressObserved(self.mode)

    def observed_then_close(self, unknown: list[Unknown]) -> EgressObserved:
        """What the proxy relayed, then the network removed; failures become unknowns."""
        seen = self.observed_or_unknown(None, unknown)
        for problem in self.close():
            unknown.append(Unknown("the egress network's removal", problem))
        return seen

    def close(self) -> list[str]:
        """Remove the proxy and the network, confirmed; what could not be confirmed."""
        problems: list[str] = []
        try:
            engine = network_engine(self.context)
            if self.proxy_id is not None and not remove_and_confirm(
                self.context.engine, self.proxy_id
            ):
                problems.append(f"the egress proxy {self.name}-proxy is still listed")
            # Only what this object made, by its ID: a name it failed to create may
            # be another's.
            for _ in range(50 if self.network_id else 0):
                assert self.network_id is not None
                engine.remove_network(self.network_id)
                if engine.inspect_network(self.network_id) is None:
                    break
                time.sleep(0.1)
            else:
                if self.network_id:
                    problems.append(f"the egress network {self.name} is still listed")
        except EngineError as exc:
            problems.append(str(exc))
        return problems


def open_for_run(
    context: BoxContext,
    egress: EgressRequest | None,
    request: RunRequest,
    *,
    box_id: str,
    image: ImageRecord,
    expires_at: int,
    warm: object = None,
) -> tuple[EgressNetwork | None, EgressPlan | None, RunRequest]:
    """A one-shot run's network, made before its box (the CA bundle becomes an input)."""
    if egress is None or egress.mode == NONE:
        return None, None, request
    if warm is not None:
        raise ValueError("a warm box has no network: egress runs take a fresh box")
    net = EgressNetwork(
        context,
        egress,
        box_id=box_id,
        image_id=image.image_id,
        python_path=image.python_path,
        expires_at=expires_at,
    )
    try:
        plan = net.open()
    except BaseException:
        net.close()
        raise
    if net.ca_bundle is not None:
        ca = InputFile(CA_BUNDLE_NAME, net.ca_bundle)
        request = replace(request, inputs=(*request.inputs, ca))
    return net, plan, request


def plan_of(record: Mapping[str, Any]) -> EgressPlan:
    return EgressPlan(
        str(record.get("mode", NONE)),
        str(record.get("network", "")),
        str(record.get("proxy_address", "")),
        tuple(str(h) for h in record.get("hosts") or ()),
        bool(record.get("ca_bundle")),
    )


def sweep_egress(engine: Engine, grace_s: float = SWEEP_GRACE_S) -> list[str]:
    """Remove egress proxies whose box is gone, then egress networks nobody uses,
    older than `grace_s` (a network and proxy are made before their box)."""
    if not isinstance(engine, NetworkEngine):
        return []
    now = time.time()
    done: list[str] = []

    def orphan(labels: Mapping[str, str]) -> bool:
        try:
            old = now - float(labels.get(LABEL_EGRESS_CREATED, "0")) > grace_s
        except ValueError:
            old = True
        box = f"pybox-{labels.get(LABEL_EGRESS_FOR, '')}"
        return old and engine.inspect_container(box) is None

    for container in engine.list_containers({LABEL_EGRESS: None}):
        labels = container.get("Labels") or {}
        if orphan(labels) and remove_and_confirm(engine, str(container.get("Id"))):
            done.append(f"egress proxy of pybox-{labels.get(LABEL_EGRESS_FOR, '')}")
    for network in engine.list_networks({LABEL_EGRESS: None}):
        labels = network.get("Labels") or {}
        if orphan(labels):
            try:
                if engine.remove_network(str(network.get("Id"))):
                    done.append(f"egress network of pybox-{labels.get(LABEL_EGRESS_FOR, '')}")
            except EngineError:
                continue  # still in use (a proxy not yet removed): the next sweep
    return done
