"""Files that come back from a box: checked, capped, staged, then published at once.

Everything about a returned file came from inside the box and is untrusted:
its path is checked component by component, its size against the caps, and it
is written only inside a staging directory pybox created. The staging
directory sits next to the destination and is renamed onto it in one step, so
the destination either holds every returned file or none, and nothing that
already existed is overwritten.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pybox._adapters.host_facts import current_owner, owner_alive
from pybox._core.boxquote import quoting
from pybox._core.display import name_problem
from pybox._core.errors import InvalidRequest, PyboxError
from pybox._core.receipt import ReturnedFileDigest, SkippedFile
from pybox._core.wire import MAX_SKIPPED_LISTED, ProtocolError

# shutil and tempfile (with bz2, lzma and zlib) are imported by the functions that
# stage and remove returned files: a run that returns none does not pay for them.

MAX_PATH_DEPTH = 32
MAX_PATH_BYTES = 1024


@dataclass(frozen=True)
class ReturnedFile:
    """A returned file, on disk under the staging directory."""

    path: str
    size_bytes: int
    sha256: str


def _unsafe_path(path: str) -> str | None:
    if not path or len(path.encode("utf-8", "surrogateescape")) > MAX_PATH_BYTES:
        return "empty or too long path"
    parts = path.split("/")
    if len(parts) > MAX_PATH_DEPTH:
        return "too deeply nested"
    for part in parts:
        if part in ("", ".", ".."):
            return "path with an empty or dot component"
        problem = name_problem(part)
        if problem is not None:
            return f"{problem} in the name"
    return None


class FilesReceiver:
    """Receives F/D frames into `root`, enforcing the caps pybox set."""

    def __init__(self, root: Path, max_files: int, max_bytes: int) -> None:
        self.root = root
        self.max_files = max_files
        self.max_bytes = max_bytes
        self.files: list[ReturnedFile] = []
        # The first skipped files, and a count of the rest: the box may send any number.
        self.skipped: list[SkippedFile] = []
        self.skipped_more = 0
        self._paths: set[str] = set()
        self._total = 0
        self._current: tuple[str, int, hashlib._Hash] | None = None
        self._handle: int | None = None
        self._remaining = 0

    def begin(self, header: dict[str, object]) -> None:
        if self._remaining:
            raise ProtocolError("The box started a new file before finishing the previous one.")
        path, size = header.get("path"), header.get("size")
        if not isinstance(path, str) or type(size) is not int or size < 0:
            message, quote = quoting("The box sent an unreadable file header: ", repr(header))
            raise ProtocolError(message, quote=quote)
        self._remaining = size
        reason = _unsafe_path(path)
        if reason is None and path in self._paths:
            reason = "duplicate path"
        if reason is None and len(self.files) >= self.max_files:
            reason = "over the returned-files count cap"
        if reason is None and self._total + size > self.max_bytes:
            reason = "over the returned-bytes cap"
        if reason is not None:
            self._skip(path, reason)
            self._current = None
            return
        target = self.root / path
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            self._handle = os.open(
                target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644
            )
        except OSError as exc:
            self._skip(path, f"cannot be stored: {exc.strerror or exc}")
            self._current = None
            return
        self._current = (path, size, hashlib.sha256())
        self._total += size
        if size == 0:
            self._complete()

    def data(self, chunk: bytes) -> None:
        if len(chunk) > self._remaining:
            raise ProtocolError("The box sent more file data than the file header announced.")
        self._remaining -= len(chunk)
        if self._current is None:
            return  # a skipped file's bytes are read and dropped
        if self._handle is not None:
            view = memoryview(chunk)
            while view:
                view = view[os.write(self._handle, view) :]
        self._current[2].update(chunk)
        if self._remaining == 0:
            self._complete()

    def _complete(self) -> None:
        assert self._current is not None
        path, size, digest = self._current
        if self._handle is not None:
            os.close(self._handle)
            self._handle = None
        self.files.append(ReturnedFile(path, size, digest.hexdigest()))
        self._paths.add(path)
        self._current = None

    def _skip(self, path: str, reason: str) -> None:
        if len(self.skipped) < MAX_SKIPPED_LISTED:
            self.skipped.append(SkippedFile(path, reason))
        else:
            self.skipped_more += 1

    def close(self) -> bool:
        """Close any open file; False if a file was left incomplete (it is deleted)."""
        if self._handle is not None:
            os.close(self._handle)
            self._handle = None
        if self._remaining and self._current is not None:
            path = self._current[0]
            (self.root / path).unlink(missing_ok=True)
            self._skip(path, "arrived incomplete; not kept")
            self._current = None
        return self._remaining == 0

    def digests(self) -> tuple[ReturnedFileDigest, ...]:
        return tuple(ReturnedFileDigest(f.path, f.size_bytes, f.sha256) for f in self.files)


STAGING_PREFIX = ".pybox-staging-"


@dataclass(frozen=True)
class StagedDestination:
    """A staging directory beside the destination, and the stale ones removed there."""

    staging: Path
    swept: tuple[Path, ...]


def _staging_prefix(owner: str) -> str:
    # The owner (`host:pid:start-ticks`) is in the name, so a later run can tell
    # a staging directory of a killed pybox from one of a run in progress.
    return STAGING_PREFIX + re.sub(r"[^A-Za-z0-9.:_-]", "_", owner) + "-"


def sweep_stale_staging(
    parent: Path, alive: Callable[[str], bool | None] = owner_alive
) -> tuple[Path, ...]:
    """Remove staging directories in `parent` left by pybox processes that are dead.

    pybox killed (SIGKILL) while it received returned files leaves partial,
    untrusted data beside the destination. Only a directory of this user whose
    owner is known dead is removed; one of a live run, of another host or of an
    older pybox (no owner in its name) is left alone.
    """
    removed: list[Path] = []
    try:
        names = [n for n in os.listdir(parent) if n.startswith(STAGING_PREFIX)]
    except OSError:
        return ()
    for name in sorted(names):
        owner, sep, _ = name[len(STAGING_PREFIX) :].rpartition("-")
        if not sep or owner.count(":") != 2:
            continue
        path = parent / name
        try:
            info = path.lstat()
        except OSError:
            continue
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
            continue
        if alive(owner) is not False:
            continue
        import shutil

        shutil.rmtree(path, ignore_errors=True)  # never follows links out of the tree
        if not os.path.lexists(path):
            removed.append(path)
    return tuple(removed)


def stage_private(
    parent: Path | None = None,
    owner: str | None = None,
    alive: Callable[[str], bool | None] = owner_alive,
) -> StagedDestination:
    """A staging directory for returned files that have no destination (the API's
    files returned in memory, the MCP server's kept files), in the temporary
    folder unless `parent` is given.

    Named after its owner like the ones beside a destination, so a pybox killed
    while holding returned files leaves nothing that the next one does not
    remove: stale ones of dead pybox processes in that folder go first.
    """
    import tempfile

    where = Path(tempfile.gettempdir()) if parent is None else parent
    swept = sweep_stale_staging(where, alive)
    prefix = _staging_prefix(current_owner() if owner is None else owner)
    return StagedDestination(Path(tempfile.mkdtemp(prefix=prefix, dir=where)), swept)


def prepare_destination(destination: Path) -> Path:
    """Check the destination before the run; return a staging directory beside it."""
    return stage_destination(destination).staging


def check_destination(destination: Path) -> Path:
    """Refuse a destination that pybox would not publish into (a link, a file, a
    non-empty directory, a missing parent); changes nothing. Front ends call it
    before anything else so bad input is named first."""
    destination = destination.expanduser()
    if destination.is_symlink():
        raise InvalidRequest(
            f"The output directory {destination} is a symbolic link; name a real directory."
        )
    if destination.exists():
        if not destination.is_dir():
            raise InvalidRequest(f"The output path {destination} exists and is not a directory.")
        if any(destination.iterdir()):
            raise InvalidRequest(
                f"The output directory {destination} is not empty; pybox never overwrites or "
                "mixes files. Name a new or empty directory."
            )
    parent = destination.absolute().parent
    if not parent.is_dir():
        raise InvalidRequest(
            f"The output directory's parent {parent} does not exist; create it first."
        )
    return destination


def stage_destination(
    destination: Path,
    owner: str | None = None,
    alive: Callable[[str], bool | None] = owner_alive,
) -> StagedDestination:
    """Check the destination before the run; make a staging directory beside it,
    after removing stale ones of dead pybox processes there.

    The destination must not exist, or be an empty directory: pybox never
    mixes returned files into existing ones.
    """
    import tempfile

    destination = check_destination(destination)
    parent = destination.absolute().parent
    swept = sweep_stale_staging(parent, alive)
    prefix = _staging_prefix(current_owner() if owner is None else owner)
    try:
        return StagedDestination(Path(tempfile.mkdtemp(prefix=prefix, dir=parent)), swept)
    except OSError as exc:
        raise InvalidRequest(
            f"Cannot create a staging directory in {parent}: {exc.strerror}. "
            "Choose a writable place."
        ) from exc


# Marks staged files before they are published (the quarantine mark on macOS).
FileMarker = Callable[[list[Path]], None]


def publish(staging: Path, destination: Path, mark: FileMarker | None = None) -> Path:
    """Mark the staged files if asked, then move them onto the destination in one rename."""
    destination = destination.expanduser()
    if mark is not None:
        staged = sorted(p for p in staging.rglob("*") if p.is_file() and not p.is_symlink())
        try:
            mark(staged)
        except PyboxError as exc:
            raise PyboxError(
                f"{exc} The returned files were not moved into {destination}; they are kept, "
                f"unmarked, in {staging}."
            ) from exc
    try:
        os.chmod(staging, 0o755)
        os.rename(staging, destination)  # replaces only an empty directory
    except OSError as exc:
        raise PyboxError(
            f"Could not move the returned files into {destination}: {exc.strerror or exc}. "
            f"Nothing was overwritten; the files are kept in {staging}."
        ) from exc
    return destination


def discard(staging: Path) -> None:
    import shutil

    shutil.rmtree(staging, ignore_errors=True)
