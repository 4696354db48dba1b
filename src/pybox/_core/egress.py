"""Network modes ("egress") for boxes: the operator's policy, a box's choice, the
plan a box is made with, and what the proxy's tally says it reached (pure).

- `none`: no interface but `lo` (the default, always).
- `packages`: an internal network of the box's own, whose only other member is
  pybox's allowlisting CONNECT proxy (`pybox._inbox.egress_proxy`).
- `open`: a bridge network of the box's own with general egress; only when the
  operator enables it.

The allowlist is the operator's (config) and the machine's pip and npm
configuration (`pybox._adapters.egress_config`), never the agent's.

Egress as posture: the egress network's own settings, and the proxy
container as a sealed box (pure; read back before anything starts). The run
box's network rules are the seal table's (`pybox._core.seal`).

The proxy container is a sealed box with the differences its job needs:
it is on two networks (the box's internal one, then the engine's bridge, joined
before start), the engine keeps its stdout (the log of what it relayed, capped),
and it runs pybox's proxy instead of the bootstrap; it has no /dev/shm (IPC
mode none) and no tmpfs, so nothing in it is writable. Everything else is a
run box's: read-only root, every capability dropped, pybox's seccomp profile,
no host path, a uid of its own, memory, CPU and process caps, open-file,
process and core ulimits. Egress `packages` is Docker's only (docs/engines.md,
"Egress on Podman").
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pybox._core.display import plural
from pybox._core.errors import ConfigError, EgressRefused, InvalidRequest
from pybox._core.seal import BoxNetwork, BoxSpec, LogPolicy
from pybox._core.seccomp import Confinement

NONE, PACKAGES, OPEN = "none", "packages", "open"
MODES = (NONE, PACKAGES, OPEN)
PROXY_PORT = 3128
# Where the machine's CA bundle is put in a `packages` box (an input file).
CA_BUNDLE_NAME = "pybox-egress-ca.pem"
# Egress networks and proxies carry these, not io.pybox.managed: they live exactly
# as long as their box (pybox-<for>), and the egress sweep removes them after it.
LABEL_EGRESS = "io.pybox.egress"
LABEL_EGRESS_FOR = "io.pybox.egress-for"
LABEL_EGRESS_CREATED = "io.pybox.egress-created"
EGRESS_KEYS = ("modes", "allow_hosts", "machine_config", "private_addresses", "ca_bundle")


def normalise_host(name: str) -> str:
    name = name.strip().lower()
    return name[:-1] if name.endswith(".") else name


def host_problem(name: str) -> str | None:
    """Why `name` cannot be on an allowlist (IP literals, wildcards, non-ASCII), or None."""
    if not name or len(name) > 253 or not name.isascii():
        return "empty, longer than 253 characters, or not ASCII (write IDN names as xn--)"
    try:
        ipaddress.ip_address(name.strip("[]"))
        return "an address, not a host name"
    except ValueError:
        pass
    labels = name.split(".")
    for label in labels:
        if not label or len(label) > 63 or label.startswith("-") or label.endswith("-"):
            return f"the label {label!r} is not a host name label"
        if not all(ch.isalnum() or ch == "-" for ch in label):
            return f"the label {label!r} holds a character other than a-z, 0-9 and -"
    if labels[-1].isdigit():
        return "its last label is a number (an address in disguise)"
    return None


@dataclass(frozen=True)
class EgressSettings:
    """`[egress]` in the operator's config."""

    modes: tuple[str, ...] = (NONE, PACKAGES)  # what boxes may ask for
    allow_hosts: tuple[str, ...] = ()  # besides the machine's pip and npm configuration
    machine_config: bool = True  # read pip.conf and npmrc for registry hosts
    private_addresses: bool = False  # allowed names may resolve to non-global addresses
    ca_bundle: str = "auto"  # "auto" (pip/npm config, SSL_CERT_FILE), "none", or a path

    def with_settings(self, values: Mapping[str, object], source: str) -> EgressSettings:
        unknown = sorted(set(values) - set(EGRESS_KEYS))
        if unknown:
            raise ConfigError(
                f"{source}: unknown egress setting {', '.join(unknown)}. "
                f"Known: {', '.join(EGRESS_KEYS)}."
            )
        changes: dict[str, object] = {}
        for key in ("modes", "allow_hosts"):
            if key in values:
                raw = values[key]
                if not isinstance(raw, list) or not all(isinstance(v, str) for v in raw):
                    raise ConfigError(f"{source}: egress.{key} must be a list of strings.")
                changes[key] = tuple(raw)
        for mode in changes.get("modes", ()):  # type: ignore[attr-defined]
            if mode not in MODES:
                raise ConfigError(
                    f"{source}: egress.modes holds {mode!r}; known: {', '.join(MODES)}."
                )
        hosts = []
        for host in changes.get("allow_hosts", ()):  # type: ignore[attr-defined]
            problem = host_problem(normalise_host(host))
            if problem:
                raise ConfigError(f"{source}: egress.allow_hosts: {host!r} is {problem}.")
            hosts.append(normalise_host(host))
        if "allow_hosts" in changes:
            changes["allow_hosts"] = tuple(hosts)
        for key in ("machine_config", "private_addresses"):
            if key in values:
                if not isinstance(values[key], bool):
                    raise ConfigError(f"{source}: egress.{key} must be true or false.")
                changes[key] = values[key]
        if "ca_bundle" in values:
            if not isinstance(values["ca_bundle"], str) or not values["ca_bundle"]:
                raise ConfigError(f"{source}: egress.ca_bundle must be auto, none or a path.")
            changes["ca_bundle"] = values["ca_bundle"]
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]


