"""How each limit is applied in each lane: what the engine gets, what the program
gets inside, and who enforces it (pure). The posture takes the engine's values
from here and the receipt says how each limit was applied.

Under runc the engine's cgroup holds the program's own processes, so each cap is
the program's. Under gVisor the cgroup holds the sandbox: gVisor's Sentry, its
Gofer and (on the ptrace platform) a stub process per address space, plus the
program's memory. The measurements behind the numbers (runsc 2022-12-19, ptrace
platform, two CPUs; docs/isolation.md):

- an idle sandbox uses 42 to 46 host threads; a processes cap below about 44
  kills it before the program starts (the engine's start fails, or the program
  exits with code 2 when the Go runtime cannot make a thread);
- each process inside adds about 5.4 host threads and 3.5 MiB of host memory
  (10 processes: 96 threads, 100: 583); a thread inside adds about none;
- the Sentry enforces RLIMIT_NPROC for the box's user (the program's processes
  and threads inside), RLIMIT_NOFILE and the tmpfs sizes itself.

So the processes cap goes to the program as RLIMIT_NPROC, enforced by gVisor,
and the engine gets a larger host-thread backstop derived from it. Memory and
CPU caps go to the engine unchanged: they hold the whole sandbox, gVisor's own
share included, so the host never gives a box more than the operator allowed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pybox._core.limits import MIB, Limits
from pybox._core.runtimes import GVISOR, RuntimeChoice

# The engine's processes cap under gVisor: the sandbox's own host threads, then
# room for every process the program may have inside.
GVISOR_HOST_THREADS_BASE = 64
GVISOR_HOST_THREADS_PER_PROCESS = 10
# Measured host memory of gVisor itself, for the receipt's words only.
GVISOR_IDLE_MEMORY_MIB = 17
GVISOR_MEMORY_PER_PROCESS_MIB = 3.5

# How the kernel counters sampled from outside read, per lane.
KERNEL_SCOPE_BOX = "box"
KERNEL_SCOPE_GVISOR = "gvisor_sandbox"


@dataclass(frozen=True)
class AppliedLimit:
    """One limit in one lane: the engine's value, what the program gets, who enforces it."""

    limit: str
    engine: str
    inside: str
    enforced_by: str


def engine_pids_limit(lane: str, limits: Limits) -> int:
    if lane == GVISOR:
        return GVISOR_HOST_THREADS_BASE + GVISOR_HOST_THREADS_PER_PROCESS * limits.pids
    return limits.pids


def ulimits(lane: str, limits: Limits) -> list[dict[str, Any]]:
    """The engine's Ulimits: open files and no core dumps; under gVisor also the
    processes cap, which the Sentry enforces as RLIMIT_NPROC."""
    table: list[dict[str, Any]] = [
        {"Name": "nofile", "Soft": limits.open_files, "Hard": limits.open_files},
        {"Name": "core", "Soft": 0, "Hard": 0},
    ]
    if lane == GVISOR:
        table.append({"Name": "nproc", "Soft": limits.pids, "Hard": limits.pids})
    return table


def kernel_scope(lane: str) -> str:
    return KERNEL_SCOPE_GVISOR if lane == GVISOR else KERNEL_SCOPE_BOX


