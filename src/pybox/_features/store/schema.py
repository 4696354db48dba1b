"""The store's tables and how an older database is brought up to date.

`PRAGMA user_version` holds the schema version. `migrate` runs every step from
the database's version to SCHEMA_VERSION in one `BEGIN IMMEDIATE` transaction,
re-reading the version inside it, so two processes opening a new database at once
migrate it once. A database from a newer pybox is refused, never downgraded.
"""

from __future__ import annotations

from collections.abc import Callable

from pybox._core.errors import StateError

TYPE_CHECKING = False
if TYPE_CHECKING:
    import sqlite3

SCHEMA_VERSION = 2

# Version 1. JSON columns hold canonical JSON text. The audit table refuses UPDATE
# and DELETE (append-only for pybox itself); the hash chain is what shows a change
# made by anyone who drops the triggers or edits the file.
_V1 = (
    """
    CREATE TABLE sandboxes (
        sandbox_id     TEXT PRIMARY KEY,
        owner          TEXT NOT NULL,
        container_name TEXT NOT NULL,
        container_id   TEXT,
        image_name     TEXT NOT NULL,
        image_id       TEXT NOT NULL,
        limits         TEXT NOT NULL,
        created_at     REAL NOT NULL,
        last_used_at   REAL NOT NULL,
        expires_at     REAL NOT NULL,
        idle_ttl_s     REAL NOT NULL,
        state          TEXT NOT NULL
            CHECK (state IN ('creating', 'ready', 'busy', 'broken', 'destroyed')),
        reason         TEXT NOT NULL,
        libraries      TEXT NOT NULL,
        runs           INTEGER NOT NULL
    )
    """,
    "CREATE INDEX sandboxes_by_state ON sandboxes (state, created_at)",
    """
    CREATE TABLE transitions (
        id         INTEGER PRIMARY KEY AUTOINCREMENT,
        sandbox_id TEXT NOT NULL REFERENCES sandboxes (sandbox_id),
        at         REAL NOT NULL,
        from_state TEXT,
        to_state   TEXT NOT NULL,
        reason     TEXT NOT NULL
    )
    """,
    "CREATE INDEX transitions_by_sandbox ON transitions (sandbox_id, id)",
    """
    CREATE TABLE runs (
        run_id      TEXT PRIMARY KEY,
        kind        TEXT NOT NULL,
        sandbox_id  TEXT,
        owner       TEXT NOT NULL,
        started_at  REAL NOT NULL,
        finished_at REAL,
        status      TEXT,
        request     TEXT NOT NULL,
        receipt     TEXT
    )
    """,
    "CREATE INDEX runs_by_start ON runs (started_at)",
    "CREATE INDEX runs_by_sandbox ON runs (sandbox_id, started_at)",
    """
    CREATE TABLE audit (
        seq        INTEGER PRIMARY KEY,
        at         REAL NOT NULL,
        operation  TEXT NOT NULL,
        subject    TEXT NOT NULL,
        details    TEXT NOT NULL,
        prev_hash  TEXT NOT NULL,
        entry_hash TEXT NOT NULL
    )
    """,
    """
    CREATE TRIGGER audit_no_update BEFORE UPDATE ON audit
    BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END
    """,
    """
    CREATE TRIGGER audit_no_delete BEFORE DELETE ON audit
    BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END
    """,
)


def _to_v1(connection: sqlite3.Connection) -> None:
    for statement in _V1:
        connection.execute(statement)


# Version 2: experiments (docs/experiments.md). Most of a record is one JSON
# document, as only the ids, states and times are ever searched.
_V2 = (
    """
    CREATE TABLE experiments (
        experiment_id TEXT PRIMARY KEY,
        owner         TEXT NOT NULL,
        sandbox_id    TEXT,
        project       TEXT NOT NULL,
        state         TEXT NOT NULL,
        reason        TEXT NOT NULL,
        created_at    REAL NOT NULL,
        updated_at    REAL NOT NULL,
        doc           TEXT NOT NULL
    )
    """,
    "CREATE INDEX experiments_by_state ON experiments (state, created_at)",
    """
    CREATE TABLE experiment_states (
        id            INTEGER PRIMARY KEY AUTOINCREMENT,
        experiment_id TEXT NOT NULL REFERENCES experiments (experiment_id),
        at            REAL NOT NULL,
        from_state    TEXT,
        to_state      TEXT NOT NULL,
        reason        TEXT NOT NULL
    )
    """,
    "CREATE INDEX experiment_states_by_id ON experiment_states (experiment_id, id)",
    """
    CREATE TABLE jobs (
        job_id           TEXT PRIMARY KEY,
        experiment_id    TEXT NOT NULL REFERENCES experiments (experiment_id),
        kind             TEXT NOT NULL,
        state            TEXT NOT NULL,
        started_at       REAL NOT NULL,
        finished_at      REAL,
        cancel_requested INTEGER NOT NULL DEFAULT 0,
        doc              TEXT NOT NULL
    )
    """,
    "CREATE INDEX jobs_by_experiment ON jobs (experiment_id, started_at)",
    """
    CREATE TABLE artifacts (
        experiment_id TEXT NOT NULL REFERENCES experiments (experiment_id),
        path          TEXT NOT NULL,
        collected_at  REAL NOT NULL,
        doc           TEXT NOT NULL,
        PRIMARY KEY (experiment_id, path)
    )
    """,
)


def _to_v2(connection: sqlite3.Connection) -> None:
    for statement in _V2:
        connection.execute(statement)


# MIGRATIONS[n] takes a database from version n to n + 1.
MIGRATIONS: tuple[Callable[[sqlite3.Connection], None], ...] = (_to_v1, _to_v2)
assert len(MIGRATIONS) == SCHEMA_VERSION


def migrate(connection: sqlite3.Connection, where: str) -> int:
    """Bring the database up to SCHEMA_VERSION; return the version it had.

    `connection` is in autocommit mode (isolation_level None); `where` names the
    file in messages.
    """
    version = _version(connection)
    if version == SCHEMA_VERSION:
        return version  # the common case: no write lock taken
    connection.execute("BEGIN IMMEDIATE")
    try:
        version = _version(connection)  # another process may have migrated meanwhile
        if version > SCHEMA_VERSION:
            raise StateError(
                f"pybox's store {where} has schema version {version}, newer than this pybox "
                f"understands ({SCHEMA_VERSION}). Upgrade pybox, or set PYBOX_STATE_DIR to "
                "another directory."
            )
        for step in MIGRATIONS[version:]:
            step(connection)
        # A PRAGMA takes no parameters; the value is this module's own integer.
        connection.execute(f"PRAGMA user_version = {int(SCHEMA_VERSION)}")
        connection.execute("COMMIT")
    except BaseException:
        if connection.in_transaction:
            connection.execute("ROLLBACK")
        raise
    return version


def _version(connection: sqlite3.Connection) -> int:
    row = connection.execute("PRAGMA user_version").fetchone()
    return int(row[0])