def choose_mode(requested: str | None, settings: EgressSettings) -> str:
    """The box's mode: `none` unless asked; more than the operator allows is refused."""
    mode = NONE if requested is None else requested
    if mode not in MODES:
        raise InvalidRequest(f"egress must be one of {', '.join(MODES)}, not {mode!r}.")
    if mode != NONE and mode not in settings.modes:
        allowed = ", ".join(m for m in MODES if m == NONE or m in settings.modes)
        raise EgressRefused(
            f"egress {mode!r} is not allowed by the operator's policy (allowed: {allowed}). "
            f'The operator enables it with `modes = [..., "{mode}"]` under [egress] '
            "in pybox's config file; pybox never narrows a request on its own."
        )
    return mode


@dataclass(frozen=True)
class EgressPlan:
    """How one box reaches out: made before the box, part of its posture."""

    mode: str = NONE
    network: str = ""  # the box's own network (empty for none)
    proxy_address: str = ""  # packages: the proxy's address on that network
    hosts: tuple[str, ...] = ()  # packages: the allowlist
    ca_bundle: bool = False  # packages: the machine's CA bundle is an input file

    def environment(self, input_dir: str) -> dict[str, str]:
        if self.mode != PACKAGES:
            return {}
        url = f"http://{self.proxy_address}:{PROXY_PORT}"
        env = {
            name: url
            for name in (
                "HTTPS_PROXY",
                "https_proxy",
                "HTTP_PROXY",
                "http_proxy",
                "npm_config_proxy",
                "npm_config_https_proxy",
            )
        }
        env["NO_PROXY"] = env["no_proxy"] = ""
        if self.ca_bundle:
            path = f"{input_dir}/{CA_BUNDLE_NAME}"
            env.update(
                SSL_CERT_FILE=path,
                NODE_EXTRA_CA_CERTS=path,
                PIP_CERT=path,
                REQUESTS_CA_BUNDLE=path,
                npm_config_cafile=path,
            )
        return env


@dataclass(frozen=True)
class HostReached:
    host: str
    port: int
    connections: int
    up_bytes: int
    down_bytes: int


@dataclass(frozen=True)
class EgressObserved:
    """What the proxy counted for one program (the receipt's `observed_by_pybox.egress`)."""

    mode: str
    hosts: tuple[HostReached, ...] = ()
    refused: int = 0  # CONNECT requests the proxy refused
    refused_names: tuple[str, ...] = ()  # at most 20, as the box sent them (untrusted)


# Refused names a receipt lists (the box's own words: untrusted, only a sample).
REFUSED_NAMES_SHOWN = 20
# The receipt's `unknown` fact when the proxy counted refusals whose names it did not keep.
REFUSED_NAMES_DROPPED = "the names of some requests the egress proxy refused"


