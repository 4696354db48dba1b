"""The store's one SQLite file, shared by threads and by processes.

`<state_dir>/pybox.sqlite3`, mode 0600, in WAL mode (readers never wait for the
writer) with `synchronous=NORMAL` (a commit survives a crash of pybox; a power
cut may lose the last commits, never corrupt the file) and a busy timeout, so
two pybox processes share it. Every write is one `BEGIN IMMEDIATE` transaction:
it takes the write lock before it reads, so a read-then-write (the audit chain's
last hash, a sandbox's state) cannot interleave with another process's.

One connection per Database, guarded by a lock (the MCP server calls from many
threads); a forked child opens its own. sqlite3 errors become StateError naming
the file and the next step.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pybox._core.errors import StateError
from pybox._features.store.schema import migrate

DB_NAME = "pybox.sqlite3"
BUSY_TIMEOUT_MS = 10_000


class Database:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.RLock()
        self._connection: sqlite3.Connection | None = None
        self._pid = 0

    @classmethod
    def open(cls, state_dir: Path) -> Database:
        """The database in `state_dir` (made if missing), connected and migrated."""
        database = cls(state_dir / DB_NAME)
        create_private(database.path)
        with database.read("open"):
            pass
        return database

    @contextmanager
    def read(self, what: str) -> Iterator[sqlite3.Connection]:
        """The connection, for statements that only read (`what` names them in errors)."""
        with self._lock, self._errors(what):
            yield self._connect()

    @contextmanager
    def write(self, what: str) -> Iterator[sqlite3.Connection]:
        """One BEGIN IMMEDIATE transaction: committed when the block ends, rolled back
        if it raises."""
        with self._lock, self._errors(what):
            connection = self._connect()
            connection.execute("BEGIN IMMEDIATE")
            try:
                yield connection
            except BaseException:
                if connection.in_transaction:
                    connection.execute("ROLLBACK")
                raise
            connection.execute("COMMIT")

    def close(self) -> None:
        """Close the connection (a later call opens a new one)."""
        with self._lock:
            connection, self._connection = self._connection, None
            if connection is not None and self._pid == os.getpid():
                connection.close()

    def _connect(self) -> sqlite3.Connection:
        if self._connection is not None and self._pid == os.getpid():
            return self._connection
        # A connection inherited through fork() must not be used (nor closed) here.
        connection = sqlite3.connect(
            str(self.path),
            timeout=BUSY_TIMEOUT_MS / 1000,
            isolation_level=None,  # autocommit: transactions are begun explicitly
            check_same_thread=False,  # guarded by self._lock
        )
        try:
            connection.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            mode = _enter_wal(connection)
            if mode.lower() != "wal":
                raise StateError(
                    f"pybox's store {self.path} cannot use SQLite's WAL mode (it stays in "
                    f"{mode} mode): its filesystem may not support it. Set PYBOX_STATE_DIR to "
                    "a directory on a local disk."
                )
            connection.execute("PRAGMA synchronous = NORMAL")
            connection.execute("PRAGMA foreign_keys = ON")
            migrate(connection, str(self.path))
        except BaseException:
            connection.close()
            raise
        self._connection, self._pid = connection, os.getpid()
        return connection

    @contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as exc:
            raise StateError(
                f"pybox's store {self.path} could not {what}: {exc}. {next_step(exc, self.path)}"
            ) from exc


def _enter_wal(connection: sqlite3.Connection) -> str:
    """Switch a new file to WAL mode (the mode then stays with the file); return the
    mode it is in. SQLite answers "locked" at once, without waiting out the busy
    timeout, when two connections make that switch together (measured: 10 of 1200
    connections opened four at a time on a new file), so the switch is retried
    until the busy timeout."""
    mode = str(connection.execute("PRAGMA journal_mode").fetchone()[0])
    if mode.lower() == "wal":
        return mode  # the common case: an existing store
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    pause_s = 0.005
    while True:
        try:
            return str(connection.execute("PRAGMA journal_mode = WAL").fetchone()[0])
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc).lower() or time.monotonic() + pause_s > deadline:
                raise
        time.sleep(pause_s)
        pause_s = min(pause_s * 2, 0.1)


def create_private(path: Path) -> None:
    """Make the state directory (0700) and the database file (0600) if missing; an
    existing database readable by others is made private. SQLite gives its -wal
    and -shm files the database file's mode."""
    # Never open (and so close) a descriptor of a database this process may already
    # use: closing any descriptor of the file drops every POSIX lock SQLite holds on
    # it in this process, and another process then writes beside it (a "malformed"
    # database). Create the file only where it is missing; otherwise work by path.
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        try:
            os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600))
        except FileExistsError:
            info = os.stat(path)
            if info.st_mode & 0o077 and info.st_uid == os.getuid():
                os.chmod(path, 0o600)
    except OSError as exc:
        raise StateError(
            f"Cannot create pybox's store {path}: {exc.strerror or exc}. Set PYBOX_STATE_DIR "
            "to a directory you can write."
        ) from exc


def next_step(exc: sqlite3.Error, path: Path) -> str:
    text = str(exc).lower()
    if "locked" in text or "busy" in text:
        return (
            f"Another pybox process held it for more than {BUSY_TIMEOUT_MS // 1000} s; try again."
        )
    if "not a database" in text or "malformed" in text or "corrupt" in text:
        return (
            f"Move {path} aside: pybox then starts a new store (the moved file keeps the old "
            "records)."
        )
    return (
        f"Check that {path.parent} is yours and writable and its disk has room, or set "
        "PYBOX_STATE_DIR to another directory."
    )
