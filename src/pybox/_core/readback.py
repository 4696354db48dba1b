"""Reading a container back: a table of requirements, each a fact with where it is
set on create, where it is read back and why, and the comparison of the engine's
view with the table (pure).

Every container pybox makes is described by such a table (`posture.requirements`
for a run box, `build_posture` for the build box, `egress_posture` for the
egress proxy), so that the create body and the check before start cannot drift
apart. `sealed_host_requirements` is the part they all share.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from pybox._core.seccomp import Confinement, security_opt_view

# Masked and read-only kernel paths every container must have (the engine's defaults).
REQUIRED_MASKED_PATHS = (
    "/proc/acpi",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
)
REQUIRED_READONLY_PATHS = ("/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger")

# Writable places: size-capped tmpfs only. No exec, no setuid, no device files.


class Check(Enum):
    EQUAL = "equal"
    EMPTY = "empty"  # absent, null, false, 0 or an empty list/map/string
    INCLUDES = "includes"  # every expected list item / map entry is present


@dataclass(frozen=True)
class Requirement:
    """One fact about the box: where it is set, where it is read back, why."""

    inspect_path: tuple[str, ...]
    expected: Any
    why: str
    check: Check = Check.EQUAL
    create_path: tuple[str, ...] | None = None
    # How the value is compared and shown, when not as is (a seccomp profile
    # is compared and shown by its hash, not as kilobytes of JSON).
    view: Callable[[Any], Any] | None = None

    @property
    def name(self) -> str:
        return ".".join(self.inspect_path)

    def shown(self, value: Any) -> Any:
        return value if self.view is None else self.view(value)


@dataclass(frozen=True)
class Mismatch:
    field: str
    expected: Any
    actual: Any
    why: str

    def describe(self) -> str:
        return (
            f"{self.field}: expected {self.expected!r}, the engine has {self.actual!r} ({self.why})"
        )


def mismatch(requirement: Requirement, actual: Any) -> Mismatch:
    """A differing field, its values shown the way they were compared."""
    return Mismatch(
        requirement.name,
        requirement.shown(requirement.expected),
        requirement.shown(actual),
        requirement.why,
    )


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


def sealed_host_requirements(
    confinement: Confinement, runtime: str, runtime_why: str
) -> tuple[Requirement, ...]:
    """What every container pybox makes shares, whatever it is for (a run box, the
    build box, the egress proxy): nothing from the host, no privilege, private
    namespaces, the kernel's files masked, the expected runtime."""
    return (
        host_absent("Binds", "no host path"),
        host_absent("Mounts", "no host path, no volume"),
        host_absent("VolumesFrom", "no volumes of other containers"),
        Requirement(("Mounts",), [], "no host path, no volume, no engine socket", Check.EMPTY),
        host_field("Privileged", False, "not privileged", Check.EMPTY),
        host_field("CapDrop", ["ALL"], "every capability dropped"),
        host_absent("CapAdd", "no capability added"),
        *confinement_requirements(confinement),
        host_absent("Devices", "no devices"),
        host_absent("DeviceRequests", "no devices"),
        host_absent("DeviceCgroupRules", "no device rules"),
        host_absent("GroupAdd", "no extra groups"),
        host_field("Sysctls", {}, "no sysctls", Check.EMPTY),
        host_field("UsernsMode", "", "the engine's user namespace setting", Check.EMPTY),
        host_field("PidMode", "", "a private process namespace", Check.EMPTY),
        host_field("IpcMode", "private", "private IPC"),
        host_field("UTSMode", "", "a private hostname", Check.EMPTY),
        host_field("CgroupnsMode", "private", "a private cgroup namespace"),
        host_field("CgroupParent", "", "the engine's cgroup", Check.EMPTY),
        host_field(
            "Init", False, "pybox's own program is init; no host binary mounted", Check.EMPTY
        ),
        host_field("Runtime", runtime, runtime_why),
        Requirement(
            ("HostConfig", "MaskedPaths"),
            list(REQUIRED_MASKED_PATHS),
            "kernel files masked",
            Check.INCLUDES,
        ),
        Requirement(
            ("HostConfig", "ReadonlyPaths"),
            list(REQUIRED_READONLY_PATHS),
            "kernel settings read-only",
            Check.INCLUDES,
        ),
    )


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


_MISSING = object()


def _lookup(document: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    value: Any = document
    for key in path:
        if not isinstance(value, Mapping) or key not in value:
            return _MISSING
        value = value[key]
    return value


def _is_empty(value: Any) -> bool:
    return value is _MISSING or value in (None, False, 0, "", [], {})


def _includes(actual: Any, expected: Any) -> bool:
    if isinstance(expected, Mapping):
        return isinstance(actual, Mapping) and all(
            key in actual and actual[key] == value for key, value in expected.items()
        )
    if isinstance(expected, list):
        return isinstance(actual, list) and all(item in actual for item in expected)
    return bool(actual == expected)


def _satisfied(requirement: Requirement, actual: Any) -> bool:
    if requirement.check is Check.EMPTY:
        return _is_empty(actual)
    if actual is _MISSING:
        return False
    expected = requirement.shown(requirement.expected)
    actual = requirement.shown(actual)
    if requirement.check is Check.INCLUDES:
        return _includes(actual, expected)
    return bool(actual == expected)


@dataclass(frozen=True)
class PostureReport:
    """The outcome of reading a box back: how many facts, which differed."""

    checked: tuple[str, ...]
    mismatches: tuple[Mismatch, ...]

    @property
    def ok(self) -> bool:
        return not self.mismatches


def check_requirements(
    table: tuple[Requirement, ...], inspected: Mapping[str, Any]
) -> PostureReport:
    """Compare an engine's view of a container with a table of requirements."""
    checked: list[str] = []
    mismatches: list[Mismatch] = []
    for requirement in table:
        actual = _lookup(inspected, requirement.inspect_path)
        checked.append(requirement.name)
        if not _satisfied(requirement, actual):
            mismatches.append(mismatch(requirement, None if actual is _MISSING else actual))
    return PostureReport(tuple(checked), tuple(mismatches))