def applied_limits(lane: str, limits: Limits) -> tuple[AppliedLimit, ...]:
    """Every limit of a run, as applied in `lane` (the receipt's words)."""
    memory = f"{limits.memory_bytes // MIB} MiB"
    cpus = f"{limits.cpus:g} CPUs"
    tmpfs = f"{limits.writable_bytes // MIB} MiB"
    pybox = (
        AppliedLimit(
            "timeout_s",
            "none (pybox's own clock)",
            f"{limits.timeout_s:g} s of wall-clock time from the code's arrival",
            "pybox: it kills and removes the box at the deadline",
        ),
        AppliedLimit(
            "output_bytes",
            "none (the engine keeps no logs)",
            f"{limits.output_bytes} bytes per stream kept (head and tail)",
            "pybox, as it relays the output",
        ),
    )
    if lane != GVISOR:
        return (
            AppliedLimit(
                "memory_bytes",
                f"Memory and MemorySwap {limits.memory_bytes} ({memory})",
                f"{memory} for the program's processes and its tmpfs files, no swap",
                "the host kernel (memory cgroup; the OOM killer ends the box)",
            ),
            AppliedLimit(
                "cpus",
                f"NanoCpus {round(limits.cpus * 1e9)} ({cpus})",
                f"{cpus} of CPU time per period for the program's processes",
                "the host kernel (CFS quota)",
            ),
            AppliedLimit(
                "pids",
                f"PidsLimit {limits.pids}",
                f"{limits.pids} processes and threads, pybox's bootstrap included",
                "the host kernel (pids cgroup)",
            ),
            AppliedLimit(
                "open_files",
                f"Ulimits nofile {limits.open_files}",
                f"{limits.open_files} open files per process",
                "the host kernel (RLIMIT_NOFILE)",
            ),
            AppliedLimit(
                "writable_bytes",
                f"Tmpfs size={limits.writable_bytes} each, ShmSize {limits.writable_bytes}",
                f"{tmpfs} in each of /pybox, /tmp and /dev/shm (counted in memory too)",
                "the host kernel (tmpfs size)",
            ),
            *pybox,
        )
    engine_pids = engine_pids_limit(lane, limits)
    return (
        AppliedLimit(
            "memory_bytes",
            f"Memory and MemorySwap {limits.memory_bytes} ({memory}) for the whole sandbox",
            f"{memory} less gVisor's own memory (about {GVISOR_IDLE_MEMORY_MIB} MiB, plus "
            f"about {GVISOR_MEMORY_PER_PROCESS_MIB:g} MiB per process inside), no swap",
            "the host kernel (memory cgroup around the sandbox; the OOM killer ends it)",
        ),
        AppliedLimit(
            "cpus",
            f"NanoCpus {round(limits.cpus * 1e9)} ({cpus}) for the whole sandbox",
            f"{cpus} shared by the program and gVisor's Sentry, which runs its system calls",
            "the host kernel (CFS quota around the sandbox)",
        ),
        AppliedLimit(
            "pids",
            f"PidsLimit {engine_pids} host threads for the sandbox "
            f"({GVISOR_HOST_THREADS_BASE} for gVisor itself and "
            f"{GVISOR_HOST_THREADS_PER_PROCESS} per process inside), Ulimits nproc {limits.pids}",
            f"{limits.pids} processes and threads, pybox's bootstrap included",
            "gVisor's Sentry (RLIMIT_NPROC of the box's own user); the host's pids cgroup "
            "is the backstop",
        ),
        AppliedLimit(
            "open_files",
            f"Ulimits nofile {limits.open_files}",
            f"{limits.open_files} open files per process",
            "gVisor's Sentry (RLIMIT_NOFILE)",
        ),
        AppliedLimit(
            "writable_bytes",
            f"Tmpfs size={limits.writable_bytes} each, ShmSize {limits.writable_bytes}",
            f"{tmpfs} in each of /pybox, /tmp and /dev/shm (gVisor's memory: counted in "
            "the memory cap)",
            "gVisor's Sentry (its own tmpfs)",
        ),
        *pybox,
    )


@dataclass(frozen=True)
class IsolationFacts:
    """The receipt's `configured.isolation`: the lane, as sent and read back, and how
    each limit was applied in it."""

    lane: str
    engine_runtime: str
    engine_runtime_args: tuple[str, ...]
    chosen_by: str
    shares_host_kernel: bool
    system_calls: str
    limits_applied: tuple[AppliedLimit, ...]


def system_calls(choice: RuntimeChoice) -> str:
    """What handles the program's system calls, in words."""
    if choice.lane != GVISOR:
        return "the host kernel, filtered by pybox's seccomp profile"
    if "--oci-seccomp" in choice.engine_runtime_args:
        return (
            "gVisor's Sentry (a kernel in user space), which also loads pybox's seccomp "
            "profile (--oci-seccomp); only the Sentry, under gVisor's own seccomp filter, "
            "calls the host kernel"
        )
    return (
        "gVisor's Sentry (a kernel in user space); pybox's seccomp profile is sent and read "
        "back but runsc does not load it (no --oci-seccomp); only the Sentry, under "
        "gVisor's own seccomp filter, calls the host kernel"
    )


def isolation_facts(choice: RuntimeChoice, limits: Limits) -> IsolationFacts:
    return IsolationFacts(
        lane=choice.lane,
        engine_runtime=choice.engine_runtime,
        engine_runtime_args=choice.engine_runtime_args,
        chosen_by=choice.chosen_by,
        shares_host_kernel=choice.shares_host_kernel,
        system_calls=system_calls(choice),
        limits_applied=applied_limits(choice.lane, limits),
    )
