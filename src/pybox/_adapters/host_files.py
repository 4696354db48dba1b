"""Writing bytes that came from a box into a host folder, without being steered.

A folder the bytes go to may hold names another party chose (a link planted at
a predictable temporary name, or at the target itself). So a file is only ever
created new: `O_CREAT | O_EXCL | O_NOFOLLOW` never opens an existing file and
never follows a link; a replacement is written under a random name in the
target's folder (private, 0600, until it is complete) and renamed over the
target, which replaces whatever name is there (a link itself, never the file
it points to).
"""

from __future__ import annotations

import os
from pathlib import Path

_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_TEMPORARY_TRIES = 100


def new_file_mode() -> int:
    """The mode a new file of this process gets (0666 less the umask)."""
    try:
        with open("/proc/self/status", "rb") as status:
            for line in status:
                if line.startswith(b"Umask:"):
                    return 0o666 & ~int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    # No /proc (macOS): the only portable way to read the umask is to set it.
    umask = os.umask(0o077)
    os.umask(umask)
    return 0o666 & ~umask


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def create_new_file(path: Path, data: bytes, mode: int = 0o666) -> None:
    """Write `data` to `path`, which must not exist (not even as a link):
    FileExistsError otherwise. A write that fails leaves no partial file."""
    fd = os.open(path, _NEW_FILE, mode)
    try:
        _write_all(fd, data)
    except BaseException:
        os.close(fd)
        path.unlink(missing_ok=True)
        raise
    os.close(fd)


def replace_file(path: Path, data: bytes, mode: int | None = None) -> None:
    """Replace whatever `path` names with a new regular file holding `data`, in one
    rename: readers see the old file or the whole new one. A link at `path` is
    replaced itself; the file it pointed to is never written. `mode`: the new
    file's (None: what a new file of this process gets)."""
    final_mode = new_file_mode() if mode is None else mode
    fd, temporary = _new_temporary(path)
    try:
        try:
            _write_all(fd, data)
            os.fchmod(fd, final_mode)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def _new_temporary(path: Path) -> tuple[int, Path]:
    """A new private file beside `path` under a random name (what tempfile.mkstemp
    does, without importing tempfile and its compression modules)."""
    for _ in range(_TEMPORARY_TRIES):
        temporary = path.with_name(f".{path.name}.pybox-{os.urandom(8).hex()}")
        try:
            return os.open(temporary, _NEW_FILE, 0o600), temporary
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name beside {path}")
