"""The receipt: what happened in a run and how pybox knows (pure values).

Sections keep kinds of fact apart:
- `configured`: what was asked for and the effective settings;
- `observed_by_engine`: what the container engine reported;
- `observed_by_kernel`: cgroup counters sampled from outside the box;
- `observed_by_pybox`: pybox's own clock and actions (the deadline kill);
- `reported_by_program`: what came from inside the box (untrusted);
- `unknown`: each fact pybox could not establish, with the reason.

The JSON shape is versioned (`receipt_version`) and documented in
docs/receipt.md with a JSON Schema; a contract test pins the key set. The human
summary of a receipt is in `receipt_summary`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import Enum, StrEnum
from typing import Any

from pybox._core.boxquote import NOT_IN_JSON, BoxQuote
from pybox._core.egress import NONE, EgressObserved
from pybox._core.runtime_limits import KERNEL_SCOPE_BOX, IsolationFacts

RECEIPT_VERSION = 2
# The `unknown` fact that counts the skipped files the receipt does not list.
OTHER_SKIPPED_FACT = "the other skipped files"


class Status(StrEnum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    OUT_OF_MEMORY = "out_of_memory"
    STOPPED = "stopped"
    SANDBOX_ERROR = "sandbox_error"


@dataclass(frozen=True)
class Cause:
    """Why the run ended. `known` is False when the evidence does not say."""

    summary: str
    known: bool
    evidence: tuple[str, ...] = ()
    # The part of `summary` that came from inside the box, if any (not in the JSON).
    quote: BoxQuote | None = field(default=None, compare=False, metadata=NOT_IN_JSON)


@dataclass(frozen=True)
class FileDigest:
    name: str
    size_bytes: int
    sha256: str


@dataclass(frozen=True)
class ReturnedFileDigest:
    """A returned file: its path relative to the output folder."""

    path: str
    size_bytes: int
    sha256: str


@dataclass(frozen=True)
class ImageFacts:
    name: str
    id: str
    recipe_hash: str | None
    digest: str | None = None


@dataclass(frozen=True)
class EngineFacts:
    endpoint: str
    api_version: str
    server_version: str
    # Which engine it is ("docker", "podman"), from its own answers.
    name: str = "docker"


@dataclass(frozen=True)
class ConfinementFacts:
    """The system-call and AppArmor confinement a box was required to have.

    Both are read back from the engine before start (see the posture).
    """

    seccomp_profile: str  # `pybox`: the profile shipped in the package
    seccomp_profile_sha256: str  # of its canonical JSON, as sent and read back
    apparmor_profile: str | None  # None: the engine's host has no AppArmor
    apparmor: str  # why that is the requirement, in words


@dataclass(frozen=True)
class LibraryFact:
    """A library an install box installed: its name and version as pip reported them,
    and the sha256 of the wheel pip checked (None: the index gave no hash)."""

    name: str
    version: str
    wheel_sha256: str | None


@dataclass(frozen=True)
class ProgramFacts:
    """Whose program ran, and the argv its interpreter was started with.

    `kind` is `caller` (the caller's code: `python NAME`, site and all),
    `pybox_files` (pybox's own file program) or `pybox_exec` (pybox's wrapper that
    replaced itself with the caller's command); pybox's own start isolated
    (`python -I -S NAME`), so nothing the caller's code left in the workspace
    runs in them. What any of them printed is still the box's word."""

    kind: str
    interpreter_argv: tuple[str, ...]


@dataclass(frozen=True)
class Configured:
    pybox_version: str
    engine: EngineFacts
    runtime: str
    image: ImageFacts
    limits: dict[str, float | int]
    network: str
    user: str
    confinement: ConfinementFacts
    writable_paths: tuple[str, ...]
    input_dir: str
    output_dir: str
    code: FileDigest
    inputs: tuple[FileDigest, ...]
    collect_outputs: bool
    # A sandbox's run: the libraries installed for it (by an install box) just before.
    libraries: tuple[LibraryFact, ...] = ()
    # The isolation lane and how each limit was applied in it (runtime_limits.py).
    isolation: IsolationFacts | None = None
    # A warm box of an image that preloads: the modules its interpreter was asked
    # to import before the code arrived (the image record's list).
    preload: tuple[str, ...] = ()
    # The writable places mounted without noexec: `/pybox` for an environment whose
    # recipe asks for it (compiled toolchains), empty for every other box.
    executable_paths: tuple[str, ...] = ()
    # Whose program ran and how its interpreter started (None: not recorded).
    program: ProgramFacts | None = None


@dataclass(frozen=True)
class PostureMismatchFact:
    field: str
    expected: Any
    actual: Any


@dataclass(frozen=True)
class EngineObserved:
    container_id: str | None
    container_name: str | None
    posture_verified: bool
    posture_fields_checked: int
    posture_mismatches: tuple[PostureMismatchFact, ...]
    state: str | None
    exit_code: int | None
    oom_killed: bool | None
    created_at: str | None
    started_at: str | None
    finished_at: str | None
    removal_confirmed: bool


@dataclass(frozen=True)
class KernelObserved:
    cgroup_version: int | None
    samples: int
    sample_interval_s: float
    memory_limit_bytes: int | None
    memory_peak_bytes: int | None
    memory_peak_source: str | None
    memory_limit_hits: int | None
    oom_kill_count: int | None
    pids_limit: int | None
    pids_peak: int | None
    pids_peak_source: str | None
    pids_limit_hits: int | None
    cpu_quota_cpus: float | None
    cpu_usage_s: float | None
    cpu_periods: int | None
    cpu_throttled_periods: int | None
    cpu_throttled_s: float | None
    # Where the counted totals (CPU, throttling, hits, OOM kills) start:
    # `box_start`, or `code_arrival` for a warm-pool box whose idle wait was
    # subtracted. Peaks cannot be rebased, so they may include the idle wait.
    counters_since: str = "box_start"
    peaks_include_idle_wait: bool = False
    # What the sampled cgroup holds: `box` (the program's processes and pybox's
    # bootstrap) or `gvisor_sandbox` (gVisor's Sentry, Gofer and stubs plus the
    # program: pids counts their host threads, memory includes gVisor's own).
    scope: str = KERNEL_SCOPE_BOX


CUMULATIVE_KERNEL_COUNTERS = (
    "memory_limit_hits",
    "oom_kill_count",
    "pids_limit_hits",
    "cpu_usage_s",
    "cpu_periods",
    "cpu_throttled_periods",
    "cpu_throttled_s",
)


def rebase_kernel(final: KernelObserved, baseline: KernelObserved) -> KernelObserved:
    """Totals counted from `baseline` (taken when the code arrived in a warm box).

    A counter missing from either side stays unknown (null) rather than guessed.
    """
    changes: dict[str, Any] = {
        "counters_since": "code_arrival",
        "peaks_include_idle_wait": True,
    }
    for name in CUMULATIVE_KERNEL_COUNTERS:
        end, start = getattr(final, name), getattr(baseline, name)
        if end is None or start is None:
            changes[name] = None
        elif isinstance(end, float) or isinstance(start, float):
            changes[name] = round(max(end - start, 0.0), 6)
        else:
            changes[name] = max(end - start, 0)
    return dataclasses.replace(final, **changes)


@dataclass(frozen=True)
class PyboxObserved:
    started_at: str
    create_s: float | None
    verify_s: float | None
    start_s: float | None
    code_sent_s: float | None
    program_ended_s: float | None
    removed_s: float | None
    run_duration_s: float | None
    deadline_kill: bool
    cancelled: bool
    leftovers_swept: int
    # `fresh`: created, verified and started for this run; `warm_pool`: a
    # single-use box started and verified earlier, waiting for code.
    box_source: str = "fresh"
    box_created_at: str | None = None
    box_waited_s: float | None = None
    # True when the CLI pool service (`pybox pool start`) ran it for `pybox exec`.
    pool_service: bool = False
    # What the box reached through pybox's egress proxy (`packages`), by host.
    egress: EgressObserved = field(default_factory=lambda: EgressObserved(NONE))
    # Why the box was not removed after this run, on purpose: `sandbox` (a
    # sandbox's box, kept until the sandbox is destroyed or expires) or
    # `next_program` (a protocol-2 box); None: it was to be removed
    # (`observed_by_engine.removal_confirmed` says whether it was).
    box_kept: str | None = None


@dataclass(frozen=True)
class StreamReport:
    bytes_total: int
    bytes_kept: int
    truncated: bool
    sha256: str


@dataclass(frozen=True)
class SkippedFile:
    path: str
    reason: str


@dataclass(frozen=True)
class PreloadReport:
    """What the bootstrap says the preload did (untrusted, like all it says)."""

    # Imported before the code arrived, and still in the interpreter that ran it.
    modules: tuple[str, ...]
    # Why a fresh interpreter ran the program instead (then `modules` is empty).
    fallback: str | None
    seconds: float | None  # the imports
    waited_s: float | None  # how long the program's start waited for them to end
    rss_bytes: int | None  # the interpreter's resident memory after the imports
    added_rss_bytes: int | None  # of which the imports added
    peak_rss_bytes: int | None  # the interpreter's own peak, then
    # Objects `gc.freeze()` moved to the permanent generation after the imports
    # (0 after a fallback), and the seconds the collection and freeze took.
    frozen_objects: int | None
    freeze_s: float | None


@dataclass(frozen=True)
class ProgramReported:
    exit_code: int | None
    backstop_fired: bool | None
    stdout: StreamReport
    stderr: StreamReport
    output_files: tuple[ReturnedFileDigest, ...]
    output_files_skipped: tuple[SkippedFile, ...]
    # Set when the box was asked to preload (`configured.preload`).
    preload: PreloadReport | None = None
    # A kept box's word (protocols 2 and 3) that its workspace's tmpfs (all of
    # /pybox) was full when the program ended: its size in bytes; else None.
    workspace_full_bytes: int | None = None


@dataclass(frozen=True)
class Unknown:
    fact: str
    reason: str
    # The part of `reason` that came from inside the box, if any (not in the JSON).
    quote: BoxQuote | None = field(default=None, compare=False, metadata=NOT_IN_JSON)


@dataclass(frozen=True)
class Receipt:
    run_id: str
    status: Status
    exit_code: int | None
    cause: Cause
    configured: Configured
    observed_by_engine: EngineObserved
    observed_by_kernel: KernelObserved
    observed_by_pybox: PyboxObserved
    reported_by_program: ProgramReported
    unknown: tuple[Unknown, ...] = field(default=())
    receipt_version: int = RECEIPT_VERSION

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = _jsonable(self)
        ordered = {"receipt_version": self.receipt_version}
        ordered.update({k: v for k, v in data.items() if k != "receipt_version"})
        return ordered

    def summary_lines(self, notes: list[str] | None = None) -> list[str]:
        """A short human summary of the same record (for stderr); see `summarize`."""
        from pybox._core.receipt_summary import summarize

        return summarize(self, notes)


def _jsonable(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: _jsonable(getattr(value, f.name))
            for f in dataclasses.fields(value)
            if f.metadata.get("json", True)
        }
    if isinstance(value, dict):
        return {key: _jsonable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(item) for item in value]
    if isinstance(value, Enum):
        return value.value
    return value
