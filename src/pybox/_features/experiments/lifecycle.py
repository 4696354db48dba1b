"""The rest of an experiment's life: its files, its report, its teardown, and
comparing experiments (docs/experiments.md)."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pybox._core.errors import InvalidRequest, PyboxError
from pybox._features.experiments.compare import ExperimentOutcome, compare
from pybox._features.experiments.ledger import ExperimentRecord, JobRecord
from pybox._features.experiments.states import ExperimentState
from pybox._features.experiments.testing.summary import TestSummary

if TYPE_CHECKING:
    from pybox._features.experiments.service import Experiments

MAX_COMPARED = 10
JOBS_IN_REPORT = 50


def read_file(experiments: Experiments, experiment_id: object, path: object) -> bytes:
    record = experiments.usable(experiment_id, "read_sandbox_file")
    assert record.sandbox_id is not None
    return experiments.sandboxes.read_file(record.sandbox_id, path)


def write_file(
    experiments: Experiments, experiment_id: object, path: object, data: bytes
) -> dict[str, Any]:
    record = experiments.usable(experiment_id, "write_sandbox_file")
    assert record.sandbox_id is not None
    written = experiments.sandboxes.write_file(record.sandbox_id, path, data)
    return written | {"experiment_id": record.experiment_id}


def job_dict(job: JobRecord, *, with_output: bool = False) -> dict[str, Any]:
    doc = dict(job.doc)
    described: dict[str, Any] = {
        "job_id": job.job_id,
        "experiment_id": job.experiment_id,
        "kind": job.kind,
        "state": job.state,
        "argv": doc.get("argv", []),
        "started_at": job.started_at,
        "finished_at": job.finished_at,
        "cancel_requested": job.cancel_requested,
    }
    for key in ("exit_code", "status", "run_id", "duration_s", "error", "tests", "timeout_s"):
        if key in doc:
            described[key] = doc[key]
    if with_output:
        for key in ("stdout", "stderr", "stdout_bytes", "stderr_bytes"):
            if key in doc:
                described[key] = doc[key]
    return described


def experiment_dict(experiments: Experiments, record: ExperimentRecord) -> dict[str, Any]:
    doc = dict(record.doc)
    described: dict[str, Any] = {
        "experiment_id": record.experiment_id,
        "project": record.project,
        "state": record.state,
        "reason": record.reason,
        "created_at": record.created_at,
        "updated_at": record.updated_at,
        "environment": doc.get("environment"),
        "sandbox_id": record.sandbox_id,
        "copy": doc.get("copy", {}),
        "env_names": doc.get("env_names", []),
        "libraries": doc.get("libraries", []),
    }
    for key in ("tests", "changes", "last_job", "kept"):
        if key in doc:
            described[key] = doc[key]
    return described


def report(experiments: Experiments, record: ExperimentRecord) -> dict[str, Any]:
    """Everything recorded about an experiment: its state history, its jobs (no
    output: see the logs resource), its artifacts, its last tests and changes."""
    jobs = experiments.ledger.jobs(record.experiment_id)
    return {
        **experiment_dict(experiments, record),
        "history": experiments.ledger.history(record.experiment_id),
        "jobs": [job_dict(job) for job in jobs[-JOBS_IN_REPORT:]],
        "jobs_count": len(jobs),
        "artifacts": experiments.ledger.artifacts(record.experiment_id),
    }


def destroy(experiments: Experiments, experiment_id: object) -> tuple[dict[str, Any], bool]:
    """Tear the experiment down: a running job is cancelled, the changes are
    recorded, the sandbox is destroyed (the engine confirms the box gone), and
    only then is the experiment `destroyed`. Idempotent: an experiment destroyed
    before returns its final report. Returns (report, was_live)."""
    record = experiments.get(experiment_id)
    if record.state == ExperimentState.DESTROYED.value:
        return report(experiments, record), False
    running = experiments.jobs.running(record.experiment_id)
    if running is not None:
        experiments.jobs.cancel(running.job_id)
        record = experiments.get(record.experiment_id)
    note: dict[str, Any] = {}
    if record.sandbox_id is not None and record.state != ExperimentState.CREATING.value:
        from pybox._features.experiments.workspace import final_changes

        try:
            note["changes"] = final_changes(experiments, record)["stats"]
        except PyboxError as exc:
            note["changes_error"] = f"the changes could not be read before teardown: {exc}"[:500]
        experiments.sandboxes.destroy(record.sandbox_id)  # raises unless confirmed
    done = experiments.ledger.move(
        record.experiment_id,
        ExperimentState.DESTROYED,
        "destroy requested; the engine confirmed its box is gone",
        doc=note,
    )
    experiments.sandboxes.store.audit("experiment.destroy", record.experiment_id, {})
    from pybox._features.experiments import retention

    experiments._ended(done)
    # Each destroy holds all ended experiments to the budget; the one just ended
    # stays unless it alone is over it. A failed sweep is retried by the next one.
    with contextlib.suppress(PyboxError, OSError):
        retention.prune(experiments)
    return report(experiments, experiments.get(record.experiment_id)), True


def outcome_of(experiments: Experiments, record: ExperimentRecord) -> ExperimentOutcome:
    doc = dict(record.doc)
    tests = doc.get("tests")
    summary = _summary(tests) if isinstance(tests, dict) else None
    changes = doc.get("changes") or {}
    test_job = experiments.ledger.get_job(tests["job_id"]) if isinstance(tests, dict) else None
    last = experiments.ledger.get_job(doc["last_job"]) if doc.get("last_job") else None
    return ExperimentOutcome(
        experiment_id=record.experiment_id,
        project=record.project,
        tests=summary,
        exit_code=None if last is None else last.doc.get("exit_code"),
        files_changed=int(changes.get("created", 0) + changes.get("modified", 0))
        + int(changes.get("deleted", 0)),
        lines_changed=int(changes.get("lines_added", 0) + changes.get("lines_removed", 0)),
        duration_s=None if test_job is None else test_job.doc.get("duration_s"),
        state=record.state,
    )


def _summary(recorded: dict[str, Any]) -> TestSummary:
    """A test run's summary as the store keeps it (pybox's own record)."""
    return TestSummary(
        runner=str(recorded.get("runner", "")),
        parsed=bool(recorded.get("parsed")),
        passed=int(recorded.get("passed", 0)),
        failed=int(recorded.get("failed", 0)),
        skipped=int(recorded.get("skipped", 0)),
        errors=int(recorded.get("errors", 0)),
        failing=tuple(recorded.get("failing", ())),
        failing_truncated=bool(recorded.get("failing_truncated")),
        exit_code=recorded.get("exit_code"),
        note=str(recorded.get("note", "")),
    )


def compare_experiments(experiments: Experiments, experiment_ids: object) -> dict[str, Any]:
    """Rank experiments on one project (failing tests, exit status, size of the
    change, duration). Live experiments' changes are read afresh first."""
    if not isinstance(experiment_ids, list | tuple) or not all(
        isinstance(item, str) for item in experiment_ids
    ):
        raise InvalidRequest("experiment_ids must be a list of experiment ids.")
    if len(experiment_ids) > MAX_COMPARED:
        raise InvalidRequest(
            f"{len(experiment_ids)} experiments given; at most {MAX_COMPARED} are compared."
        )
    outcomes = []
    for experiment_id in experiment_ids:
        record = experiments.get(experiment_id)
        if (
            record.state != ExperimentState.DESTROYED.value
            and experiments.jobs.running(record.experiment_id) is None
        ):
            from pybox._features.experiments.workspace import inspect_changes

            inspect_changes(experiments, record.experiment_id)
            record = experiments.get(record.experiment_id)
        outcomes.append(outcome_of(experiments, record))
    return compare(outcomes).to_dict()


def runtime_check(experiments: Experiments) -> dict[str, Any]:
    """Is the engine reachable, and what policy is in force (check_sandbox_runtime)."""
    session = experiments.session
    engine: dict[str, Any]
    try:
        version = session.engine.version()
        engine = {"reachable": True, "version": version.get("Version")}
    except PyboxError as exc:
        engine = {"reachable": False, "error": str(exc)[:500]}
    policy = session.policy
    return {
        "engine": engine,
        "environments": sorted(session.recorded_images()),
        "network": "none",
        "project_roots": list(experiments.settings.project_roots),
        "experiments": experiments.settings.to_dict(),
        "defaults": policy.defaults.to_dict(),
        "ceilings": policy.ceilings.to_dict(),
        "allow_credential_env": policy.allow_credential_env,
    }


def ids_of(records: Sequence[ExperimentRecord]) -> list[str]:
    return [record.experiment_id for record in records]
