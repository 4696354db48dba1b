"""`Store`: pybox's records of sandboxes, runs and operations (docs/store.md).

Each method is one transaction on the one database file (connection.py), so a
Store is safe to share between threads, and several processes may each open one
on the same state directory.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pybox._core.errors import InvalidRequest, StateError
from pybox._features.store.chain import (
    GENESIS_HASH,
    RUN_RECORD_COLUMNS,
    canonical_json,
    chained_records,
    check_chain,
    check_runs,
    entry_hash,
    run_record_hash,
)
from pybox._features.store.columns import (
    AUDIT_COLUMNS,
    RUN_COLUMNS,
    SANDBOX_COLUMNS,
    audit_entry,
    check_state,
    run_row,
    sandbox_row,
    sandbox_values,
    to_json,
)
from pybox._features.store.connection import DB_NAME, Database
from pybox._features.store.redact import redact_details, redact_request
from pybox._features.store.rows import (
    AuditEntry,
    AuditVerdict,
    RunRow,
    SandboxRow,
    Transition,
    TransitionRefused,
)

TYPE_CHECKING = False
if TYPE_CHECKING:
    import sqlite3

__all__ = ["DB_NAME", "MIN_PREFIX", "TRANSITION_FIELDS", "Store", "open_store"]

# A run id may be given by its start: at least this many characters, matching one run.
MIN_PREFIX = 6
# What `transition` may change besides the state and its reason.
TRANSITION_FIELDS = frozenset({"container_id", "last_used_at", "expires_at", "libraries", "runs"})

# The column lists are this package's constants, never input (hence the noqa: S608).
_SELECT_SANDBOX = f"SELECT {SANDBOX_COLUMNS} FROM sandboxes"  # noqa: S608
_SELECT_RUN = f"SELECT {RUN_COLUMNS} FROM runs"  # noqa: S608
_SELECT_AUDIT = f"SELECT {AUDIT_COLUMNS} FROM audit"  # noqa: S608
_INSERT_SANDBOX = f"INSERT INTO sandboxes ({SANDBOX_COLUMNS}) VALUES ({', '.join('?' * 15)})"  # noqa: S608
_INSERT_AUDIT = f"INSERT INTO audit ({AUDIT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)"  # noqa: S608
_UPDATE_SANDBOX = (
    "UPDATE sandboxes SET container_id = ?, last_used_at = ?, expires_at = ?, libraries = ?, "
    "runs = ?, state = ?, reason = ? WHERE sandbox_id = ?"
)
_INSERT_TRANSITION = (
    "INSERT INTO transitions (sandbox_id, at, from_state, to_state, reason) VALUES (?, ?, ?, ?, ?)"
)


class Store:
    """pybox's records. `Store.open(state_dir)`; every method is safe from any thread."""

    def __init__(self, database: Database) -> None:
        self._database = database

    @classmethod
    def open(cls, state_dir: Path) -> Store:
        """The store in `state_dir` (made, with its database, if missing)."""
        return cls(Database.open(state_dir))

    @property
    def path(self) -> Path:
        return self._database.path

    @property
    def database(self) -> Database:
        """The database itself, for a feature's own tables (experiments' ledger)."""
        return self._database

    def close(self) -> None:
        """Close the connection (a later call opens a new one)."""
        self._database.close()

    # -- sandboxes ----------------------------------------------------------------

    def add_sandbox(self, row: SandboxRow, reason: str) -> None:
        """Record a new sandbox (its `reason` column becomes `reason`) and its first
        transition, None -> row.state."""
        check_state(row.state)
        values = sandbox_values(row, reason)
        with self._database.write(f"record sandbox {row.sandbox_id}") as connection:
            found = connection.execute(
                "SELECT 1 FROM sandboxes WHERE sandbox_id = ?", (row.sandbox_id,)
            ).fetchone()
            if found is not None:
                raise StateError(
                    f"Sandbox {row.sandbox_id} is already recorded in {self.path}; a new "
                    "sandbox needs a new id."
                )
            connection.execute(_INSERT_SANDBOX, values)
            connection.execute(
                _INSERT_TRANSITION, (row.sandbox_id, time.time(), None, row.state, reason)
            )

    def get_sandbox(self, sandbox_id: str) -> SandboxRow | None:
        with self._database.read(f"read sandbox {sandbox_id}") as connection:
            row = connection.execute(
                f"{_SELECT_SANDBOX} WHERE sandbox_id = ?", (sandbox_id,)
            ).fetchone()
        return None if row is None else sandbox_row(row)

    def list_sandboxes(self, *, include_destroyed: bool = False) -> list[SandboxRow]:
        """Oldest first."""
        where = "" if include_destroyed else " WHERE state != 'destroyed'"
        with self._database.read("list sandboxes") as connection:
            rows = connection.execute(f"{_SELECT_SANDBOX}{where} ORDER BY created_at, sandbox_id")
            return [sandbox_row(row) for row in rows]

    def transition(
        self,
        sandbox_id: str,
        to_state: str,
        reason: str,
        *,
        expect: Iterable[str] | None = None,
        **fields: Any,
    ) -> SandboxRow:
        """Move a sandbox to `to_state` for `reason`, change `fields` (any of
        TRANSITION_FIELDS) in the same transaction, record the transition, and
        return the new row.

        With `expect`, the sandbox must be in one of those states, or nothing
        changes (TransitionRefused): checked and changed in one transaction, so of
        two processes only one wins. A destroyed sandbox can only be destroyed again.
        """
        check_state(to_state)
        unknown = sorted(set(fields) - TRANSITION_FIELDS)
        if unknown:
            raise StateError(
                f"A transition cannot change {', '.join(unknown)}; it changes only "
                f"{', '.join(sorted(TRANSITION_FIELDS))}."
            )
        if "libraries" in fields:
            fields["libraries"] = tuple(str(name) for name in fields["libraries"])
        allowed = None if expect is None else frozenset(expect)
        with self._database.write(f"move sandbox {sandbox_id} to {to_state}") as connection:
            row = connection.execute(
                f"{_SELECT_SANDBOX} WHERE sandbox_id = ?", (sandbox_id,)
            ).fetchone()
            if row is None:
                raise StateError(
                    f"No sandbox {sandbox_id} is recorded in {self.path}. `pybox sandbox list` "
                    "shows the recorded ones."
                )
            current = sandbox_row(row)
            _check_move(current, to_state, allowed)
            new = dataclasses.replace(current, state=to_state, reason=reason, **fields)
            connection.execute(
                _UPDATE_SANDBOX,
                (
                    new.container_id,
                    new.last_used_at,
                    new.expires_at,
                    to_json(list(new.libraries), "the sandbox's libraries"),
                    new.runs,
                    new.state,
                    new.reason,
                    sandbox_id,
                ),
            )
            connection.execute(
                _INSERT_TRANSITION, (sandbox_id, time.time(), current.state, to_state, reason)
            )
        return new

    def transitions(self, sandbox_id: str) -> list[Transition]:
        """Oldest first."""
        with self._database.read(f"read sandbox {sandbox_id}'s transitions") as connection:
            rows = connection.execute(
                "SELECT sandbox_id, at, from_state, to_state, reason FROM transitions "
                "WHERE sandbox_id = ? ORDER BY id",
                (sandbox_id,),
            )
            return [Transition(*row) for row in rows]

    # -- runs -----------------------------------------------------------------------

    def record_run_started(
        self,
        run_id: str,
        *,
        kind: str,
        owner: str,
        request: Mapping[str, Any],
        sandbox_id: str | None = None,
        started_at: float | None = None,
    ) -> None:
        """Record a run as started (now, or at `started_at`). The request is
        redacted here too (redact_request), whatever the caller did."""
        text = to_json(redact_request(request), "the run's request")
        at = time.time() if started_at is None else started_at
        with self._database.write(f"record run {run_id}") as connection:
            if connection.execute("SELECT 1 FROM runs WHERE run_id = ?", (run_id,)).fetchone():
                raise StateError(f"Run {run_id} is already recorded in {self.path}.")
            connection.execute(
                "INSERT INTO runs (run_id, kind, sandbox_id, owner, started_at, request) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (run_id, kind, sandbox_id, owner, at, text),
            )

    def record_run_finished(
        self,
        run_id: str,
        *,
        status: str,
        receipt: Mapping[str, Any],
        finished_at: float | None = None,
        audit: tuple[str, str, Mapping[str, Any]] | None = None,
    ) -> AuditEntry:
        """Record a run's end and chain its record: in the same transaction, an audit
        entry (`audit`: operation, subject, details; by default `run.recorded`, the
        run id, its status) whose details also hold `run_id` and `record_sha256`,
        the hash of the row as stored (chain.run_record_hash). `pybox audit verify`
        then shows any later change to the row."""
        text = to_json(receipt, "the run's receipt")
        at = time.time() if finished_at is None else finished_at
        operation, subject, details = audit or ("run.recorded", run_id, {"status": status})
        with self._database.write(f"record the end of run {run_id}") as connection:
            changed = connection.execute(
                "UPDATE runs SET finished_at = ?, status = ?, receipt = ? WHERE run_id = ?",
                (at, status, text, run_id),
            ).rowcount
            if not changed:
                raise StateError(
                    f"Run {run_id} has no start recorded in {self.path}; record its start first."
                )
            stored = connection.execute(
                f"SELECT {RUN_RECORD_COLUMNS} FROM runs WHERE run_id = ?",  # noqa: S608
                (run_id,),
            ).fetchone()
            chained = {**details, "run_id": run_id, "record_sha256": run_record_hash(stored)}
            return self._append(connection, operation, subject, chained)

    def get_run(self, run_id: str) -> RunRow | None:
        """The run with this id, or whose id starts with it (at least MIN_PREFIX
        characters, matching one run: more than one is an InvalidRequest)."""
        with self._database.read(f"read run {run_id}") as connection:
            row = connection.execute(f"{_SELECT_RUN} WHERE run_id = ?", (run_id,)).fetchone()
            if row is not None or len(run_id) < MIN_PREFIX:
                return None if row is None else run_row(row)
            # Ids compare as text, so those starting with the prefix are one range.
            found = connection.execute(
                f"{_SELECT_RUN} WHERE run_id > ? AND run_id < ? ORDER BY run_id LIMIT 2",
                (run_id, run_id + "\U0010ffff"),
            ).fetchall()
        if len(found) > 1:
            raise InvalidRequest(
                f"Run id {run_id!r} is the start of more than one run ({found[0][0]}, "
                f"{found[1][0]}, ...). Give more of it."
            )
        return run_row(found[0]) if found else None

    def list_runs(self, *, limit: int = 50, sandbox_id: str | None = None) -> list[RunRow]:
        """The newest `limit` runs (of one sandbox), newest first."""
        if limit < 1:
            return []
        order = "ORDER BY started_at DESC, rowid DESC LIMIT ?"
        with self._database.read("list runs") as connection:
            if sandbox_id is None:
                rows = connection.execute(f"{_SELECT_RUN} {order}", (limit,))
            else:
                rows = connection.execute(
                    f"{_SELECT_RUN} WHERE sandbox_id = ? {order}", (sandbox_id, limit)
                )
            return [run_row(row) for row in rows]

    # -- the audit log ----------------------------------------------------------

    def audit(self, operation: str, subject: str, details: Mapping[str, Any]) -> AuditEntry:
        """Append an entry. Reading the last hash and inserting are one transaction,
        so entries appended by several processes at once form one chain."""
        clean, text = _audit_details(operation, subject, details)  # before the lock
        with self._database.write(f"append to the audit log ({operation})") as connection:
            return self._append(connection, operation, subject, clean, text)

    @staticmethod
    def _append(
        connection: sqlite3.Connection,
        operation: str,
        subject: str,
        details: Mapping[str, Any],
        text: str | None = None,
    ) -> AuditEntry:
        """Append an entry inside the caller's write transaction."""
        if text is None:
            details, text = _audit_details(operation, subject, details)
        last = connection.execute(
            "SELECT seq, entry_hash FROM audit ORDER BY seq DESC LIMIT 1"
        ).fetchone()
        seq, prev = (1, GENESIS_HASH) if last is None else (int(last[0]) + 1, str(last[1]))
        at = time.time()
        digest = entry_hash(seq, at, operation, subject, details, prev)
        connection.execute(_INSERT_AUDIT, (seq, at, operation, subject, text, prev, digest))
        return AuditEntry(seq, at, operation, subject, details, prev, digest)

    def audit_tail(self, count: int) -> list[AuditEntry]:
        """The last `count` entries, oldest first."""
        if count < 1:
            return []
        with self._database.read("read the audit log") as connection:
            rows = connection.execute(
                f"{_SELECT_AUDIT} ORDER BY seq DESC LIMIT ?", (count,)
            ).fetchall()
        return [audit_entry(row) for row in reversed(rows)]

    def verify_audit(self) -> AuditVerdict:
        """Recompute the whole chain and name its first broken link (chain.check_chain),
        then check every stored run against the record hash the chain holds for it
        (chain.check_runs). One read transaction: one snapshot, however many
        processes append meanwhile."""
        with self._database.read("verify the audit log") as connection:
            entries = [
                audit_entry(row) for row in connection.execute(f"{_SELECT_AUDIT} ORDER BY seq")
            ]
            verdict = check_chain(entries)
            if not verdict.ok:
                return verdict
            rows = connection.execute(f"SELECT {RUN_RECORD_COLUMNS} FROM runs ORDER BY run_id")  # noqa: S608
            runs = check_runs(chained_records(entries), rows)
        if runs.reason is not None:
            return AuditVerdict(False, verdict.entries, runs.first_broken_seq, runs.reason, runs)
        return dataclasses.replace(verdict, runs=runs)


