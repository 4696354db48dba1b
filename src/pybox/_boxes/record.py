"""What one program in a box left behind, as values: the record and the outcome.

`RunRecord` holds every fact the receipt is built from, frozen once the
program (and, for a one-shot box, the box) is over; `receipt.build_receipt`
turns it into the receipt without any I/O. `RunOutcome` is what a caller gets:
the receipt, the kept output and the returned files.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pybox._boxes.outputs import ReturnedFile
from pybox._core.boxquote import BoxQuote
from pybox._core.images import ImageRecord
from pybox._core.limits import Limits
from pybox._core.posture import RunBoxSpec
from pybox._core.receipt import (
    EngineFacts,
    KernelObserved,
    Receipt,
    ReturnedFileDigest,
    SkippedFile,
    StreamReport,
    Unknown,
)
from pybox._core.request import RunRequest
from pybox._core.seal import PostureReport


@dataclass(frozen=True)
class RunRecord:
    """One program's run in one box, as pybox saw it."""

    run_id: str
    started_at: str  # UTC, when pybox began this run
    # What was asked for.
    pybox_version: str
    engine: EngineFacts
    spec: RunBoxSpec
    image: ImageRecord
    limits: Limits
    request: RunRequest
    collect_outputs: bool
    # The box: where it came from and what the engine said about it.
    box_source: str  # fresh | warm_pool | same_box
    box_created_at: str
    box_waited_s: float | None
    create_sent: bool
    container_id: str | None
    posture: PostureReport | None
    box_started: bool
    # A protocol-2 box stays up for its next program: the engine has no exit of its own to report.
    box_kept: bool
    protocol: int  # the box's bootstrap protocol (1: one program; 2: one after another)
    final_inspect: Mapping[str, Any] | None
    removal_confirmed: bool
    removal_error: str | None
    # Seconds since `started_at` (monotonic) of each step that happened:
    # created, verified, started, code_sent, program_ended, killed, removed.
    marks: Mapping[str, float]
    # The program, as the box reported it (untrusted) and as pybox handled it.
    exit_info: Mapping[str, Any] | None
    files_report: Mapping[str, Any] | None
    files_lost: str | None
    sandbox_error: str | None
    deadline_kill: bool
    cancelled: bool
    kernel: KernelObserved
    unknown: tuple[Unknown, ...]
    stdout: StreamReport
    stderr: StreamReport
    returned_files: tuple[ReturnedFileDigest, ...]
    skipped_files: tuple[SkippedFile, ...]  # pybox's own skips, the first listed
    skipped_more: int  # and how many more pybox skipped
    leftovers_swept: int
    # Where the box's own words are in `files_lost` and `sandbox_error`, if there.
    files_lost_quote: BoxQuote | None = None
    sandbox_error_quote: BoxQuote | None = None
    pool_service: bool = False  # run by the CLI pool service for a `pybox exec`
    # The bootstrap's started report's preload part (untrusted), if it sent one.
    preload_report: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class RunOutcome:
    receipt: Receipt
    stdout: bytes
    stderr: bytes
    output_files: tuple[ReturnedFile, ...]


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM) during a run: the box was cleaned up; the receipt is kept."""

    def __init__(self, outcome: RunOutcome) -> None:
        super().__init__("the run was interrupted")
        self.outcome = outcome


def iso_now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
