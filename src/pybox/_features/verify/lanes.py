"""How `pybox verify` judges a case in each lane: lanes as objects (`LaneTerms`),
and gVisor's own terms (docs/isolation.md).

A judge asks `lane_terms(receipt)` for the run's lane and reads what differs
from it (how far past the memory cap a dying box may be charged, the calls and
devices of the lane's own kernel, what a write to the read-only root answers,
whose view of the program's confinement is the evidence); no judge names a lane.

Under gVisor the program's system calls go to the Sentry, a kernel in user
space: what the program sees of itself (`/proc/self/status`, seccomp mode 0, the
calls the Sentry implements) is the Sentry's answer, not the host kernel's. The
evidence that matters is the host's: which processes sit in the box's cgroup and
under what confinement. `judge_host_confinement` requires that every one is
gVisor's own (Gofer, Sentry, ptrace stubs: none runs the program on the host
kernel directly) and runs under a seccomp filter with no_new_privs, as the host
kernel reports in `/proc/<pid>/status`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pybox._adapters.box_processes import (
    ROLE_GOFER,
    ROLE_OTHER,
    ROLE_SENTRY,
    ROLE_STUB,
    HostProcess,
)
from pybox._core.receipt import Receipt
from pybox._core.runtimes import GVISOR, RUNC
from pybox._features.verify.verdict import Verdict

# Under gVisor these succeed inside the Sentry, which implements them itself: user
# and mount namespaces of its own (no host namespace is made), a device node on its
# own tmpfs (reading it fails: the Sentry has no such device). Judged contained
# only with the host's view of the box (every process gVisor's, filtered) and the
# node's read failing; setuid, mount, chroot, ptrace, raw sockets and the /proc
# and /sys writes must still fail (docs/isolation.md).
GVISOR_SENTRY_ONLY = frozenset(
    {
        "unshare(CLONE_NEWUSER)",
        "unshare(CLONE_NEWNS)",
        "unshare -U true",
        "unshare -r true",
        "mknod /tmp/mem",
    }
)
# The Sentry's own devices in its /dev: FUSE (10, 229) and tun (10, 200), which
# with --network=none has no network to reach.
GVISOR_DEVICES = frozenset({(10, 229), (10, 200)})
# The kernel's forced charge: a task being OOM-killed may charge past the memory
# limit (measured under gVisor: the peak one page over, 67112960 for 67108864).
PAGE_BYTES = 4096


def counts(values: Iterable[object]) -> str:
    """`EPERM x3, ENOSYS x1`: how often each answer came."""
    tally = Counter(str(value) for value in values)
    return ", ".join(f"{name} x{count}" for name, count in sorted(tally.items()))


@dataclass(frozen=True)
class LaneTerms:
    """What the judges read differently in one lane."""

    lane: str
    # The program's view of itself (seccomp mode, capabilities, processes) is the
    # host kernel's. Otherwise (gVisor) it is a user-space kernel's, and the
    # evidence is the host's view of the box's processes (`judge_host_confinement`).
    kernel_is_host: bool = True
    # How far past the memory cap the kernel may charge a box being OOM-killed.
    memory_over_bytes: int = 0
    # Privileged calls that succeed inside the lane's own kernel only, and its devices.
    own_kernel_calls: frozenset[str] = frozenset()
    own_kernel_devices: frozenset[tuple[int, int]] = frozenset()
    # What a write to the read-only root may answer, and the answer that must appear.
    root_write_errors: tuple[str, ...] = ("EROFS",)
    root_write_error_required: str | None = None
    # Which of the program's reports says / is read-only, and in what words.
    root_read_only_report: str = "root_read_only_flag"
    root_read_only_missing: str = "/ is not mounted read-only"
    root_read_only_words: str = "statvfs says read-only"
    # What the program's report leaves out in this lane, said beside its facts.
    caps_words: str = ""
    seccomp_words: str = ""
    # Whether the lane's kernel checks access to another process's /proc entries
    # (runc: yes; gVisor's Sentry opens PID 1's descriptors and environment to any
    # process of the box, docs/isolation.md "PID 1's descriptors under gVisor").
    guards_other_processes_proc: bool = True
    # Whether POSIX message queues can be listed, and so removed between a
    # sandbox's runs (gVisor mounts no mqueue filesystem).
    lists_posix_queues: bool = True


RUNC_TERMS = LaneTerms(RUNC)
GVISOR_TERMS = LaneTerms(
    GVISOR,
    kernel_is_host=False,
    memory_over_bytes=PAGE_BYTES,
    own_kernel_calls=GVISOR_SENTRY_ONLY,
    own_kernel_devices=GVISOR_DEVICES,
    # The Sentry checks permission before the read-only mount: EACCES where the box
    # user may not write anyway, EROFS where it may (at least one).
    root_write_errors=("EROFS", "EACCES"),
    root_write_error_required="EROFS",
    # The Sentry's statvfs gives no read-only flag; its mount table says `ro`.
    root_read_only_report="root_mount_read_only",
    root_read_only_missing="/ is not mounted ro in the mount table",
    root_read_only_words="the mount table says / is ro (the Sentry's statvfs has no flag)",
    caps_words=" (no CapAmb line in gVisor: zero with CapInh and CapPrm)",
    seccomp_words=" (the Sentry's view)",
    guards_other_processes_proc=False,
    lists_posix_queues=False,
)
LANE_TERMS = {terms.lane: terms for terms in (RUNC_TERMS, GVISOR_TERMS)}


def lane_terms(receipt: Receipt) -> LaneTerms:
    """The run's lane (the configured one, read back before start); runc when unsaid."""
    isolation = receipt.configured.isolation
    return RUNC_TERMS if isolation is None else LANE_TERMS.get(isolation.lane, RUNC_TERMS)


