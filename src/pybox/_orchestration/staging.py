"""Where one run's returned files land, the same way for every front end.

The box's files arrive in a staging directory pybox made (see `outputs`). After
the run a front end either publishes them into the caller's destination in one
rename (`pybox exec --output`, the API's `output_dir`), reads them and discards
the directory (the API without `output_dir`), or keeps them where it reads them
later (the MCP server, under its own folder). `Session.stage_outputs` makes one.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from pybox._boxes.outputs import (
    FileMarker,
    ReturnedFile,
    check_destination,
    discard,
    publish,
    stage_destination,
    stage_private,
)
from pybox._core.errors import PyboxError
from pybox._core.request import PreparedRun

# check_destination is here for front ends: they check a destination before they prepare.
__all__ = ["OutputStaging", "check_destination", "stage_outputs"]


@dataclass(frozen=True)
class OutputStaging:
    """A run's staging directory (pass `files_dir` to `Session.run`) and its fate."""

    files_dir: Path
    # Where `publish()` moves the files; None when they are read or kept instead.
    destination: Path | None = None
    # Staging directories of killed pybox processes removed beside `destination`
    # (or, for a temporary directory, in the temporary folder).
    swept: tuple[Path, ...] = ()
    marker: FileMarker | None = None

    def read(self, files: Iterable[ReturnedFile]) -> list[tuple[ReturnedFile, bytes]]:
        """Each returned file with its bytes, read from the staging directory."""
        return [(f, (self.files_dir / f.path).read_bytes()) for f in files]

    def publish(self) -> Path:
        """Mark the files (macOS quarantine), then move them onto the destination at
        once. On failure nothing is overwritten and the files stay in `files_dir`."""
        if self.destination is None:
            raise ValueError("this staging directory has no destination to publish to")
        return publish(self.files_dir, self.destination, self.marker)

    def discard(self) -> None:
        discard(self.files_dir)


def stage_outputs(
    prepared: PreparedRun,
    destination: Path | None = None,
    *,
    keep_under: Path | None = None,
    marker: FileMarker | None = None,
) -> OutputStaging | None:
    """A staging directory for `prepared`'s returned files, or None when it asks for none.

    With `destination` (new or empty; checked now, before any box exists) the
    directory sits beside it, so publishing is one rename. With `keep_under` it
    is `keep_under/<run id>`. Otherwise it is a private directory in the temporary
    folder, named after its owner (see `outputs.stage_private`).
    """
    if destination is not None:
        staged = stage_destination(destination)
        return OutputStaging(staged.staging, destination, staged.swept, marker)
    if not prepared.request.collect_outputs:
        return None
    if keep_under is not None:
        path = keep_under / prepared.run_id
        try:
            path.mkdir(mode=0o700)
        except OSError as exc:
            raise PyboxError(
                f"Cannot create the folder {path} for the returned files: {exc.strerror or exc}."
            ) from exc
        return OutputStaging(path)
    # Named after its owner in the temporary folder: a killed pybox's are swept here.
    staged = stage_private()
    return OutputStaging(staged.staging, swept=staged.swept)
