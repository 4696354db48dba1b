"""Egress as posture: the box's network rows, the egress network's own settings,
and the proxy container's table (pure; read back before anything starts).

The proxy container is a run box's posture with the differences its job needs:
it is on two networks (the box's internal one, then the engine's bridge, joined
before start), the engine keeps its stdout (the log of what it relayed, capped),
and it runs pybox's proxy instead of the bootstrap; it has no /dev/shm (IPC
mode none) and no tmpfs, so nothing in it is writable. Everything else is a
run box's: read-only root, every capability dropped, pybox's seccomp profile,
no host path, a uid of its own, memory, CPU and process caps, open-file,
process and core ulimits. Egress `packages` is Docker's only (docs/engines.md,
"Egress on Podman"), so this table has no Podman view.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pybox._core.egress import NONE, OPEN, PACKAGES, EgressPlan
from pybox._core.readback import (
    Check,
    Requirement,
    config_field,
    host_absent,
    host_field,
    sealed_host_requirements,
)
from pybox._core.seccomp import Confinement

PROXY_HOSTNAME = "pybox-egress"
PROXY_MEMORY_BYTES = 64 * 1024 * 1024
PROXY_PIDS = 64
PROXY_NANO_CPUS = 500_000_000
# Its stdout holds only its answers to pybox's asks (a tally each): no client writes it.
PROXY_LOG = {"Type": "json-file", "Config": {"max-size": "16m", "max-file": "1"}}
# A box's ulimits (pybox._core.runtime_limits): 16 connections take 33 descriptors
# and 18 threads; nproc holds the proxy's uid (its own) to its processes cap too.
PROXY_OPEN_FILES = 256
PROXY_ULIMITS = [
    {"Name": "nofile", "Soft": PROXY_OPEN_FILES, "Hard": PROXY_OPEN_FILES},
    {"Name": "core", "Soft": 0, "Hard": 0},
    {"Name": "nproc", "Soft": PROXY_PIDS, "Hard": PROXY_PIDS},
]
# The host gets no address on a `packages` network: the box reaches no host
# service, only the proxy's address (docs/containment.md, measured there).
INHIBIT_IPV4 = "com.docker.network.bridge.inhibit_ipv4"


def network_requirements(plan: EgressPlan) -> tuple[Requirement, ...]:
    """The run box's network rows for its mode."""
    if plan.mode == NONE:
        return (
            config_field("NetworkDisabled", True, "no network"),
            host_field("NetworkMode", "none", "an empty network namespace"),
            host_absent("ExtraHosts", "no host entries"),
            host_absent("Dns", "no resolvers"),
            Requirement(("HostsPath",), "", "no host-written /etc/hosts", Check.EMPTY),
            Requirement(("ResolvConfPath",), "", "no host resolver file", Check.EMPTY),
        )
    why = (
        "its own internal network: only the egress proxy is on it"
        if plan.mode == PACKAGES
        else "its own bridge network (egress open, by the operator's leave)"
    )
    return (
        config_field("NetworkDisabled", False, "on its egress network", Check.EMPTY),
        host_field("NetworkMode", plan.network, why),
        host_absent("ExtraHosts", "no host entries"),
        host_absent("Dns", "the engine's resolver only"),
        Requirement(
            ("NetworkSettings", "Networks"),
            [plan.network],
            "on exactly one network, its own",
            view=lambda value: sorted(value) if isinstance(value, Mapping) else value,
        ),
    )


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


def proxy_requirements(spec: ProxySpec) -> tuple[Requirement, ...]:
    sealed = tuple(
        # No /dev/shm at all (IPC "none": a private namespace, nothing mounted):
        # the proxy uses threads only, and nothing in it is writable.
        host_field("IpcMode", "none", "a private IPC namespace and no /dev/shm")
        if requirement.name == "HostConfig.IpcMode"
        else requirement
        for requirement in sealed_host_requirements(
            spec.confinement, spec.runtime, "the expected runtime"
        )
    )
    return (
        Requirement(("Image",), spec.image_id, "the box's own image", create_path=("Image",)),
        config_field("User", spec.user, "a uid of its own, no capability"),
        config_field("Entrypoint", list(spec.entrypoint), "pybox's proxy, its allowlist"),
        config_field("Cmd", [], "nothing from the image runs", Check.EMPTY),
        config_field("Hostname", PROXY_HOSTNAME, "not the host's name"),
        config_field("Labels", dict(spec.labels), "a leftover can be found", Check.INCLUDES),
        config_field("Healthcheck", {"Test": ["NONE"]}, "nothing else execs inside"),
        config_field("ExposedPorts", {}, "no ports", Check.EMPTY),
        config_field("Volumes", {}, "no image volumes", Check.EMPTY),
        config_field("AttachStdin", False, "no stdin", Check.EMPTY),
        config_field("OpenStdin", False, "no stdin", Check.EMPTY),
        host_field(
            "NetworkMode", spec.network, "the box's internal network (the bridge is joined)"
        ),
        host_field("PortBindings", {}, "no published ports", Check.EMPTY),
        host_field("PublishAllPorts", False, "no published ports", Check.EMPTY),
        host_absent("ExtraHosts", "no host entries"),
        host_absent("Dns", "the engine's resolvers only"),
        host_absent("Links", "no links"),
        host_field("ReadonlyRootfs", True, "read-only root filesystem"),
        host_absent("Tmpfs", "nothing writable"),
        *sealed,
        host_field("Memory", PROXY_MEMORY_BYTES, "memory cap"),
        host_field("MemorySwap", PROXY_MEMORY_BYTES, "no swap"),
        host_field("NanoCpus", PROXY_NANO_CPUS, "CPU cap"),
        host_field("PidsLimit", PROXY_PIDS, "processes (threads) cap"),
        host_field("Ulimits", PROXY_ULIMITS, "open files and processes capped; no core dumps"),
        host_field("LogConfig", PROXY_LOG, "its log of connections, capped"),
        host_field("AutoRemove", False, "pybox removes it and confirms it", Check.EMPTY),
        host_field("RestartPolicy", {"Name": "no"}, "never restarted", Check.INCLUDES),
    )


__all__ = ["OPEN", "ProxySpec", "network_body", "network_problems", "network_requirements"]
