"""The experiments' records in pybox's store: experiments, their state history,
jobs and collected artifacts (schema version 2, `pybox._features.store.schema`).

Every move of an experiment's state is checked against the state machine
(`states.check_transition`) inside the same write transaction that makes it, so
two processes cannot interleave a read and a write, and an illegal move is an
error that changes nothing. Values of environment variables never reach these
records: only names.
"""

from __future__ import annotations

import builtins
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pybox._core.errors import StateError
from pybox._features.experiments.states import ExperimentState, check_transition
from pybox._features.store.columns import from_json, to_json

if TYPE_CHECKING:
    from pybox._features.store.connection import Database

JOB_STATES = ("running", "completed", "failed", "timed_out", "cancelled", "lost")
JOB_ENDS = frozenset(JOB_STATES) - {"running"}

_EXPERIMENT_COLUMNS = (
    "experiment_id, owner, sandbox_id, project, state, reason, created_at, updated_at, doc"
)
_JOB_COLUMNS = "job_id, experiment_id, kind, state, started_at, finished_at, cancel_requested, doc"


@dataclass(frozen=True)
class ExperimentRecord:
    experiment_id: str
    owner: str
    sandbox_id: str | None
    project: str
    state: str
    reason: str
    created_at: float
    updated_at: float
    doc: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class JobRecord:
    job_id: str
    experiment_id: str
    kind: str  # "command" or "tests"
    state: str
    started_at: float
    finished_at: float | None
    cancel_requested: bool
    doc: Mapping[str, Any] = field(default_factory=dict)

    @property
    def finished(self) -> bool:
        return self.state in JOB_ENDS


