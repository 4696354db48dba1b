"""Kernel counters of a running box, sampled from outside it (cgroup v1 and v2).

The files vanish when the box exits, so pybox opens them once the box has
started, reads them with `pread` while it runs (cheap: no path lookups), and
takes a last sample while the bootstrap waits for pybox's acknowledgement.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from pybox._core.receipt import KernelObserved, Unknown

CGROUP_ROOT = "/sys/fs/cgroup"
MAX_U64ISH = 1 << 62  # "no limit" in cgroup v1 files is a huge number


def _parse_int(text: str) -> int | None:
    text = text.strip()
    if text == "max":
        return None
    try:
        return int(text)
    except ValueError:
        return None


def _parse_keyed(text: str) -> dict[str, int]:
    values: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2:
            try:
                values[parts[0]] = int(parts[1])
            except ValueError:
                continue
    return values


@dataclass(frozen=True)
class CgroupLocation:
    version: int
    # counter name -> file path
    files: dict[str, str]


V1_FILES = {
    "memory_current": ("memory", "memory.usage_in_bytes"),
    "memory_peak": ("memory", "memory.max_usage_in_bytes"),
    "memory_limit": ("memory", "memory.limit_in_bytes"),
    "memory_failcnt": ("memory", "memory.failcnt"),
    # With swap equal to memory, the memory+swap limit is often the one that is hit.
    "memsw_failcnt": ("memory", "memory.memsw.failcnt"),
    "memory_oom": ("memory", "memory.oom_control"),
    "pids_current": ("pids", "pids.current"),
    # The kernel's own peak (Linux 6.1+, v1 too): pids.current also counts, for an
    # instant, a fork the cap then refuses, so a sample of it can read cap + 1.
    "pids_peak": ("pids", "pids.peak"),
    "pids_max": ("pids", "pids.max"),
    "pids_events": ("pids", "pids.events"),
    "cpu_usage_ns": ("cpuacct", "cpuacct.usage"),
    "cpu_stat": ("cpu", "cpu.stat"),
    "cpu_quota_us": ("cpu", "cpu.cfs_quota_us"),
    "cpu_period_us": ("cpu", "cpu.cfs_period_us"),
}
V2_FILES = {
    "memory_current": "memory.current",
    "memory_peak": "memory.peak",
    "memory_limit": "memory.max",
    "memory_events": "memory.events",
    "pids_current": "pids.current",
    "pids_peak": "pids.peak",
    "pids_max": "pids.max",
    "pids_events": "pids.events",
    "cpu_stat": "cpu.stat",
    "cpu_max": "cpu.max",
}


def cgroup_version(root: str = CGROUP_ROOT) -> int:
    return 2 if os.path.exists(os.path.join(root, "cgroup.controllers")) else 1


def _relative_candidates(container_id: str, cgroup_parent: str) -> list[str]:
    if cgroup_parent:
        return [
            f"{cgroup_parent.strip('/')}/{container_id}",
            f"{cgroup_parent.strip('/')}/docker-{container_id}.scope",
        ]
    return [f"docker/{container_id}", f"system.slice/docker-{container_id}.scope"]


def location_of(version: int, relative: str, root: str = CGROUP_ROOT) -> CgroupLocation:
    """The counters' files of the cgroup at `relative` under `root`."""
    if version == 2:
        base = os.path.join(root, relative)
        return CgroupLocation(2, {k: os.path.join(base, f) for k, f in V2_FILES.items()})
    return CgroupLocation(
        1, {k: os.path.join(root, ctl, relative, f) for k, (ctl, f) in V1_FILES.items()}
    )


def read_pids_current(location: CgroupLocation) -> int | None:
    """How many processes the cgroup holds now, as the kernel counts (None: unreadable)."""
    try:
        with open(location.files["pids_current"], encoding="ascii") as handle:
            return int(handle.read().strip())
    except (OSError, ValueError, KeyError):
        return None


def relative_candidates(container_id: str, cgroup_parent: str = "") -> list[str]:
    """Where the engine puts a box's cgroup (cgroupfs and systemd drivers)."""
    return _relative_candidates(container_id, cgroup_parent)