def _audit_details(
    operation: str, subject: str, details: Mapping[str, Any]
) -> tuple[dict[str, Any], str]:
    clean = redact_details(details)
    try:
        return clean, canonical_json(clean)
    except (TypeError, ValueError) as exc:
        raise StateError(f"Cannot audit {operation} {subject}: details not JSON ({exc}).") from exc


def open_store(environ: Mapping[str, str], config_path: str | None = None) -> Store:
    """The store of the state directory the operator's settings name. No engine and no
    session: all that `pybox runs` and `pybox audit` need."""
    from pybox._adapters.config import load_settings

    return Store.open(load_settings(environ, config_path).state_dir)


def _check_move(current: SandboxRow, to_state: str, allowed: frozenset[str] | None) -> None:
    if allowed is not None and current.state not in allowed:
        raise TransitionRefused(
            f"Sandbox {current.sandbox_id} is {current.state} ({current.reason}), not "
            f"{' or '.join(sorted(allowed))}; it was not moved to {to_state}.",
            sandbox_id=current.sandbox_id,
            state=current.state,
        )
    if current.state == "destroyed" and to_state != "destroyed":
        raise TransitionRefused(
            f"Sandbox {current.sandbox_id} was destroyed ({current.reason}); it cannot become "
            f"{to_state}. Create a new sandbox.",
            sandbox_id=current.sandbox_id,
            state=current.state,
        )
