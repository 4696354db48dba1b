"""What a sealed box must be, in box words, and the one check of what was read back.

`BoxSpec` is neutral: it names no engine and no engine field. A run box
(`pybox._core.posture.RunBoxSpec.box`), a build or install box
(`pybox._core.build_posture.build_box`) and the egress proxy
(`pybox._core.egress.proxy_box`) each say what they are as one
`BoxSpec`; `seal_rules` is the posture table, written once for all of them.

A backend owns both of its translations (`SealTranslation`): the rules into
its create request, and its inspect answer, read against the rules, into
`BoxFacts`. `check(spec, facts)` compares them (through `Requirement`s: each a
field of the backend's answer, where it is set on create, where it is read
back and why); every mismatch ends the run
as a sandbox error, never a weaker box. The Docker translation is
`pybox._engine.docker_seal`, Podman's `pybox._engine.podman_seal` (Docker's,
with each of Podman's differences).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Protocol

from pybox._core.seccomp import Confinement

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
        return actual is _MISSING or _is_empty(requirement.shown(actual))
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


# The one flag set every writable place gets; `exec` only where a recipe says so.
NOSUID_NODEV = ("rw", "nosuid", "nodev")


@dataclass(frozen=True)
class Writable:
    """One writable place: a size-capped tmpfs, never exec-able unless stated."""

    path: str
    size_bytes: int
    mode: str
    exec_ok: bool = False
    # Owned by this uid (and its gid of the same number); None: root.
    uid: int | None = None

    def options(self) -> str:
        owner = () if self.uid is None else (f"uid={self.uid}", f"gid={self.uid}")
        flags = (*NOSUID_NODEV, "exec" if self.exec_ok else "noexec")
        return ",".join((*flags, f"size={self.size_bytes}", *owner, f"mode={self.mode}"))


@dataclass(frozen=True)
class Stdin:
    """How the box's standard streams are used: `attached` boxes get their code on
    stdin (`kept` open past the connection that carried it: a sandbox); others
    have no stdin at all."""

    attached: bool
    kept: bool = False


NO_STDIN = Stdin(attached=False)


@dataclass(frozen=True)
class BoxNetwork:
    """The box's network: `none` (an empty namespace) or one named network.
    `exclusive`: on that network and no other when read back."""

    name: str = "none"
    why: str = "an empty network namespace"
    exclusive: bool = False

    @property
    def disabled(self) -> bool:
        return self.name == "none"


@dataclass(frozen=True)
class LogPolicy:
    """What the engine keeps of the box's output: nothing, or a capped log."""

    kind: str = "none"
    options: tuple[tuple[str, str], ...] = ()
    why: str = "the engine keeps no logs"


@dataclass(frozen=True)
class BoxSpec:
    """What one sealed box must be, whatever makes it (a run, a build, the proxy)."""

    image: str
    user: str
    entrypoint: tuple[str, ...]
    env: tuple[str, ...]
    hostname: str
    labels: tuple[tuple[str, str], ...]
    confinement: Confinement
    # The engine's name of the lane's runtime (runc, runsc) and why that one.
    runtime: str
    memory_bytes: int
    nano_cpus: int
    pids: int
    # (name, soft, hard), the names as Linux's setrlimit resources, lower-case.
    ulimits: tuple[tuple[str, int, int], ...]
    writable: tuple[Writable, ...] = ()
    # /dev/shm's size (None: the engine's default, 64 MiB on Docker and Podman);
    # `no_shm`: no /dev/shm at all (an IPC namespace with nothing in it).
    shm_bytes: int | None = None
    no_shm: bool = False
    readonly_root: bool = True
    workdir: str | None = None
    stdin: Stdin = NO_STDIN
    network: BoxNetwork = field(default_factory=BoxNetwork)
    log: LogPolicy = field(default_factory=LogPolicy)
    # What the box is, in the words a mismatch shows ("the recorded image, by ID").
    image_why: str = "the recorded image, by ID"
    user_why: str = "a non-root user of the box's own"
    entrypoint_why: str = "pybox's bootstrap holds PID 1"
    runtime_why: str = "the expected runtime"
    writable_why: str = "the only writable places, size-capped"