def judge_host_confinement(verdict: Verdict, processes: tuple[HostProcess, ...]) -> None:
    """Every host process of the box is gVisor's and under a seccomp filter."""
    if not verdict.check(
        bool(processes), "the host never saw the box's processes in its cgroup while it ran"
    ):
        return
    roles = Counter(process.role for process in processes)
    others = [f"{p.pid} {p.command!r}" for p in processes if p.role == ROLE_OTHER]
    verdict.check(not others, f"processes in the box's cgroup that are not gVisor's: {others}")
    verdict.check(roles[ROLE_SENTRY] == 1, f"{roles[ROLE_SENTRY]} Sentry processes, not 1")
    unfiltered = [f"{p.pid} {p.role} Seccomp {p.seccomp}" for p in processes if p.seccomp != "2"]
    verdict.check(not unfiltered, f"host processes without a seccomp filter: {unfiltered}")
    privileged = [f"{p.pid} {p.role}" for p in processes if p.no_new_privs != "1"]
    verdict.check(not privileged, f"host processes without no_new_privs: {privileged}")
    if not (others or unfiltered or privileged):
        verdict.saw(
            "host",
            f"the box's cgroup holds {len(processes)} host processes, all gVisor's "
            f"({roles[ROLE_GOFER]} Gofer, {roles[ROLE_SENTRY]} Sentry, {roles[ROLE_STUB]} "
            "ptrace stubs), every one under a seccomp filter (Seccomp 2) with no_new_privs: "
            "the program's calls reach the Sentry, and only the filtered Sentry reaches the "
            "host kernel",
        )


def judge_seccomp_in_gvisor(
    verdict: Verdict,
    report: dict[str, Any],
    attempts: dict[str, str],
    host: tuple[HostProcess, ...],
) -> None:
    """Under gVisor the calls go to the Sentry, which answers them itself (some it
    implements: io_uring_setup, unshare(0), syslog succeed there). What keeps them
    from the host kernel is that every host process of the box is gVisor's, under
    gVisor's seccomp filter: judged on the host's view."""
    judge_host_confinement(verdict, host)
    verdict.saw(
        "program",
        f"{report.get('arch')}; the Sentry's seccomp mode {report.get('seccomp')}; "
        f"{len(attempts)} calls answered by the Sentry ({counts(attempts.values())}): "
        + ", ".join(f"{name} {result}" for name, result in sorted(attempts.items())),
    )


# The Sentry's own file systems: made inside the sandbox, device numbers of the
# Sentry's own (they may equal the host's by chance: not compared).
SENTRY_FILESYSTEMS = frozenset({"proc", "sysfs", "tmpfs", "devpts", "mqueue", "cgroup"})


def contained_mount_in_gvisor(mount: Mapping[str, str], engine_points: Iterable[str]) -> bool:
    """A mount the Sentry shows is contained when it is the image's root or one of
    the engine's per-box files, served read-only by the Gofer over 9p (the Gofer
    serves only the OCI spec's mounts, which pybox read back), or a file system
    of the Sentry's own."""
    point, fstype = mount.get("mount_point"), mount.get("fstype")
    read_only = "ro" in mount.get("options", "").split(",")
    if fstype == "9p":
        return read_only and (point == "/" or point in set(engine_points))
    if point == "/":
        return False
    if fstype == "cgroup":
        return read_only
    return fstype in SENTRY_FILESYSTEMS