def locate(
    container_id: str, cgroup_parent: str = "", root: str = CGROUP_ROOT
) -> CgroupLocation | None:
    """Find the box's cgroup files under the engine's usual layouts."""
    version = cgroup_version(root)
    for relative in _relative_candidates(container_id, cgroup_parent):
        if version == 2:
            if os.path.isdir(os.path.join(root, relative)):
                return location_of(2, relative, root)
        elif os.path.isdir(os.path.join(root, "memory", relative)):
            return location_of(1, relative, root)
    return None


class Sampler(Protocol):
    """Kernel counters of one running box. `force` asks for a fresh read even
    where reads are rationed (the sample as the program ends matters most)."""

    samples: int

    def sample(self, *, force: bool = False) -> bool: ...

    def observation(self) -> tuple[KernelObserved, list[Unknown]]: ...

    def close(self) -> None: ...


class CgroupCounters:
    """Folds samples of a box's counter files into peaks and totals. Subclasses
    say how the files are read (`_read_values`: counter name -> file text)."""

    def __init__(self, location: CgroupLocation, interval_s: float) -> None:
        self.location = location
        self.interval_s = interval_s
        self.samples = 0
        self.gone = False
        self._last: dict[str, str] = {}
        self._memory_peak_sampled = 0
        self._pids_peak_sampled = 0

    def _read_values(self) -> dict[str, str]:
        raise NotImplementedError

    def sample(self, *, force: bool = False) -> bool:
        """Take one sample; False once the box's cgroup is gone."""
        if self.gone:
            return False
        values = self._read_values()
        if not values:
            self.gone = True
            return False
        self.samples += 1
        self._last.update(values)
        current = _parse_int(values.get("memory_current", ""))
        if current is not None:
            self._memory_peak_sampled = max(self._memory_peak_sampled, current)
        pids = _parse_int(values.get("pids_current", ""))
        if pids is not None:
            self._pids_peak_sampled = max(self._pids_peak_sampled, pids)
        return True

    def close(self) -> None:
        pass

    def observation(self) -> tuple[KernelObserved, list[Unknown]]:
        last = self._last
        unknown: list[Unknown] = []

        def number(name: str) -> int | None:
            return _parse_int(last[name]) if name in last else None

        memory_limit = number("memory_limit")
        if memory_limit is not None and memory_limit >= MAX_U64ISH:
            memory_limit = None
        kernel_peak = number("memory_peak")
        if kernel_peak is not None:
            memory_peak, memory_source = kernel_peak, "kernel peak counter"
        elif self._memory_peak_sampled:
            memory_peak, memory_source = self._memory_peak_sampled, "highest sample"
            unknown.append(
                Unknown(
                    "exact memory peak", "this kernel has no peak counter; sampled maximum shown"
                )
            )
        else:
            memory_peak, memory_source = None, None

        pids_peak = number("pids_peak")
        pids_source: str | None = "kernel peak counter" if pids_peak is not None else None
        if pids_peak is None and self.samples:
            pids_peak, pids_source = self._pids_peak_sampled, "highest sample"
        pids_events = _parse_keyed(last.get("pids_events", ""))

        if self.location.version == 1:
            oom = _parse_keyed(last.get("memory_oom", "")).get("oom_kill")
            hits = [n for n in (number("memory_failcnt"), number("memsw_failcnt")) if n is not None]
            memory_hits = max(hits) if hits else None
            usage_ns = number("cpu_usage_ns")
            cpu_usage_s = None if usage_ns is None else usage_ns / 1e9
            stat = _parse_keyed(last.get("cpu_stat", ""))
            throttled_s = stat["throttled_time"] / 1e9 if "throttled_time" in stat else None
            quota, period = number("cpu_quota_us"), number("cpu_period_us")
            cpu_quota = quota / period if quota and period and quota > 0 else None
        else:
            events = _parse_keyed(last.get("memory_events", ""))
            oom = events.get("oom_kill")
            memory_hits = events.get("max")
            stat = _parse_keyed(last.get("cpu_stat", ""))
            cpu_usage_s = stat["usage_usec"] / 1e6 if "usage_usec" in stat else None
            throttled_s = stat["throttled_usec"] / 1e6 if "throttled_usec" in stat else None
            cpu_quota = None
            parts = last.get("cpu_max", "").split()
            if len(parts) == 2 and parts[0] != "max":
                try:
                    cpu_quota = int(parts[0]) / int(parts[1])
                except (ValueError, ZeroDivisionError):
                    cpu_quota = None

        if oom is None and self.samples:
            unknown.append(
                Unknown("OOM-kill count", "this kernel does not expose an oom_kill counter")
            )
        observed = KernelObserved(
            cgroup_version=self.location.version,
            samples=self.samples,
            sample_interval_s=self.interval_s,
            memory_limit_bytes=memory_limit,
            memory_peak_bytes=memory_peak,
            memory_peak_source=memory_source,
            memory_limit_hits=memory_hits,
            oom_kill_count=oom,
            pids_limit=number("pids_max"),
            pids_peak=pids_peak,
            pids_peak_source=pids_source,
            pids_limit_hits=pids_events.get("max"),
            cpu_quota_cpus=cpu_quota,
            cpu_usage_s=cpu_usage_s,
            cpu_periods=stat.get("nr_periods"),
            cpu_throttled_periods=stat.get("nr_throttled"),
            cpu_throttled_s=throttled_s,
        )
        return observed, unknown


