"""The box's posture: every restriction, set in one place and read back.

`requirements()` is the single list of what a box must be. The engine create
body is built from it, and the container the engine actually made is compared
against the same list before it may start. A field the engine dropped, changed
or added (a mount, a capability, a network) is a mismatch, and a mismatch ends
the run as a sandbox error: never a weaker box.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from pybox._core.egress import EgressPlan
from pybox._core.limits import Limits
from pybox._core.preload import check_modules
from pybox._core.runtime_limits import engine_pids_limit, ulimits
from pybox._core.runtimes import RUNC_CHOICE, RuntimeChoice
from pybox._core.seccomp import Confinement, security_opt_view
from pybox._core.wire import ONE_PROGRAM, PROTOCOLS, SANDBOX

# The image's own unprivileged account (for tools that look a user up).
BOX_UID = 1000
BOX_GID = 1000
BOX_USER = f"{BOX_UID}:{BOX_GID}"
# Each box runs as a uid and gid of its own, drawn at random from this range,
# which no host account uses: limits the kernel keeps per user (inotify
# instances and watches, for example) are then never shared with another box
# or with a host user. Draws collide with odds of 1 in 16.7 million per pair.
BOX_UID_FIRST = 1_600_000_000
BOX_UID_COUNT = 1 << 24


def box_user(uid: int) -> str:
    return f"{uid}:{uid}"


BOX_HOSTNAME = "pybox"
# A started box whose code has not arrived within this long ends itself: pybox
# sends it right after start, so only a frozen or dead pybox takes longer. Waiting
# (warm-pool) boxes get their idle time on top.
PAYLOAD_WAIT_S = 10.0
PYBOX_ROOT = "/pybox"
WORK_DIR = "/pybox/work"
INPUT_DIR = "/pybox/input"
OUTPUT_DIR = "/pybox/output"
TMP_DIR = "/tmp"
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
THREAD_COUNT_VARIABLES = (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
)

LABEL_MANAGED = "io.pybox.managed"
LABEL_RUN_ID = "io.pybox.run-id"
LABEL_OWNER = "io.pybox.owner"
LABEL_EXPIRES_AT = "io.pybox.expires-at"
LABEL_VERSION = "io.pybox.version"
# A sandbox's box (protocol 3): it outlives the process that made it, so the
# sweep leaves it to the sandboxes' own sweep until its lifetime is over.
LABEL_SANDBOX = "io.pybox.sandbox"

# Paths the engine masks or makes read-only by default; pybox insists on them.
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
TMPFS_FLAGS = "rw,nosuid,nodev,noexec"


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


def box_environment(
    image_env: tuple[tuple[str, str], ...] = (), cpus: float = 1.0
) -> dict[str, str]:
    """Every variable a box gets: pybox's own, then the recorded image's. Nothing else."""
    env = {
        "PATH": DEFAULT_PATH,
        "HOME": WORK_DIR,
        "LANG": "C.UTF-8",
        "TMPDIR": TMP_DIR,
        "PYTHONUNBUFFERED": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYBOX_INPUT_DIR": INPUT_DIR,
        "PYBOX_OUTPUT_DIR": OUTPUT_DIR,
        "PYBOX_WORK_DIR": WORK_DIR,
    }
    # Numeric libraries start one thread per host CPU unless told the box's limit.
    env.update(dict.fromkeys(THREAD_COUNT_VARIABLES, str(max(1, math.ceil(cpus)))))
    env.update(dict(image_env))
    return env


@dataclass(frozen=True)
class BoxSpec:
    """Everything that decides what one box is."""

    run_id: str
    image_id: str
    python_path: str
    bootstrap_source: str
    limits: Limits
    owner: str
    expires_at: int
    pybox_version: str
    confinement: Confinement
    code_name: str = "main.py"
    # The isolation lane: its engine runtime is HostConfig.Runtime, read back.
    isolation: RuntimeChoice = RUNC_CHOICE
    image_env: tuple[tuple[str, str], ...] = field(default=())
    uid: int = BOX_UID  # runs draw one of their own: see BOX_UID_FIRST
    payload_wait_s: float = PAYLOAD_WAIT_S
    # The bootstrap protocol (1: one program; 2: programs one after another;
    # 3: a sandbox, which outlives the process that made it).
    protocol: int = ONE_PROGRAM
    # A sandbox's box: the tag of the store that records it (its label's value).
    sandbox_store: str = ""
    # The engine that makes it ("docker", "podman"): how its answers are read back.
    engine: str = "docker"
    # Its network mode and, unless none, its own network (pybox._core.egress).
    egress: EgressPlan = field(default_factory=EgressPlan)
    # A warm box's modules to import before its code arrives (the image's list;
    # pybox._core.preload). Part of the entrypoint, so read back like the rest.
    preload: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise ValueError(f"a box's bootstrap protocol is 1, 2 or 3, not {self.protocol}")
        if (self.protocol == SANDBOX) != bool(self.sandbox_store):
            raise ValueError("a sandbox's box, and only one, names the store that records it")
        if not 0 < self.uid < 2**32 - 1:
            raise ValueError(f"a box's uid must be above 0, not {self.uid}")
        if not 0 < self.payload_wait_s < 7 * 86400:
            raise ValueError(f"a box's payload wait must be positive, not {self.payload_wait_s}")
        if self.preload and self.protocol == SANDBOX:
            raise ValueError("a sandbox's box pre-starts no interpreter, so it preloads nothing")
        check_modules(self.preload, "a box's spec")

    @property
    def name(self) -> str:
        return f"pybox-{self.run_id}"

    @property
    def runtime(self) -> str:
        """The engine's name of the box's runtime (runc, or runsc for gVisor)."""
        return self.isolation.engine_runtime

    @property
    def user(self) -> str:
        return box_user(self.uid)

    def environment(self) -> list[str]:
        env = box_environment(self.image_env, self.limits.cpus)
        env.update(self.egress.environment(INPUT_DIR))
        return [f"{key}={value}" for key, value in env.items()]

    def entrypoint(self) -> list[str]:
        # The bootstrap's arguments: the program it pre-starts (python code_name),
        # its protocol, and how long it waits for a program's code before it ends
        # itself. Read back before start like every other field.
        return [
            self.python_path,
            "-I",
            "-S",
            "-c",
            self.bootstrap_source,
            self.python_path,
            self.code_name,
            str(self.protocol),
            f"{self.payload_wait_s:g}",
            # A sandbox also ends itself at the end of its lifetime.
            *([str(self.expires_at)] if self.protocol == SANDBOX else []),
            # A warm box of an image that preloads: the modules, comma-separated.
            *([",".join(self.preload)] if self.preload else []),
        ]

    def labels(self) -> dict[str, str]:
        return {
            LABEL_MANAGED: "1",
            LABEL_RUN_ID: self.run_id,
            LABEL_OWNER: self.owner,
            LABEL_EXPIRES_AT: str(self.expires_at),
            LABEL_VERSION: self.pybox_version,
            **({LABEL_SANDBOX: self.sandbox_store} if self.protocol == SANDBOX else {}),
        }

    def tmpfs(self) -> dict[str, str]:
        size = self.limits.writable_bytes
        return {
            PYBOX_ROOT: f"{TMPFS_FLAGS},size={size},uid={self.uid},gid={self.uid},mode=0755",
            TMP_DIR: f"{TMPFS_FLAGS},size={size},mode=1777",
        }


def _config(name: str, expected: Any, why: str, check: Check = Check.EQUAL) -> Requirement:
    return Requirement(("Config", name), expected, why, check, create_path=(name,))


def _host(
    name: str,
    expected: Any,
    why: str,
    check: Check = Check.EQUAL,
    view: Callable[[Any], Any] | None = None,
) -> Requirement:
    return Requirement(
        ("HostConfig", name), expected, why, check, create_path=("HostConfig", name), view=view
    )


def _host_absent(name: str, why: str) -> Requirement:
    """Explicitly set empty on create, and must read back empty."""
    return _host(name, [], why, Check.EMPTY)


# The build box's table (build_posture.py) is written with the same helpers.
config_field = _config
host_field = _host
host_absent = _host_absent


def requirements(spec: BoxSpec) -> tuple[Requirement, ...]:
    """The whole posture of a box. The create body and the check derive from it."""
    from pybox._core.egress_posture import network_requirements  # it builds on this module

    limits = spec.limits
    return (
        # What runs, as whom, where.
        Requirement(("Image",), spec.image_id, "the recorded image, by ID", create_path=("Image",)),
        _config("User", spec.user, "a non-root user of the box's own"),
        _config("Entrypoint", spec.entrypoint(), "pybox's bootstrap holds PID 1"),
        _config("Cmd", [], "nothing from the image runs", Check.EMPTY),
        _config("Env", spec.environment(), "only pybox's environment", Check.INCLUDES),
        _config(
            "WorkingDir", PYBOX_ROOT, "the tmpfs root (the engine would create a subfolder as root)"
        ),
        _config("Hostname", BOX_HOSTNAME, "not the host's name"),
        _config("Domainname", "", "no domain", Check.EMPTY),
        _config("Labels", spec.labels(), "leftovers can always be found", Check.INCLUDES),
        _config("Healthcheck", {"Test": ["NONE"]}, "nothing else execs inside the box"),
        _config("Tty", False, "plain pipes", Check.EMPTY),
        _config("OpenStdin", True, "code and inputs arrive on stdin, not by mount"),
        _config(
            "StdinOnce",
            spec.protocol != SANDBOX,
            "a sandbox's stdin outlives pybox's connection"
            if spec.protocol == SANDBOX
            else "stdin closes with pybox's connection",
        ),
        _config("AttachStdin", True, "code and inputs arrive on stdin"),
        _config("AttachStdout", True, "output is relayed by the bootstrap"),
        _config("AttachStderr", True, "bootstrap diagnostics"),
        _config("ExposedPorts", {}, "no ports", Check.EMPTY),
        _config("Volumes", {}, "no image volumes", Check.EMPTY),
        # Network: none at all, unless the box's egress mode says otherwise.
        *network_requirements(spec.egress),
        _host("PortBindings", {}, "no published ports", Check.EMPTY),
        _host("PublishAllPorts", False, "no published ports", Check.EMPTY),
        _host_absent("Links", "no links to other containers"),
        # Filesystem: read-only root, capped tmpfs only, nothing from the host.
        _host("ReadonlyRootfs", True, "read-only root filesystem"),
        _host("Tmpfs", spec.tmpfs(), "the only writable places, size-capped"),
        _host("ShmSize", limits.writable_bytes, "/dev/shm is capped like the others"),
        _host_absent("Binds", "no host path"),
        _host_absent("Mounts", "no host path, no volume"),
        _host_absent("VolumesFrom", "no volumes of other containers"),
        Requirement(("Mounts",), [], "no host path, no volume, no engine socket", Check.EMPTY),
        # Privilege.
        _host("Privileged", False, "not privileged", Check.EMPTY),
        _host("CapDrop", ["ALL"], "every capability dropped"),
        _host_absent("CapAdd", "no capability added"),
        *confinement_requirements(spec.confinement),
        _host_absent("Devices", "no devices"),
        _host_absent("DeviceRequests", "no devices"),
        _host_absent("DeviceCgroupRules", "no device rules"),
        _host_absent("GroupAdd", "no extra groups"),
        _host("Sysctls", {}, "no sysctls", Check.EMPTY),
        _host("UsernsMode", "", "the engine's user namespace setting", Check.EMPTY),
        _host("PidMode", "", "a private process namespace", Check.EMPTY),
        _host("IpcMode", "private", "private IPC"),
        _host("UTSMode", "", "a private hostname", Check.EMPTY),
        _host("CgroupnsMode", "private", "a private cgroup namespace"),
        _host("CgroupParent", "", "the engine's cgroup", Check.EMPTY),
        _host("Init", False, "pybox's bootstrap is init; no host binary mounted", Check.EMPTY),
        _host("Runtime", spec.runtime, f"the {spec.isolation.lane} runtime"),
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
        # Limits.
        _host("Memory", limits.memory_bytes, "memory cap"),
        _host("MemorySwap", limits.memory_bytes, "swap equal to memory: no swap escape"),
        _host("OomKillDisable", False, "the kernel may end a box over its memory", Check.EMPTY),
        _host("NanoCpus", round(limits.cpus * 1e9), "CPU cap"),
        _host(
            "PidsLimit",
            engine_pids_limit(spec.isolation.lane, limits),
            "processes cap (under gVisor: the sandbox's host threads)",
        ),
        _host(
            "Ulimits",
            ulimits(spec.isolation.lane, limits),
            "open files cap; no core dumps (under gVisor: the processes cap, nproc)",
        ),
        _host("OomScoreAdj", 0, "no change to OOM priority", Check.EMPTY),
        # Lifecycle and logs.
        _host("LogConfig", {"Type": "none", "Config": {}}, "the engine keeps no logs"),
        _host("AutoRemove", False, "pybox removes the box and confirms it", Check.EMPTY),
        _host("RestartPolicy", {"Name": "no"}, "never restarted", Check.INCLUDES),
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
        _host(
            "SecurityOpt",
            confinement.security_opt(),
            f"no-new-privileges; pybox's seccomp profile {confinement.seccomp_sha256}",
            view=security_opt_view,
        ),
        apparmor,
    )


def create_body(spec: BoxSpec) -> dict[str, Any]:
    """The engine's create body, built from `requirements()` only."""
    return body_from(requirements(spec))


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


def readback_requirements(spec: BoxSpec) -> tuple[Requirement, ...]:
    """`requirements(spec)` as the spec's engine shows them (Podman: posture_podman)."""
    from pybox._core.posture_podman import podman_requirements

    readers: dict[str, Callable[[BoxSpec, tuple[Requirement, ...]], tuple[Requirement, ...]]]
    readers = {"podman": podman_requirements}
    reader = readers.get(spec.engine)
    table = requirements(spec)
    return table if reader is None else reader(spec, table)


def verify(spec: BoxSpec, inspected: Mapping[str, Any]) -> PostureReport:
    """Compare the engine's view of a created box with the posture it must have."""
    return check_requirements(readback_requirements(spec), inspected)


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
