"""Numbered lock files that processes and threads hold with `flock`.

A held file is a token: `prefix-00`, `prefix-01`, ... in one folder, each held
by at most one holder at a time, whichever pybox process (of the user who owns
the folder) it is in. The kernel drops a process's locks when it ends, however
it ends (SIGKILL too), so a token is never lost to a crashed holder.

`flock` locks belong to an open file description, and two threads of one
process using the same descriptor would both "hold" it. So each process opens
each file once and keeps a table of the indexes its own threads hold, under a
lock: a thread takes an index only when no other thread of the process holds
it and the kernel grants the flock against other processes. The descriptors
stay open for the life of the process (a few per folder) and are closed in a
forked child, whose copies would otherwise share the parent's locks.

A holder writes a short note into its file when it takes it (who, since and
until when) and empties the file before it lets go, so anyone can count the
held files and read their notes by reading them, without trying their locks
(which would get in a taker's way); only a file with a note is tried, to tell
a live holder from a dead one.
"""

from __future__ import annotations

import errno
import fcntl
import os
import threading
from pathlib import Path

from pybox._core.errors import StateError

NOTE_MAX_BYTES = 512


class LockFiles:
    """Thread-safe. Use `lock_files()`: one per folder and prefix per process."""

    def __init__(self, directory: Path, prefix: str) -> None:
        self.directory = directory
        self.prefix = prefix
        self._lock = threading.Lock()
        self._fds: dict[int, int] = {}
        self._held: set[int] = set()  # indexes this process's threads hold

    def _existing_fd(self, index: int) -> int | None:
        """The file's descriptor if it exists: a file never made is free, and a look
        need not make it (a first run in a new state directory stays cheap)."""
        fd = self._fds.get(index)
        if fd is None:
            path = self.directory / f"{self.prefix}-{index:02d}"
            try:
                fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
            except FileNotFoundError:
                return None
            except OSError as exc:
                raise StateError(
                    f"Cannot open the lock file {path}: {exc.strerror or exc}. Set "
                    "PYBOX_STATE_DIR to a writable directory of your own."
                ) from exc
            self._fds[index] = fd
        return fd

    def _fd(self, index: int) -> int:
        """Caller holds the lock."""
        fd = self._fds.get(index)
        if fd is None:
            path = self.directory / f"{self.prefix}-{index:02d}"
            try:
                self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            except OSError as exc:
                raise StateError(
                    f"Cannot open the lock file {path}: {exc.strerror or exc}. Set "
                    "PYBOX_STATE_DIR to a writable directory of your own."
                ) from exc
            self._fds[index] = fd
        return fd

    def _try_flock(self, fd: int) -> bool:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                return False
            raise StateError(f"Cannot lock a file in {self.directory}: {exc}.") from exc
        return True

    def take(self, count: int, note: bytes) -> int | None:
        """The lowest free index below `count`, now held by the caller, its file saying
        `note` (not empty); None if all are held."""
        with self._lock:
            for index in range(count):
                if index in self._held:
                    continue
                fd = self._fd(index)
                if self._try_flock(fd):
                    self._held.add(index)
                    _write_note(fd, note or b"-")
                    return index
        return None

    def release(self, index: int) -> None:
        with self._lock:
            if index not in self._held:
                return
            self._held.discard(index)
            fd = self._fds[index]
            _clear_note(fd)  # before the unlock: an empty file is a free one
            fcntl.flock(fd, fcntl.LOCK_UN)

    def held(self, count: int, *, first_only: bool = False) -> list[bytes]:
        """The notes of the first `count` files that are held, by anyone.

        Holders write their note on taking and clear it before letting go, so an
        empty file is free without touching its lock: a look never gets in the way
        of a taker. Only a file with a note is tried (its lock fails while its holder
        lives); one whose holder died is cleared here."""
        notes: list[bytes] = []
        with self._lock:
            for index in range(count):
                fd = self._existing_fd(index)
                if fd is None:
                    break  # take() makes files lowest first: none above this one exists
                note = _read_note(fd)
                if index not in self._held:
                    if not note:
                        continue
                    if self._try_flock(fd):  # its holder died without clearing it
                        _clear_note(fd)
                        fcntl.flock(fd, fcntl.LOCK_UN)
                        continue
                notes.append(note)
                if first_only:
                    break
        return notes

    def any_held(self, count: int) -> bool:
        """Whether one of the first `count` files is held; stops at the first."""
        return bool(self.held(count, first_only=True))

    def forget_after_fork(self) -> None:
        """In a forked child: drop the parent's descriptors (closing the child's copies
        releases nothing the parent holds) and start with nothing held."""
        for fd in self._fds.values():
            try:
                os.close(fd)
            except OSError:
                pass
        self._fds.clear()
        self._held.clear()
        self._lock = threading.Lock()


def _read_note(fd: int) -> bytes:
    try:
        return os.pread(fd, NOTE_MAX_BYTES, 0)
    except OSError:
        return b""


def _write_note(fd: int, note: bytes) -> None:
    try:
        data = note[:NOTE_MAX_BYTES]
        os.pwrite(fd, data, 0)  # then cut: never empty (free-looking) while held
        os.ftruncate(fd, len(data))
    except OSError:
        pass  # a note is for counting and messages; the lock is what holds the slot


def _clear_note(fd: int) -> None:
    try:
        os.ftruncate(fd, 0)
    except OSError:
        pass


_TABLES: dict[tuple[str, str], LockFiles] = {}
_TABLES_LOCKS = [threading.Lock()]  # a list: a forked child replaces it


def lock_files(directory: Path, prefix: str) -> LockFiles:
    """This process's table for `directory`/`prefix-NN`, shared by every caller."""
    key = (os.path.abspath(directory), prefix)
    with _TABLES_LOCKS[0]:
        table = _TABLES.get(key)
        if table is None:
            table = _TABLES[key] = LockFiles(Path(key[0]), prefix)
        return table


def _after_fork_in_child() -> None:
    _TABLES_LOCKS[0] = threading.Lock()
    for table in _TABLES.values():
        table.forget_after_fork()


os.register_at_fork(after_in_child=_after_fork_in_child)
