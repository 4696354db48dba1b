"""Where a repaired program goes: a new file beside the original, or the original
replaced in one step (only if it still holds what was repaired).
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import replace
from pathlib import Path

from pybox._core.errors import StateError
from pybox._core.repair import RepairReport, sha256_hex


def fixed_file_candidates(original: Path) -> list[Path]:
    """`broken.py` -> `broken.fixed.py`, `broken.fixed-2.py`, ... (next to the original)."""
    stem, suffix = original.stem, original.suffix or ".py"
    names = [f"{stem}.fixed{suffix}"] + [f"{stem}.fixed-{n}{suffix}" for n in range(2, 100)]
    return [original.with_name(name) for name in names]


def write_new_file(candidates: list[Path], data: bytes) -> Path:
    """Write `data` to the first candidate that does not exist yet; never overwrite."""
    for path in candidates:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            continue
        except OSError as exc:
            raise StateError(f"Cannot create {path}: {exc.strerror or exc}.") from exc
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        return path
    raise StateError(
        f"{candidates[0]} and {len(candidates) - 1} numbered variants all exist; "
        "remove some or pass --output NEW_FILE."
    )


def replace_atomically(path: Path, data: bytes, expected_sha256: str) -> None:
    """Replace `path` with `data` in one step, if it still holds what was repaired.

    A temporary file in the same folder gets the data and the original's mode, is
    flushed to disk, then renamed over the original: readers see the old or the
    new program, never half of one.
    """
    path = path.resolve()  # through a symlink to the file itself, keeping the link
    try:
        current = path.read_bytes()
        mode = path.stat().st_mode & 0o7777
    except OSError as exc:
        raise StateError(f"Cannot read {path} again before replacing it: {exc}.") from exc
    if sha256_hex(current) != expected_sha256:
        raise StateError(f"{path} changed while it was being repaired, so it was not replaced.")
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".pybox-tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise


def with_destination(report: RepairReport, written_to: Path | None, applied: bool) -> RepairReport:
    return replace(
        report, written_to=None if written_to is None else str(written_to), applied=applied
    )
