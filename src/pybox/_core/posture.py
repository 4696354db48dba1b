"""The box's posture: every restriction, set in one place and read back.

`requirements()` is the single list of what a box must be. The engine create
body is built from it, and the container the engine actually made is compared
against the same list before it may start. A field the engine dropped, changed
or added (a mount, a capability, a network) is a mismatch, and a mismatch ends
the run as a sandbox error: never a weaker box.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pybox._core.egress import EgressPlan
from pybox._core.limits import Limits
from pybox._core.preload import check_modules
from pybox._core.readback import (
    Check,
    PostureReport,
    Requirement,
    body_from,
    check_requirements,
    config_field,
    host_absent,
    host_field,
    sealed_host_requirements,
)
from pybox._core.runtime_limits import engine_pids_limit, ulimits
from pybox._core.runtimes import RUNC_CHOICE, RuntimeChoice
from pybox._core.seccomp import Confinement
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
TMPFS_FLAGS = "rw,nosuid,nodev,noexec"
# The workspace tmpfs (/pybox) of an environment whose recipe says
# `workspace_exec = true` (compiled toolchains: go test, cargo test run what they
# build there). Still nosuid and nodev; /tmp and /dev/shm stay noexec.
WORKSPACE_EXEC_FLAGS = "rw,nosuid,nodev,exec"


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
    # The workspace tmpfs without noexec: only from the image's recipe (the
    # record's `workspace_exec`, tied to the image by its recipe hash), never
    # from a request. Part of HostConfig.Tmpfs, so read back like the rest.
    workspace_exec: bool = False

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

    @property
    def executable_paths(self) -> tuple[str, ...]:
        """The writable places mounted without noexec (the receipt says them)."""
        return (PYBOX_ROOT,) if self.workspace_exec else ()

    def tmpfs(self) -> dict[str, str]:
        size = self.limits.writable_bytes
        workspace = WORKSPACE_EXEC_FLAGS if self.workspace_exec else TMPFS_FLAGS
        return {
            PYBOX_ROOT: f"{workspace},size={size},uid={self.uid},gid={self.uid},mode=0755",
            TMP_DIR: f"{TMPFS_FLAGS},size={size},mode=1777",
        }


def requirements(spec: BoxSpec) -> tuple[Requirement, ...]:
    """The whole posture of a box. The create body and the check derive from it."""
    from pybox._core.egress_posture import network_requirements  # it builds on this module

    limits = spec.limits
    return (
        # What runs, as whom, where.
        Requirement(("Image",), spec.image_id, "the recorded image, by ID", create_path=("Image",)),
        config_field("User", spec.user, "a non-root user of the box's own"),
        config_field("Entrypoint", spec.entrypoint(), "pybox's bootstrap holds PID 1"),
        config_field("Cmd", [], "nothing from the image runs", Check.EMPTY),
        config_field("Env", spec.environment(), "only pybox's environment", Check.INCLUDES),
        config_field(
            "WorkingDir", PYBOX_ROOT, "the tmpfs root (the engine would create a subfolder as root)"
        ),
        config_field("Hostname", BOX_HOSTNAME, "not the host's name"),
        config_field("Domainname", "", "no domain", Check.EMPTY),
        config_field("Labels", spec.labels(), "leftovers can always be found", Check.INCLUDES),
        config_field("Healthcheck", {"Test": ["NONE"]}, "nothing else execs inside the box"),
        config_field("Tty", False, "plain pipes", Check.EMPTY),
        config_field("OpenStdin", True, "code and inputs arrive on stdin, not by mount"),
        config_field(
            "StdinOnce",
            spec.protocol != SANDBOX,
            "a sandbox's stdin outlives pybox's connection"
            if spec.protocol == SANDBOX
            else "stdin closes with pybox's connection",
        ),
        config_field("AttachStdin", True, "code and inputs arrive on stdin"),
        config_field("AttachStdout", True, "output is relayed by the bootstrap"),
        config_field("AttachStderr", True, "bootstrap diagnostics"),
        config_field("ExposedPorts", {}, "no ports", Check.EMPTY),
        config_field("Volumes", {}, "no image volumes", Check.EMPTY),
        # Network: none at all, unless the box's egress mode says otherwise.
        *network_requirements(spec.egress),
        host_field("PortBindings", {}, "no published ports", Check.EMPTY),
        host_field("PublishAllPorts", False, "no published ports", Check.EMPTY),
        host_absent("Links", "no links to other containers"),
        # Filesystem: read-only root, capped tmpfs only, nothing from the host.
        host_field("ReadonlyRootfs", True, "read-only root filesystem"),
        host_field(
            "Tmpfs",
            spec.tmpfs(),
            "the only writable places, size-capped"
            + ("; /pybox exec-able (the image's recipe)" if spec.workspace_exec else ", noexec"),
        ),
        host_field("ShmSize", limits.writable_bytes, "/dev/shm is capped like the others"),
        *sealed_host_requirements(
            spec.confinement, spec.runtime, f"the {spec.isolation.lane} runtime"
        ),
        # Limits.
        host_field("Memory", limits.memory_bytes, "memory cap"),
        host_field("MemorySwap", limits.memory_bytes, "swap equal to memory: no swap escape"),
        host_field(
            "OomKillDisable", False, "the kernel may end a box over its memory", Check.EMPTY
        ),
        host_field("NanoCpus", round(limits.cpus * 1e9), "CPU cap"),
        host_field(
            "PidsLimit",
            engine_pids_limit(spec.isolation.lane, limits),
            "processes cap (under gVisor: the sandbox's host threads)",
        ),
        host_field(
            "Ulimits",
            ulimits(spec.isolation.lane, limits),
            "open files cap; no core dumps (under gVisor: the processes cap, nproc)",
        ),
        host_field("OomScoreAdj", 0, "no change to OOM priority", Check.EMPTY),
        # Lifecycle and logs.
        host_field("LogConfig", {"Type": "none", "Config": {}}, "the engine keeps no logs"),
        host_field("AutoRemove", False, "pybox removes the box and confirms it", Check.EMPTY),
        host_field("RestartPolicy", {"Name": "no"}, "never restarted", Check.INCLUDES),
    )


def create_body(spec: BoxSpec) -> dict[str, Any]:
    """The engine's create body, built from `requirements()` only."""
    return body_from(requirements(spec))


def readback_requirements(spec: BoxSpec) -> tuple[Requirement, ...]:
    """`requirements(spec)` as the spec's engine shows them (Podman: posture_podman)."""
    table = requirements(spec)
    if spec.engine != "podman":
        return table
    # Imported here: a Docker engine's runs do not pay for Podman's views.
    from pybox._core.posture_podman import podman_requirements

    return podman_requirements(spec, table)


def verify(spec: BoxSpec, inspected: Mapping[str, Any]) -> PostureReport:
    """Compare the engine's view of a created box with the posture it must have."""
    return check_requirements(readback_requirements(spec), inspected)