@dataclass(frozen=True)
class Rule:
    """One fact about a sealed box, in box words: what it must be, and why."""

    fact: str
    expected: Any
    why: str
    check: Check = Check.EQUAL


def _stdin_rules(stdin: Stdin) -> tuple[Rule, ...]:
    if not stdin.attached:
        return (
            Rule("stdin.open", False, "no stdin", Check.EMPTY),
            Rule("stdin.once", False, "no stdin", Check.EMPTY),
            Rule("attach.stdin", False, "no stdin", Check.EMPTY),
            Rule("attach.stdout", False, "its output is not attached", Check.EMPTY),
            Rule("attach.stderr", False, "its output is not attached", Check.EMPTY),
        )
    return (
        Rule("stdin.open", True, "code and inputs arrive on stdin, not by mount"),
        Rule(
            "stdin.once",
            not stdin.kept,
            "a sandbox's stdin outlives pybox's connection"
            if stdin.kept
            else "stdin closes with pybox's connection",
        ),
        Rule("attach.stdin", True, "code and inputs arrive on stdin"),
        Rule("attach.stdout", True, "output is relayed by the bootstrap"),
        Rule("attach.stderr", True, "bootstrap diagnostics"),
    )


def _network_rules(network: BoxNetwork) -> tuple[Rule, ...]:
    rules = [
        Rule("network.disabled", network.disabled, "no network")
        if network.disabled
        else Rule("network.disabled", False, "on its own network", Check.EMPTY),
        Rule("network", network.name, network.why),
        Rule("network.hosts", (), "no host entries", Check.EMPTY),
        Rule(
            "network.resolvers",
            (),
            "no resolvers" if network.disabled else "the engine's resolver only",
            Check.EMPTY,
        ),
    ]
    if network.disabled:
        rules += [
            Rule("network.hosts_file", "", "no host-written /etc/hosts", Check.EMPTY),
            Rule("network.resolver_file", "", "no host resolver file", Check.EMPTY),
        ]
    if network.exclusive:
        rules.append(Rule("network.only", network.name, "on exactly one network, its own"))
    return tuple(rules)


def _writable_rules(box: BoxSpec) -> tuple[Rule, ...]:
    places = Rule(
        "writable",
        box.writable,
        box.writable_why,
        Check.EQUAL if box.writable else Check.EMPTY,
    )
    if box.no_shm:
        return (places, Rule("ipc", "none", "a private IPC namespace and no /dev/shm"))
    shm = (
        ()
        if box.shm_bytes is None
        else (Rule("shm_bytes", box.shm_bytes, "/dev/shm is capped like the others"),)
    )
    return (places, *shm, Rule("ipc", "private", "private IPC"))


