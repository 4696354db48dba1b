"""The Docker backend's two translations of a sealed box (pybox._core.seal).

Each box-word rule becomes the Docker Engine API fields that set it on create
and show it on inspect (`requirements`); the create body holds every field
that has a create path (`create_request`). Podman's translation
(`pybox._engine.podman_seal`) is this one with its differences.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

from pybox._core.seal import BoxSpec, Check, LogPolicy, Requirement, Rule, Writable, seal_rules
from pybox._core.seccomp import Confinement, security_opt_view


def config_field(name: str, expected: Any, why: str, check: Check = Check.EQUAL) -> Requirement:
    return Requirement(("Config", name), expected, why, check, create_path=(name,))


def host_field(
    name: str,
    expected: Any,
    why: str,
    check: Check = Check.EQUAL,
    view: Callable[[Any], Any] | None = None,
) -> Requirement:
    return Requirement(
        ("HostConfig", name), expected, why, check, create_path=("HostConfig", name), view=view
    )


def host_absent(name: str, why: str) -> Requirement:
    """Explicitly set empty on create, and must read back empty."""
    return host_field(name, [], why, Check.EMPTY)


def confinement_requirements(confinement: Confinement) -> tuple[Requirement, ...]:
    """no-new-privileges, pybox's seccomp profile, and the AppArmor the host allows.

    SecurityOpt must read back exactly: an added `seccomp=unconfined`,
    `apparmor=unconfined` or `label=disable`, or a profile with another hash,
    is a mismatch.
    """
    if confinement.apparmor_profile is None:
        apparmor = Requirement(
            ("AppArmorProfile",),
            "",
            "the engine's host has no AppArmor: none, and never 'unconfined'",
            Check.EMPTY,
        )
    else:
        apparmor = Requirement(
            ("AppArmorProfile",),
            confinement.apparmor_profile,
            "the host has AppArmor: the engine's default profile, never 'unconfined'",
        )
    return (
        host_field(
            "SecurityOpt",
            confinement.security_opt(),
            f"no-new-privileges; pybox's seccomp profile {confinement.seccomp_sha256}",
            view=security_opt_view,
        ),
        apparmor,
    )


def body_from(table: tuple[Requirement, ...]) -> dict[str, Any]:
    """A create body holding every requirement that has a create path."""
    body: dict[str, Any] = {}
    for requirement in table:
        if requirement.create_path is None:
            continue
        target = body
        for key in requirement.create_path[:-1]:
            target = target.setdefault(key, {})
        target[requirement.create_path[-1]] = copy.deepcopy(requirement.expected)
    return body


def _network_keys(value: Any) -> Any:
    return sorted(value) if isinstance(value, Mapping) else value


def tmpfs_map(places: tuple[Writable, ...]) -> dict[str, str]:
    return {place.path: place.options() for place in places}


def ulimit_list(ulimits: tuple[tuple[str, int, int], ...]) -> list[dict[str, Any]]:
    return [{"Name": name, "Soft": soft, "Hard": hard} for name, soft, hard in ulimits]


def log_config(log: LogPolicy) -> dict[str, Any]:
    return {"Type": log.kind, "Config": dict(log.options)}


def _as_is(name: str, *, host: bool = False) -> Callable[[Rule], tuple[Requirement, ...]]:
    def field(rule: Rule) -> tuple[Requirement, ...]:
        value = list(rule.expected) if isinstance(rule.expected, tuple) else rule.expected
        make = host_field if host else config_field
        return (make(name, value, rule.why, rule.check),)

    return field


def _empty(*paths: tuple[str, ...]) -> Callable[[Rule], tuple[Requirement, ...]]:
    """Fields that must read back empty; those with a create path are sent empty."""

    def field(rule: Rule) -> tuple[Requirement, ...]:
        return tuple(
            host_absent(path[1], rule.why)
            if path[0] == "HostConfig"
            else Requirement(path, [], rule.why, Check.EMPTY)
            for path in paths
        )

    return field


def _network(rule: Rule) -> tuple[Requirement, ...]:
    return (host_field("NetworkMode", rule.expected, rule.why),)


def _network_only(rule: Rule) -> tuple[Requirement, ...]:
    return (
        Requirement(("NetworkSettings", "Networks"), [rule.expected], rule.why, view=_network_keys),
    )


def _writable(rule: Rule) -> tuple[Requirement, ...]:
    if not rule.expected:
        return (host_field("Tmpfs", {}, "nothing writable", Check.EMPTY),)
    return (host_field("Tmpfs", tmpfs_map(rule.expected), rule.why),)


def _capabilities(rule: Rule) -> tuple[Requirement, ...]:
    return (
        host_field("CapDrop", ["ALL"], rule.why),
        host_absent("CapAdd", "no capability added"),
    )


def _devices(rule: Rule) -> tuple[Requirement, ...]:
    return (
        host_absent("Devices", rule.why),
        host_absent("DeviceRequests", rule.why),
        host_absent("DeviceCgroupRules", "no device rules"),
    )


def _namespaces(rule: Rule) -> tuple[Requirement, ...]:
    return (
        host_field("UsernsMode", "", "the engine's user namespace setting", Check.EMPTY),
        host_field("PidMode", "", "a private process namespace", Check.EMPTY),
        host_field("UTSMode", "", "a private hostname", Check.EMPTY),
        host_field("CgroupnsMode", "private", "a private cgroup namespace"),
    )


def _host_paths(rule: Rule) -> tuple[Requirement, ...]:
    return (
        host_absent("Binds", "no host path"),
        host_absent("Mounts", "no host path, no volume"),
        host_absent("VolumesFrom", "no volumes of other containers"),
        Requirement(("Mounts",), [], rule.why, Check.EMPTY),
    )


def _ports(rule: Rule) -> tuple[Requirement, ...]:
    return (config_field("ExposedPorts", {}, rule.why, Check.EMPTY),)


def _published(rule: Rule) -> tuple[Requirement, ...]:
    return (
        host_field("PortBindings", {}, rule.why, Check.EMPTY),
        host_field("PublishAllPorts", False, rule.why, Check.EMPTY),
    )


def _kernel_paths(name: str) -> Callable[[Rule], tuple[Requirement, ...]]:
    def field(rule: Rule) -> tuple[Requirement, ...]:
        return (Requirement(("HostConfig", name), list(rule.expected), rule.why, rule.check),)

    return field


def _not_sent(path: tuple[str, ...]) -> Callable[[Rule], tuple[Requirement, ...]]:
    """Read back only: the engine sets it (or nothing may)."""

    def field(rule: Rule) -> tuple[Requirement, ...]:
        return (Requirement(path, rule.expected, rule.why, rule.check),)

    return field


DOCKER_FIELDS: dict[str, Callable[[Rule], tuple[Requirement, ...]]] = {
    "image": lambda rule: (
        Requirement(("Image",), rule.expected, rule.why, create_path=("Image",)),
    ),
    "user": _as_is("User"),
    "entrypoint": _as_is("Entrypoint"),
    "command": lambda rule: (config_field("Cmd", [], rule.why, Check.EMPTY),),
    "env": _as_is("Env"),
    "workdir": _as_is("WorkingDir"),
    "hostname": _as_is("Hostname"),
    "domainname": _as_is("Domainname"),
    "labels": _as_is("Labels"),
    "healthcheck": lambda rule: (config_field("Healthcheck", {"Test": ["NONE"]}, rule.why),),
    "tty": _as_is("Tty"),
    "stdin.open": _as_is("OpenStdin"),
    "stdin.once": _as_is("StdinOnce"),
    "attach.stdin": _as_is("AttachStdin"),
    "attach.stdout": _as_is("AttachStdout"),
    "attach.stderr": _as_is("AttachStderr"),
    "ports": _ports,
    "image_volumes": lambda rule: (config_field("Volumes", {}, rule.why, Check.EMPTY),),
    "network.disabled": _as_is("NetworkDisabled"),
    "network": _network,
    "network.hosts": _empty(("HostConfig", "ExtraHosts")),
    "network.resolvers": _empty(("HostConfig", "Dns")),
    "network.hosts_file": _not_sent(("HostsPath",)),
    "network.resolver_file": _not_sent(("ResolvConfPath",)),
    "network.only": _network_only,
    "ports.published": _published,
    "links": _empty(("HostConfig", "Links")),
    "readonly_root": _as_is("ReadonlyRootfs", host=True),
    "writable": _writable,
    "shm_bytes": _as_is("ShmSize", host=True),
    "ipc": _as_is("IpcMode", host=True),
    "host_paths": _host_paths,
    "privileged": _as_is("Privileged", host=True),
    "capabilities": _capabilities,
    "confinement": lambda rule: confinement_requirements(rule.expected),
    "devices": _devices,
    "groups": _empty(("HostConfig", "GroupAdd")),
    "sysctls": lambda rule: (host_field("Sysctls", {}, rule.why, Check.EMPTY),),
    # Docker sends annotations to the runtime from API 1.43 on; none is sent, and
    # an engine that shows some has been given them by someone else.
    "annotations": _not_sent(("HostConfig", "Annotations")),
    "namespaces": _namespaces,
    "cgroup_parent": _as_is("CgroupParent", host=True),
    "init": _as_is("Init", host=True),
    "runtime": _as_is("Runtime", host=True),
    "masked_paths": _kernel_paths("MaskedPaths"),
    "readonly_paths": _kernel_paths("ReadonlyPaths"),
    "memory_bytes": _as_is("Memory", host=True),
    "swap_bytes": _as_is("MemorySwap", host=True),
    "oom_kill_disabled": _as_is("OomKillDisable", host=True),
    "nano_cpus": _as_is("NanoCpus", host=True),
    "pids": _as_is("PidsLimit", host=True),
    "ulimits": lambda rule: (host_field("Ulimits", ulimit_list(rule.expected), rule.why),),
    "oom_score_adj": _as_is("OomScoreAdj", host=True),
    "log": lambda rule: (host_field("LogConfig", log_config(rule.expected), rule.why),),
    "auto_remove": _as_is("AutoRemove", host=True),
    "restart": lambda rule: (
        host_field("RestartPolicy", {"Name": rule.expected}, rule.why, Check.INCLUDES),
    ),
}


def docker_requirements(spec: BoxSpec) -> tuple[Requirement, ...]:
    """Every rule of `spec` as the Docker Engine API sets and shows it."""
    return tuple(
        requirement for rule in seal_rules(spec) for requirement in DOCKER_FIELDS[rule.fact](rule)
    )


class DockerSeal:
    """The Docker backend's translations (`pybox._core.seal.SealTranslation`)."""

    def requirements(self, spec: BoxSpec) -> tuple[Requirement, ...]:
        return docker_requirements(spec)

    def create_request(self, spec: BoxSpec) -> dict[str, Any]:
        return body_from(docker_requirements(spec))

    def read_back_as(self, field: str) -> frozenset[str]:
        return frozenset({field})


DOCKER_SEAL = DockerSeal()

__all__ = ["DOCKER_SEAL", "DockerSeal", "docker_requirements"]
