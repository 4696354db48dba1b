"""The experiments' records: moves checked against the state machine in the same
transaction, jobs ended once, a job whose runner died found out."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from pybox._core.errors import IllegalTransition, StateError
from pybox._features.experiments.ledger import ExperimentRecord, JobRecord, Ledger
from pybox._features.experiments.states import ExperimentState
from pybox._features.store import Store


def ledger(tmp_path: Path) -> Ledger:
    return Ledger(Store.open(tmp_path).database)


def record(experiment_id: str = "exp-000000000001") -> ExperimentRecord:
    now = time.time()
    return ExperimentRecord(
        experiment_id, "me", None, "/p", "creating", "create requested", now, now, {"a": 1}
    )


def test_moves_follow_the_state_machine_and_keep_a_history(tmp_path: Path) -> None:
    book = ledger(tmp_path)
    book.add(record())
    book.update_doc("exp-000000000001", {"b": 2}, sandbox_id="sbx-1")
    ready = book.move("exp-000000000001", ExperimentState.READY, "copied")
    assert (ready.state, ready.sandbox_id, dict(ready.doc)) == ("ready", "sbx-1", {"a": 1, "b": 2})
    book.move("exp-000000000001", ExperimentState.RUNNING, "job")
    with pytest.raises(IllegalTransition):
        book.move("exp-000000000001", ExperimentState.RUNNING, "a second job at once")
    book.move("exp-000000000001", ExperimentState.COMPLETED, "done")
    book.move("exp-000000000001", ExperimentState.DESTROYED, "gone")
    with pytest.raises(IllegalTransition):
        book.move("exp-000000000001", ExperimentState.READY, "back from the dead")
    history = [h["to"] for h in book.history("exp-000000000001")]
    assert history == ["creating", "ready", "running", "completed", "destroyed"]
    assert book.get("exp-000000000001").state == "destroyed"  # type: ignore[union-attr]
    assert book.list() == [] and len(book.list(include_destroyed=True)) == 1


def test_a_job_ends_once_and_cancel_is_a_flag(tmp_path: Path) -> None:
    book = ledger(tmp_path)
    book.add(record())
    job = JobRecord("job-1", "exp-000000000001", "command", "running", time.time(), None, False,
                    {"argv": ["true"]})  # fmt: skip
    book.add_job(job)
    assert book.request_cancel("job-1").cancel_requested is False
    assert book.get_job("job-1").cancel_requested is True  # type: ignore[union-attr]
    done = book.finish_job("job-1", "cancelled", {"exit_code": None})
    assert done.finished and done.doc["argv"] == ["true"]
    with pytest.raises(StateError, match="already ended"):
        book.finish_job("job-1", "completed", {})
    with pytest.raises(StateError, match="not how a job ends"):
        book.finish_job("job-1", "running", {})


def test_the_operator_sets_the_skip_names_and_bad_values_are_config_errors() -> None:
    from pybox._core.errors import ConfigError
    from pybox._core.experiment_settings import ExperimentSettings

    settings = ExperimentSettings().with_settings({"skip_names": ["out", "*.tmp"]}, "f.toml")
    assert settings.skip_names == ("out", "*.tmp")
    for bad in ({"skip_names": "out"}, {"skip_names": ["a/b"]}, {"max_files": 0},
                {"project_roots": [1]}, {"nope": 1}):  # fmt: skip
        with pytest.raises(ConfigError, match=r"f\.toml"):
            ExperimentSettings().with_settings(bad, "f.toml")