class Ledger:
    """The experiments' tables; every method is one transaction, safe from any thread."""

    def __init__(self, database: Database) -> None:
        self._database = database

    # -- experiments ------------------------------------------------------------------

    def add(self, record: ExperimentRecord) -> None:
        with self._database.write(f"record experiment {record.experiment_id}") as connection:
            if connection.execute(
                "SELECT 1 FROM experiments WHERE experiment_id = ?", (record.experiment_id,)
            ).fetchone():
                raise StateError(f"Experiment {record.experiment_id} is already recorded.")
            connection.execute(
                f"INSERT INTO experiments ({_EXPERIMENT_COLUMNS}) "  # noqa: S608
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    record.experiment_id,
                    record.owner,
                    record.sandbox_id,
                    record.project,
                    record.state,
                    record.reason,
                    record.created_at,
                    record.updated_at,
                    to_json(dict(record.doc), "the experiment's record"),
                ),
            )
            connection.execute(
                "INSERT INTO experiment_states (experiment_id, at, from_state, to_state, reason) "
                "VALUES (?, ?, ?, ?, ?)",
                (record.experiment_id, record.created_at, None, record.state, record.reason),
            )

    def get(self, experiment_id: str) -> ExperimentRecord | None:
        with self._database.read(f"read experiment {experiment_id}") as connection:
            row = connection.execute(
                f"SELECT {_EXPERIMENT_COLUMNS} FROM experiments "  # noqa: S608
                "WHERE experiment_id = ?",
                (experiment_id,),
            ).fetchone()
        return None if row is None else _experiment(row)

    def list(self, *, include_destroyed: bool = False) -> builtins.list[ExperimentRecord]:
        """Oldest first."""
        where = "" if include_destroyed else " WHERE state != 'destroyed'"
        with self._database.read("list experiments") as connection:
            rows = connection.execute(
                f"SELECT {_EXPERIMENT_COLUMNS} FROM experiments{where} "  # noqa: S608
                "ORDER BY created_at, experiment_id"
            ).fetchall()
        return [_experiment(row) for row in rows]

    def move(
        self,
        experiment_id: str,
        to_state: ExperimentState,
        reason: str,
        *,
        doc: Mapping[str, Any] | None = None,
        sandbox_id: str | None = None,
    ) -> ExperimentRecord:
        """Move the experiment to `to_state` (checked against the state machine in the
        same transaction), merging `doc` into its document."""
        now = time.time()
        with self._database.write(f"move experiment {experiment_id}") as connection:
            row = connection.execute(
                f"SELECT {_EXPERIMENT_COLUMNS} FROM experiments "  # noqa: S608
                "WHERE experiment_id = ?",
                (experiment_id,),
            ).fetchone()
            if row is None:
                raise StateError(f"Experiment {experiment_id} is not recorded.")
            current = _experiment(row)
            check_transition(ExperimentState(current.state), to_state)
            merged = {**current.doc, **(doc or {})}
            connection.execute(
                "UPDATE experiments SET state = ?, reason = ?, updated_at = ?, doc = ?, "
                "sandbox_id = ? WHERE experiment_id = ?",
                (
                    to_state.value,
                    reason,
                    now,
                    to_json(merged, "the experiment's record"),
                    sandbox_id if sandbox_id is not None else current.sandbox_id,
                    experiment_id,
                ),
            )
            connection.execute(
                "INSERT INTO experiment_states (experiment_id, at, from_state, to_state, reason) "
                "VALUES (?, ?, ?, ?, ?)",
                (experiment_id, now, current.state, to_state.value, reason),
            )
        return ExperimentRecord(
            current.experiment_id,
            current.owner,
            sandbox_id if sandbox_id is not None else current.sandbox_id,
            current.project,
            to_state.value,
            reason,
            current.created_at,
            now,
            merged,
        )

    def update_doc(
        self, experiment_id: str, doc: Mapping[str, Any], *, sandbox_id: str | None = None
    ) -> None:
        """Merge `doc` into the experiment's document (and record its sandbox), its
        state unchanged."""
        with self._database.write(f"update experiment {experiment_id}") as connection:
            row = connection.execute(
                "SELECT doc FROM experiments WHERE experiment_id = ?", (experiment_id,)
            ).fetchone()
            if row is None:
                raise StateError(f"Experiment {experiment_id} is not recorded.")
            merged = {**from_json(row[0], f"Experiment {experiment_id}'s record"), **doc}
            connection.execute(
                "UPDATE experiments SET doc = ?, updated_at = ?, "
                "sandbox_id = COALESCE(?, sandbox_id) WHERE experiment_id = ?",
                (
                    to_json(merged, "the experiment's record"),
                    time.time(),
                    sandbox_id,
                    experiment_id,
                ),
            )

    def history(self, experiment_id: str) -> builtins.list[dict[str, Any]]:
        with self._database.read(f"read experiment {experiment_id}'s history") as connection:
            rows = connection.execute(
                "SELECT at, from_state, to_state, reason FROM experiment_states "
                "WHERE experiment_id = ? ORDER BY id",
                (experiment_id,),
            ).fetchall()
        return [{"at": at, "from": old, "to": new, "reason": why} for at, old, new, why in rows]

    # -- jobs -------------------------------------------------------------------------

    def add_job(self, job: JobRecord) -> None:
        with self._database.write(f"record job {job.job_id}") as connection:
            connection.execute(
                f"INSERT INTO jobs ({_JOB_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",  # noqa: S608
                (
                    job.job_id,
                    job.experiment_id,
                    job.kind,
                    job.state,
                    job.started_at,
                    job.finished_at,
                    int(job.cancel_requested),
                    to_json(dict(job.doc), "the job's record"),
                ),
            )

    def finish_job(self, job_id: str, state: str, doc: Mapping[str, Any]) -> JobRecord:
        """Record a job's end (once: an ended job is never changed again)."""
        if state not in JOB_ENDS:
            raise StateError(f"{state!r} is not how a job ends: {', '.join(sorted(JOB_ENDS))}.")
        with self._database.write(f"record the end of job {job_id}") as connection:
            current = self._job_in(connection, job_id)
            if current.finished:
                raise StateError(f"Job {job_id} already ended ({current.state}).")
            merged = {**current.doc, **doc}
            now = time.time()
            connection.execute(
                "UPDATE jobs SET state = ?, finished_at = ?, doc = ? WHERE job_id = ?",
                (state, now, to_json(merged, "the job's record"), job_id),
            )
        return JobRecord(
            job_id, current.experiment_id, current.kind, state, current.started_at, now,
            current.cancel_requested, merged,
        )  # fmt: skip

    def get_job(self, job_id: str) -> JobRecord | None:
        with self._database.read(f"read job {job_id}") as connection:
            row = connection.execute(
                f"SELECT {_JOB_COLUMNS} FROM jobs WHERE job_id = ?",  # noqa: S608
                (job_id,),
            ).fetchone()
        return None if row is None else _job(row)

    def jobs(self, experiment_id: str) -> builtins.list[JobRecord]:
        """Oldest first."""
        with self._database.read(f"list experiment {experiment_id}'s jobs") as connection:
            rows = connection.execute(
                f"SELECT {_JOB_COLUMNS} FROM jobs WHERE experiment_id = ? "  # noqa: S608
                "ORDER BY started_at, job_id",
                (experiment_id,),
            ).fetchall()
        return [_job(row) for row in rows]

    def request_cancel(self, job_id: str) -> JobRecord:
        with self._database.write(f"cancel job {job_id}") as connection:
            current = self._job_in(connection, job_id)
            if not current.finished:
                connection.execute(
                    "UPDATE jobs SET cancel_requested = 1 WHERE job_id = ?", (job_id,)
                )
        return current

    # -- artifacts --------------------------------------------------------------------

    def add_artifact(self, experiment_id: str, path: str, doc: Mapping[str, Any]) -> None:
        with self._database.write(f"record artifact {path}") as connection:
            connection.execute(
                "INSERT OR REPLACE INTO artifacts (experiment_id, path, collected_at, doc) "
                "VALUES (?, ?, ?, ?)",
                (experiment_id, path, time.time(), to_json(dict(doc), "the artifact's record")),
            )

    def artifacts(self, experiment_id: str) -> builtins.list[dict[str, Any]]:
        with self._database.read(f"list experiment {experiment_id}'s artifacts") as connection:
            rows = connection.execute(
                "SELECT path, collected_at, doc FROM artifacts WHERE experiment_id = ? "
                "ORDER BY path",
                (experiment_id,),
            ).fetchall()
        return [
            {"path": path, "collected_at": at, **from_json(doc, f"Artifact {path}'s record")}
            for path, at, doc in rows
        ]

    def mark_artifacts(self, experiment_id: str, doc: Mapping[str, Any]) -> None:
        """Merge `doc` into each of the experiment's artifact records (their files were
        removed: the record says when and why)."""
        with self._database.write(f"mark experiment {experiment_id}'s artifacts") as connection:
            rows = connection.execute(
                "SELECT path, doc FROM artifacts WHERE experiment_id = ?", (experiment_id,)
            ).fetchall()
            for path, current in rows:
                merged = {**from_json(current, f"Artifact {path}'s record"), **doc}
                connection.execute(
                    "UPDATE artifacts SET doc = ? WHERE experiment_id = ? AND path = ?",
                    (to_json(merged, "the artifact's record"), experiment_id, path),
                )

    def ended_at(self, experiment_id: str) -> float | None:
        """When the experiment was last moved to `destroyed`, or None."""
        with self._database.read(f"read when experiment {experiment_id} ended") as connection:
            row = connection.execute(
                "SELECT MAX(at) FROM experiment_states WHERE experiment_id = ? AND to_state = ?",
                (experiment_id, ExperimentState.DESTROYED.value),
            ).fetchone()
        return None if row is None or row[0] is None else float(row[0])

    def _job_in(self, connection: Any, job_id: str) -> JobRecord:
        row = connection.execute(
            f"SELECT {_JOB_COLUMNS} FROM jobs WHERE job_id = ?",  # noqa: S608
            (job_id,),
        ).fetchone()
        if row is None:
            raise StateError(f"Job {job_id} is not recorded.")
        return _job(row)


def _experiment(row: tuple[Any, ...]) -> ExperimentRecord:
    experiment_id, owner, sandbox_id, project, state, reason, created_at, updated_at, doc = row
    return ExperimentRecord(
        experiment_id, owner, sandbox_id, project, state, reason, created_at, updated_at,
        from_json(doc, f"Experiment {experiment_id}'s record"),
    )  # fmt: skip


def _job(row: tuple[Any, ...]) -> JobRecord:
    job_id, experiment_id, kind, state, started_at, finished_at, cancel, doc = row
    return JobRecord(
        job_id, experiment_id, kind, state, started_at, finished_at, bool(cancel),
        from_json(doc, f"Job {job_id}'s record"),
    )  # fmt: skip
