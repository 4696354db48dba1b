"""A run box: what one run's box is (`RunBoxSpec`), said as a sealed box.

`RunBoxSpec.box()` is the run box in box words (`pybox._core.seal.BoxSpec`):
the backend builds its create request from it, and the container the engine
actually made is checked against the same rules before it may start. A field
the engine dropped, changed or added (a mount, a capability, a network) is a
mismatch, and a mismatch ends the run as a sandbox error: never a weaker box.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from pybox._core.egress import NONE, PACKAGES, EgressPlan
from pybox._core.limits import Limits
from pybox._core.preload import check_modules
from pybox._core.runtime_limits import engine_pids_limit, ulimits
from pybox._core.runtimes import RUNC_CHOICE, RuntimeChoice
from pybox._core.seal import BoxNetwork, BoxSpec, LogPolicy, Stdin, Writable
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
class RunBoxSpec:
    """Everything that decides what one run's box is."""

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
    # The isolation lane: its engine runtime is read back.
    isolation: RuntimeChoice = RUNC_CHOICE
    image_env: tuple[tuple[str, str], ...] = field(default=())
    uid: int = BOX_UID  # runs draw one of their own: see BOX_UID_FIRST
    payload_wait_s: float = PAYLOAD_WAIT_S
    # The bootstrap protocol (1: one program; 2: programs one after another;
    # 3: a sandbox, which outlives the process that made it).
    protocol: int = ONE_PROGRAM
    # A sandbox's box: the tag of the store that records it (its label's value).
    sandbox_store: str = ""
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

    def writable(self) -> tuple[Writable, ...]:
        size = self.limits.writable_bytes
        return (
            Writable(PYBOX_ROOT, size, "0755", exec_ok=self.workspace_exec, uid=self.uid),
            Writable(TMP_DIR, size, "1777"),
        )

    def tmpfs(self) -> dict[str, str]:
        return {place.path: place.options() for place in self.writable()}

    def box(self) -> BoxSpec:
        """The run box in box words: the one posture every backend translates."""
        limits, lane = self.limits, self.isolation.lane
        network = (
            BoxNetwork()
            if self.egress.mode == NONE
            else BoxNetwork(
                self.egress.network,
                "its own internal network: only the egress proxy is on it"
                if self.egress.mode == PACKAGES
                else "its own bridge network (egress open, by the operator's leave)",
                exclusive=True,
            )
        )
        return BoxSpec(
            image=self.image_id,
            user=self.user,
            entrypoint=tuple(self.entrypoint()),
            env=tuple(self.environment()),
            hostname=BOX_HOSTNAME,
            labels=tuple(self.labels().items()),
            confinement=self.confinement,
            runtime=self.runtime,
            runtime_why=f"the {lane} runtime",
            memory_bytes=limits.memory_bytes,
            nano_cpus=round(limits.cpus * 1e9),
            pids=engine_pids_limit(lane, limits),
            ulimits=tuple((u["Name"], u["Soft"], u["Hard"]) for u in ulimits(lane, limits)),
            writable=self.writable(),
            writable_why="the only writable places, size-capped"
            + ("; /pybox exec-able (the image's recipe)" if self.workspace_exec else ", noexec"),
            shm_bytes=limits.writable_bytes,
            workdir=PYBOX_ROOT,
            stdin=Stdin(attached=True, kept=self.protocol == SANDBOX),
            network=network,
            log=LogPolicy(),
        )
