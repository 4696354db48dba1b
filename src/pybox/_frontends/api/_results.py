"""What a run gives back to a caller of the API."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pybox._boxes.record import RunOutcome
from pybox._core.receipt import Receipt


@dataclass(frozen=True)
class OutputFile:
    """A file the program left in its output folder."""

    path: str
    data: bytes
    sha256: str


@dataclass(frozen=True)
class RunResult:
    """What a run produced. A failing program is a result, not an exception."""

    status: str
    exit_code: int | None
    stdout: str
    stderr: str
    stdout_bytes: bytes
    stderr_bytes: bytes
    receipt: Receipt
    output_files: tuple[OutputFile, ...] = ()
    output_dir: Path | None = None
    # Staging folders of killed pybox processes removed beside `output_dir`.
    stale_staging_removed: tuple[Path, ...] = ()

    @property
    def ok(self) -> bool:
        return self.status == "succeeded"


def _result(
    outcome: RunOutcome,
    files: tuple[OutputFile, ...],
    output_dir: Path | None,
    swept: tuple[Path, ...] = (),
) -> RunResult:
    receipt = outcome.receipt
    return RunResult(
        status=receipt.status.value,
        exit_code=receipt.exit_code,
        stdout=outcome.stdout.decode("utf-8", "replace"),
        stderr=outcome.stderr.decode("utf-8", "replace"),
        stdout_bytes=outcome.stdout,
        stderr_bytes=outcome.stderr,
        receipt=receipt,
        output_files=files,
        output_dir=output_dir,
        stale_staging_removed=swept,
    )