def seal_rules(box: BoxSpec) -> tuple[Rule, ...]:
    """The whole posture of a sealed box: the one table every backend translates."""
    return (
        # What runs, as whom, where.
        Rule("image", box.image, box.image_why),
        Rule("user", box.user, box.user_why),
        Rule("entrypoint", box.entrypoint, box.entrypoint_why),
        Rule("command", (), "nothing from the image runs", Check.EMPTY),
        Rule("env", box.env, "only pybox's environment", Check.INCLUDES),
        *(
            ()
            if box.workdir is None
            else (Rule("workdir", box.workdir, "a place of pybox's choosing"),)
        ),
        Rule("hostname", box.hostname, "not the host's name"),
        Rule("domainname", "", "no domain", Check.EMPTY),
        Rule("labels", dict(box.labels), "leftovers can always be found", Check.INCLUDES),
        Rule("healthcheck", "none", "nothing else execs inside the box"),
        Rule("tty", False, "plain pipes", Check.EMPTY),
        *_stdin_rules(box.stdin),
        Rule("ports", (), "no ports", Check.EMPTY),
        Rule("image_volumes", (), "no image volumes", Check.EMPTY),
        # Network.
        *_network_rules(box.network),
        Rule("ports.published", (), "no published ports", Check.EMPTY),
        Rule("links", (), "no links to other containers", Check.EMPTY),
        # Filesystem: nothing from the host; the root read-only unless it is the product.
        Rule("readonly_root", True, "read-only root filesystem")
        if box.readonly_root
        else Rule("readonly_root", False, "the packages are installed into it", Check.EMPTY),
        *_writable_rules(box),
        Rule("host_paths", (), "no host path, no volume, no engine socket", Check.EMPTY),
        # No privilege.
        Rule("privileged", False, "not privileged", Check.EMPTY),
        Rule("capabilities", (), "every capability dropped"),
        Rule(
            "confinement",
            box.confinement,
            f"no-new-privileges; pybox's seccomp profile {box.confinement.seccomp_sha256}",
        ),
        Rule("devices", (), "no devices", Check.EMPTY),
        Rule("groups", (), "no extra groups", Check.EMPTY),
        Rule("sysctls", (), "no sysctls", Check.EMPTY),
        Rule("annotations", (), "no runtime annotations: none reconfigures it", Check.EMPTY),
        # Private namespaces, the kernel's files masked, the expected runtime.
        Rule("namespaces", "private", "private user, process, host name and cgroup namespaces"),
        Rule("cgroup_parent", "", "the engine's cgroup", Check.EMPTY),
        Rule("init", False, "pybox's own program is init; no host binary mounted", Check.EMPTY),
        Rule("runtime", box.runtime, box.runtime_why),
        Rule("masked_paths", REQUIRED_MASKED_PATHS, "kernel files masked", Check.INCLUDES),
        Rule(
            "readonly_paths", REQUIRED_READONLY_PATHS, "kernel settings read-only", Check.INCLUDES
        ),
        # Limits.
        Rule("memory_bytes", box.memory_bytes, "memory cap"),
        Rule("swap_bytes", box.memory_bytes, "swap equal to memory: no swap escape"),
        Rule("oom_kill_disabled", False, "the kernel may end a box over its memory", Check.EMPTY),
        Rule("nano_cpus", box.nano_cpus, "CPU cap"),
        Rule("pids", box.pids, "processes cap"),
        Rule("ulimits", box.ulimits, "open files cap; no core dumps"),
        Rule("oom_score_adj", 0, "no change to OOM priority", Check.EMPTY),
        # Lifecycle and logs.
        Rule("log", box.log, box.log.why),
        Rule("auto_remove", False, "pybox removes the box and confirms it", Check.EMPTY),
        Rule("restart", "no", "never restarted"),
    )


class SealTranslation(Protocol):
    """A backend's two translations of a sealed box (each backend owns its own)."""

    def requirements(self, spec: BoxSpec) -> tuple[Requirement, ...]:
        """`seal_rules(spec)`, each where this backend sets it and reads it back."""
        ...

    def create_request(self, spec: BoxSpec) -> dict[str, Any]:
        """The backend's create request for `spec`, built from its rules only."""
        ...

    def read_back_as(self, field: str) -> frozenset[str]:
        """The fields of this backend's answer that stand for Docker's `field`."""
        ...


@dataclass(frozen=True)
class BoxFacts:
    """What a backend read back about one box: its answer, read by its translation."""

    translation: SealTranslation
    answer: Mapping[str, Any]

    def values_of(self, field: str) -> tuple[Any, ...]:
        """What this backend's answer holds where it stands for Docker's `field`
        (Podman names the runtime under `Libpod.OCIRuntime`, its compatible
        answer always `oci`); a field the answer lacks is left out."""
        found = (
            _lookup(self.answer, tuple(path.split(".")))
            for path in sorted(self.translation.read_back_as(field))
        )
        return tuple(value for value in found if value is not _MISSING)


def check(spec: BoxSpec, facts: BoxFacts) -> PostureReport:
    """Every rule of `spec` against what was read back; the mismatches stop the run."""
    return check_requirements(facts.translation.requirements(spec), facts.answer)