class CgroupSampler(CgroupCounters):
    """Reads this machine's cgroup files, kept open, with `pread` (no path lookups)."""

    def __init__(self, location: CgroupLocation, interval_s: float) -> None:
        super().__init__(location, interval_s)
        self._fds: dict[str, int] = {}
        for name, path in location.files.items():
            try:
                self._fds[name] = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                continue  # not every kernel has every file (memory.peak, pids.peak)

    def _read(self, name: str) -> str | None:
        fd = self._fds.get(name)
        if fd is None:
            return None
        try:
            return os.pread(fd, 4096, 0).decode("ascii", "replace")
        except OSError:
            return None

    def _read_values(self) -> dict[str, str]:
        values: dict[str, str] = {}
        for name in self._fds:
            text = self._read(name)
            if text is None:
                continue
            values[name] = text
        return values

    def close(self) -> None:
        for fd in self._fds.values():
            try:
                os.close(fd)
            except OSError:
                pass
        self._fds.clear()


def empty_observation(interval_s: float) -> KernelObserved:
    return KernelObserved(
        cgroup_version=None,
        samples=0,
        sample_interval_s=interval_s,
        memory_limit_bytes=None,
        memory_peak_bytes=None,
        memory_peak_source=None,
        memory_limit_hits=None,
        oom_kill_count=None,
        pids_limit=None,
        pids_peak=None,
        pids_peak_source=None,
        pids_limit_hits=None,
        cpu_quota_cpus=None,
        cpu_usage_s=None,
        cpu_periods=None,
        cpu_throttled_periods=None,
        cpu_throttled_s=None,
    )


# Opens a sampler for a started box, by container ID (None: its cgroup is not found).
SamplerFactory = Callable[[str], "Sampler | None"]


def local_sampler_factory(interval_s: float, root: str = CGROUP_ROOT) -> SamplerFactory:
    """Open samplers on this machine's cgroup filesystem. Boxes have no custom
    cgroup parent (the posture requires the engine's own)."""

    def factory(container_id: str) -> CgroupSampler | None:
        location = locate(container_id, "", root)
        return None if location is None else CgroupSampler(location, interval_s)

    return factory


class CgroupNamer(Protocol):
    """An engine that can say where a started box's cgroup is (Podman can)."""

    def cgroup_path(self, container_id: str) -> str | None: ...


def locate_reported(relative: str, root: str = CGROUP_ROOT) -> CgroupLocation | None:
    """The counters of the cgroup an engine reported (`/libpod_parent/libpod-<id>`)."""
    relative = relative.strip("/")
    if not relative or ".." in relative.split("/"):
        return None
    version = cgroup_version(root)
    base = root if version == 2 else os.path.join(root, "memory")
    if not os.path.isdir(os.path.join(base, relative)):
        return None
    return location_of(version, relative, root)


def engine_path_sampler_factory(
    interval_s: float,
    engine: Callable[[], CgroupNamer | None],
    root: str = CGROUP_ROOT,
) -> SamplerFactory:
    """Open samplers where the engine says the box's cgroup is; when it names none
    (Docker's answers do not), under Docker's usual layouts."""

    def factory(container_id: str) -> CgroupSampler | None:
        namer = engine()
        reported = namer.cgroup_path(container_id) if namer is not None else None
        if reported is not None:
            location = locate_reported(reported, root)
        else:
            location = locate(container_id, "", root)
        return None if location is None else CgroupSampler(location, interval_s)

    return factory