@dataclass(frozen=True)
class ProxyTally:
    """The proxy's counts since it started, as one `tally` line says them (the
    proxy keeps them apart from any log: pybox._inbox.egress_proxy)."""

    at: float = 0.0  # the proxy's clock when it answered (the host's: one kernel)
    reached: tuple[tuple[str, int, int, int, int, int], ...] = ()  # host, port, opened,
    # closed, up bytes, down bytes
    refused: tuple[tuple[str, int], ...] = ()  # name, refusals (the first names kept)
    refused_total: int = 0
    refused_dropped: int = 0  # refusals to names past the proxy's bound
    refused_names_max: int = 0
    in_flight: int = 0  # connections accepted and not yet ended


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def parse_tally(line: str) -> ProxyTally | None:
    """One `tally` line, or None (not JSON, not a tally, or misshapen)."""
    try:
        event = json.loads(line)
    except ValueError:
        return None
    if not isinstance(event, dict) or event.get("event") != "tally":
        return None
    at, reached, refused = event.get("t"), event.get("reached"), event.get("refused")
    if not isinstance(at, int | float) or not isinstance(reached, list):
        return None
    if not isinstance(refused, list):
        return None
    rows = []
    for row in reached:
        if not (isinstance(row, list) and len(row) == 6 and isinstance(row[0], str)):
            return None
        rows.append((row[0], *(_count(v) for v in row[1:])))
    names = []
    for pair in refused:
        if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str)):
            return None
        names.append((pair[0], _count(pair[1])))
    return ProxyTally(
        float(at),
        tuple(rows),  # type: ignore[arg-type]
        tuple(names),
        _count(event.get("refused_total")),
        _count(event.get("refused_dropped")),
        _count(event.get("refused_names_max")),
        _count(event.get("in_flight")),
    )


def newest_tally(lines: Iterable[str], asked_at: float) -> ProxyTally | None:
    """The newest tally the proxy wrote at or after `asked_at` (None: none yet)."""
    found = None
    for line in lines:
        tally = parse_tally(line)
        if tally is not None and tally.at >= asked_at and (found is None or tally.at >= found.at):
            found = tally
    return found


@dataclass(frozen=True)
class TallyGap:
    """A fact the tallies could not give: the receipt lists it under `unknown`."""

    fact: str
    reason: str


def observed_between(
    mode: str, before: ProxyTally | None, after: ProxyTally
) -> tuple[EgressObserved, tuple[TallyGap, ...]]:
    """What the proxy did between two tallies (`before` None: since it started)."""
    base = before or ProxyTally()
    was = {(row[0], row[1]): row[2:] for row in base.reached}
    hosts = []
    for host, port, *now in after.reached:
        old = was.get((host, port), (0, 0, 0, 0))
        opened, _closed, up, down = (max(0, a - b) for a, b in zip(now, old, strict=True))
        if opened or up or down:
            hosts.append(HostReached(host, port, opened, up, down))
    refused_before = dict(base.refused)
    names = [name for name, count in after.refused if count > refused_before.get(name, 0)]
    refused = max(0, after.refused_total - base.refused_total)
    dropped = max(0, after.refused_dropped - base.refused_dropped)
    gaps = []
    if dropped:
        gaps.append(
            TallyGap(
                REFUSED_NAMES_DROPPED,
                f"{dropped} of the {refused} refused requests named hosts past the "
                f"{after.refused_names_max} distinct names the proxy keeps; they are "
                "counted in `refused`, their names were not kept",
            )
        )
    if after.in_flight:
        gaps.append(
            TallyGap(
                "the bytes of egress connections still open",
                f"{plural(after.in_flight, 'connection')} through the proxy had not ended when "
                "pybox read its counts; their bytes are counted when they end",
            )
        )
    seen = EgressObserved(
        mode,
        tuple(sorted(hosts, key=lambda h: (h.host, h.port))),
        refused,
        tuple(name for name in names if name)[:REFUSED_NAMES_SHOWN],
    )
    return seen, tuple(gaps)


