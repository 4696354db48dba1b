"""A box's kernel counters read inside pybox's VM, one `colima ssh` per sample."""

from __future__ import annotations

import re
import time
from collections.abc import Sequence

from pybox._adapters.cgroups import (
    CGROUP_ROOT,
    CgroupCounters,
    CgroupLocation,
    SamplerFactory,
    location_of,
    relative_candidates,
)
from pybox._adapters.colima.profile import Colima, last_lines
from pybox._core.errors import PlatformError
from pybox._core.receipt import KernelObserved, Unknown

VM_SAMPLE_GAP_S = 0.25  # each read is one `colima ssh` round trip
# A sample read blocks the run's watch loop, so it gets little time; after one
# failed read the sampler stops (the receipt says so) rather than stall again.
VM_SAMPLE_TIMEOUT_S = 2.0
CONTAINER_ID_RE = re.compile(r"[0-9a-f]{64}")


def read_command(paths: Sequence[str]) -> list[str]:
    """`grep` prints every line of every file prefixed by its path; missing files
    are skipped (`-s`). Paths come from constants and a checked container ID."""
    return ["grep", "-H", "-s", "^", *paths]


def parse_read(output: str, paths: Sequence[str]) -> dict[str, str]:
    """`path:line` lines -> path -> text."""
    found: dict[str, list[str]] = {}
    known = set(paths)
    for line in output.splitlines():
        path, sep, rest = line.partition(":")
        if sep and path in known:
            found.setdefault(path, []).append(rest)
    return {path: "\n".join(lines) + "\n" for path, lines in found.items()}


class VMCgroupSampler(CgroupCounters):
    """Reads a box's cgroup files inside the VM, one `colima ssh` per sample.

    Reads are rationed to one every `VM_SAMPLE_GAP_S` unless forced (as the box
    starts, as the program ends, before a kill), because each is a round trip.
    """

    def __init__(self, colima: Colima, location: CgroupLocation, gap_s: float) -> None:
        super().__init__(location, gap_s)
        self._colima = colima
        self._paths = {path: name for name, path in location.files.items()}
        self._last_read = 0.0
        self.failure: str | None = None

    def _read_values(self) -> dict[str, str]:
        self._last_read = time.monotonic()
        paths = list(self._paths)
        try:
            result = self._colima.run_in_vm(read_command(paths), timeout_s=VM_SAMPLE_TIMEOUT_S)
        except PlatformError as exc:
            self.failure = str(exc)
            return {}
        texts = parse_read(result.stdout, paths)
        if not texts and result.stderr.strip():
            # `grep -s` is silent about missing files: a message is from colima or ssh.
            self.failure = f"`colima ssh` failed (exit {result.returncode}): " + last_lines(
                result.stderr
            )
        return {self._paths[path]: text for path, text in texts.items()}

    def sample(self, *, force: bool = False) -> bool:
        if not force and not self.gone and time.monotonic() - self._last_read < self.interval_s:
            return True
        return super().sample()

    def observation(self) -> tuple[KernelObserved, list[Unknown]]:
        observed, unknown = super().observation()
        unknown.append(
            Unknown(
                "kernel counters between samples",
                f"read inside the VM over `colima ssh` about every {self.interval_s:g} s (and as "
                "the program ends); counters without a kernel peak file are highest samples",
            )
        )
        if self.failure:
            unknown.append(Unknown("some kernel samples", f"a read failed: {self.failure}"))
        return observed, unknown


def locate_in_vm(colima: Colima, container_id: str) -> CgroupLocation | None:
    """Find the box's cgroup inside the VM with one read of a probe file per layout."""
    if not CONTAINER_ID_RE.fullmatch(container_id):
        raise PlatformError(f"Refusing to look up an unexpected container ID {container_id!r}.")
    probes: dict[str, tuple[int, str]] = {}
    for relative in relative_candidates(container_id):
        probes[f"{CGROUP_ROOT}/{relative}/memory.max"] = (2, relative)
        probes[f"{CGROUP_ROOT}/memory/{relative}/memory.limit_in_bytes"] = (1, relative)
    result = colima.run_in_vm(read_command(list(probes)))
    answered = parse_read(result.stdout, list(probes))
    for path, (version, relative) in probes.items():
        if path in answered:
            return location_of(version, relative, CGROUP_ROOT)
    return None


def vm_sampler_factory(colima: Colima, gap_s: float = VM_SAMPLE_GAP_S) -> SamplerFactory:
    def factory(container_id: str) -> VMCgroupSampler | None:
        try:
            location = locate_in_vm(colima, container_id)
        except PlatformError:
            return None  # the run records the kernel counters as unknown
        return None if location is None else VMCgroupSampler(colima, location, gap_s)

    return factory
