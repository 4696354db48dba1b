"""Measuring one call: its wall time and the CPU of this process, its children and the engine."""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from bench._values import Context, Sample

T = TypeVar("T")


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def find_daemon_pids() -> tuple[int, ...]:
    """dockerd and containerd, if this host can see them (it cannot for a remote engine)."""
    pids: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            comm = (entry / "comm").read_text().strip()
        except OSError:
            continue  # the process ended while we looked
        if comm in ("dockerd", "containerd"):
            pids.append(int(entry.name))
    return tuple(pids)


def process_cpu_s(pids: Sequence[int], *, reaped: bool = False) -> float | None:
    """CPU of these processes; with `reaped`, plus their children they waited for."""
    if not pids:
        return None
    ticks = 0
    try:
        for pid in pids:
            # Fields after the ")" that closes comm: utime, stime, cutime and cstime
            # are the 12th to 15th.
            stat = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
            ticks += sum(int(value) for value in stat[11 : 15 if reaped else 13])
    except OSError:
        return None
    return ticks / os.sysconf("SC_CLK_TCK")


# Where the engine puts its containers' cgroups with the cgroupfs driver. CPU is
# charged to every ancestor as it is used, so the parent keeps the CPU of
# containers that are gone.
CONTAINERS_CPU_FILES = (
    ("/sys/fs/cgroup/cpuacct/docker/cpuacct.usage", None, 1e-9),  # cgroup v1, ns
    ("/sys/fs/cgroup/docker/cpu.stat", "usage_usec", 1e-6),  # cgroup v2
)


def containers_cpu_s() -> float | None:
    """All containers' CPU so far (the engine's parent cgroup), if this host shows it."""
    for path, key, scale in CONTAINERS_CPU_FILES:
        try:
            text = Path(path).read_text()
        except OSError:
            continue
        if key is None:
            return int(text.strip()) * scale
        for line in text.splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value) * scale
    return None


def busy_cpu_s(stat_line: str | None = None) -> float:
    """The machine's busy CPU time so far: every /proc/stat column but idle and iowait.

    guest and guest_nice are already inside user and nice, so they are not added.
    """
    if stat_line is None:
        with open("/proc/stat") as stat:
            stat_line = stat.readline()
    fields = [int(value) for value in stat_line.split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def measure_call(ctx: Context, call: Callable[[], T]) -> tuple[Sample, T]:
    """Time `call` and charge it the CPU of this process, its children and the daemons."""
    daemon_before = process_cpu_s(ctx.daemon_pids)
    cpu_before = time.process_time() + children_cpu_s()
    start = time.perf_counter()
    outcome = call()
    wall = time.perf_counter() - start
    client_cpu = time.process_time() + children_cpu_s() - cpu_before
    daemon_after = process_cpu_s(ctx.daemon_pids)
    daemon = None if daemon_before is None or daemon_after is None else daemon_after - daemon_before
    return Sample(wall, client_cpu, daemon), outcome