def describe_egress(observed: EgressObserved) -> str:
    """One line for the receipt's summary (refused names are the box's: only counted)."""
    if observed.mode == OPEN:
        return "open: general egress, not observed by pybox"
    reached = "; ".join(
        f"{h.host}:{h.port} ({h.connections} conn., {h.up_bytes} B up, {h.down_bytes} B down)"
        for h in observed.hosts
    )
    refused = f"; {observed.refused} refused by the proxy" if observed.refused else ""
    return f"packages: {reached or 'no host reached'}{refused}"


# -- egress as posture ---------------------------------------------------------------

PROXY_HOSTNAME = "pybox-egress"
PROXY_MEMORY_BYTES = 64 * 1024 * 1024
PROXY_PIDS = 64
PROXY_NANO_CPUS = 500_000_000
# Its stdout holds only its answers to pybox's asks (a tally each): no client writes it.
PROXY_LOG_KIND = "json-file"
PROXY_LOG_OPTIONS = (("max-size", "16m"), ("max-file", "1"))
# A box's ulimits (pybox._core.runtime_limits): 16 connections take 33 descriptors
# and 18 threads; nproc holds the proxy's uid (its own) to its processes cap too.
PROXY_OPEN_FILES = 256
PROXY_ULIMITS = (
    ("nofile", PROXY_OPEN_FILES, PROXY_OPEN_FILES),
    ("core", 0, 0),
    ("nproc", PROXY_PIDS, PROXY_PIDS),
)
# The host gets no address on a `packages` network: the box reaches no host
# service, only the proxy's address (docs/containment.md, measured there).
INHIBIT_IPV4 = "com.docker.network.bridge.inhibit_ipv4"


def network_body(plan_mode: str, labels: Mapping[str, str]) -> dict[str, Any]:
    options = {"com.docker.network.bridge.enable_icc": "true"}
    if plan_mode == PACKAGES:
        options[INHIBIT_IPV4] = "true"
    return {
        "Driver": "bridge",
        "Internal": plan_mode == PACKAGES,
        "CheckDuplicate": True,
        "Attachable": False,
        "EnableIPv6": False,
        "Labels": dict(labels),
        "Options": options,
    }


def network_problems(
    inspected: Mapping[str, Any], plan_mode: str, labels: Mapping[str, str]
) -> list[str]:
    """What differs between the engine's view of an egress network and what was asked."""
    problems = []
    internal = plan_mode == PACKAGES
    if bool(inspected.get("Internal")) != internal:
        problems.append(f"Internal is {inspected.get('Internal')!r}, not {internal}")
    if inspected.get("Driver") != "bridge":
        problems.append(f"Driver is {inspected.get('Driver')!r}, not bridge")
    if inspected.get("EnableIPv6"):
        problems.append("EnableIPv6 is on")
    options = inspected.get("Options") or {}
    if internal and options.get(INHIBIT_IPV4) != "true":
        problems.append(f"{INHIBIT_IPV4} is {options.get(INHIBIT_IPV4)!r}, not 'true'")
    have = inspected.get("Labels") or {}
    if any(have.get(key) != value for key, value in labels.items()):
        problems.append("its labels differ")
    return problems


@dataclass(frozen=True)
class ProxySpec:
    image_id: str
    entrypoint: tuple[str, ...]
    user: str
    labels: tuple[tuple[str, str], ...]
    network: str
    confinement: Confinement
    runtime: str = "runc"


def proxy_box(spec: ProxySpec) -> BoxSpec:
    """The proxy in box words: the one posture every backend translates."""
    return BoxSpec(
        image=spec.image_id,
        image_why="the box's own image",
        user=spec.user,
        user_why="a uid of its own, no capability",
        entrypoint=spec.entrypoint,
        entrypoint_why="pybox's proxy, its allowlist",
        env=(),
        hostname=PROXY_HOSTNAME,
        labels=spec.labels,
        confinement=spec.confinement,
        runtime=spec.runtime,
        memory_bytes=PROXY_MEMORY_BYTES,
        nano_cpus=PROXY_NANO_CPUS,
        pids=PROXY_PIDS,
        ulimits=PROXY_ULIMITS,
        # Nothing writable, and no /dev/shm at all: it uses threads only.
        writable=(),
        no_shm=True,
        network=BoxNetwork(spec.network, "the box's internal network (the bridge is joined)"),
        log=LogPolicy(PROXY_LOG_KIND, PROXY_LOG_OPTIONS, "its log of connections, capped"),
    )
