"""What an ended experiment leaves in the state directory: its copy goes at once,
what a user asked to keep stays until the operator's age and budget, stated in
every result, and the store's records say what was removed, when and why."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path
from typing import Any

import pytest

from pybox._adapters.state import StateStore
from pybox._core.errors import ConfigError, SandboxError
from pybox._core.experiment_settings import DAY_S, MIB, ExperimentSettings
from pybox._features.experiments import retention
from pybox._features.experiments.ledger import ExperimentRecord
from pybox._features.experiments.service import Experiments
from pybox._features.experiments.states import ExperimentState
from pybox._orchestration.session import Session
from tests.unit.conftest import make_session
from tests.unit.fake_engine import FakeEngine


class BoxlessSandboxes:
    """The real store; no box is ever made: `create` notes the copy's file mode
    at the moment a box would be made, then fails as an engine error would."""

    def __init__(self, session: Session) -> None:
        self.store = session.sandboxes().store
        self.seen_modes: list[int] = []
        self.folder: Path | None = None

    def create(self, **_: Any) -> Any:
        assert self.folder is not None
        tars = list(self.folder.glob("exp-*/baseline.tar"))
        self.seen_modes += [stat.S_IMODE(path.stat().st_mode) for path in tars]
        raise SandboxError("the engine said no (a test)")


def service(
    engine: FakeEngine, state: StateStore, tmp_path: Path, **settings: Any
) -> tuple[Experiments, BoxlessSandboxes]:
    session = make_session(engine, state)
    sandboxes = BoxlessSandboxes(session)
    chosen = ExperimentSettings(project_roots=(str(tmp_path),), **settings)
    experiments = Experiments(session, sandboxes, chosen)  # type: ignore[arg-type]
    sandboxes.folder = experiments.folder
    return experiments, sandboxes


def ended_experiment(
    experiments: Experiments,
    experiment_id: str,
    *,
    artifact_bytes: int = 100,
    ended_days_ago: float = 0.0,
) -> Path:
    """An experiment that ran, collected one artifact and was destroyed: its files as
    an older pybox left them (the copy too), and its records."""
    now = time.time()
    experiments.ledger.add(
        ExperimentRecord(experiment_id, "me", None, "/p", "creating", "create", now, now, {})
    )
    folder = experiments.experiment_folder(experiment_id, create=True)
    (folder / "baseline.tar").write_bytes(b"t" * 1000)
    (folder / "baseline.json").write_bytes(b"[]")
    (folder / "changes.json").write_bytes(b"{}")
    (folder / "artifacts").mkdir()
    (folder / "artifacts" / "abc").write_bytes(b"a" * artifact_bytes)
    experiments.ledger.add_artifact(
        experiment_id, "out.txt", {"size_bytes": artifact_bytes, "sha256": "abc"}
    )
    experiments.ledger.move(experiment_id, ExperimentState.DESTROYED, "a test")
    if ended_days_ago:
        with experiments.sandboxes.store.database.write("age it") as connection:
            connection.execute(
                "UPDATE experiment_states SET at = ? WHERE experiment_id = ?",
                (now - ended_days_ago * DAY_S, experiment_id),
            )
    return folder


def test_the_copy_is_written_0600_from_the_start_and_removed_when_creation_fails(
    engine: FakeEngine, state: StateStore, tmp_path: Path
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "main.py").write_text("print(1)\n")
    experiments, sandboxes = service(engine, state, tmp_path)
    with pytest.raises(SandboxError):
        experiments.create(str(project))
    assert sandboxes.seen_modes == [0o600]
    (record,) = experiments.ledger.list(include_destroyed=True)
    folder = experiments.experiment_folder(record.experiment_id)
    assert record.state == "destroyed" and not (folder / "baseline.tar").exists()
    assert not (folder / "baseline.json").exists()
    assert record.doc["kept"]["copy_removed_bytes"] > 0


def test_destroy_removes_the_copy_and_says_what_is_kept_and_until_when(
    engine: FakeEngine, state: StateStore, tmp_path: Path
) -> None:
    experiments, _ = service(engine, state, tmp_path, artifacts_max_age_s=7 * DAY_S)
    now = time.time()
    experiments.ledger.add(
        ExperimentRecord("exp-00000000000a", "me", None, "/p", "creating", "c", now, now, {})
    )
    folder = experiments.experiment_folder("exp-00000000000a", create=True)
    (folder / "baseline.tar").write_bytes(b"t" * 1000)
    (folder / "baseline.json").write_bytes(b"[]")
    (folder / "artifacts").mkdir()
    (folder / "artifacts" / "abc").write_bytes(b"a" * 10)
    experiments.ledger.add_artifact("exp-00000000000a", "out.txt", {"size_bytes": 10})
    final, was_live = experiments.destroy("exp-00000000000a")
    assert was_live and final["state"] == "destroyed"
    assert sorted(os.listdir(folder)) == ["artifacts"]
    kept = final["kept"]
    assert kept["copy_removed_bytes"] == 1002 and kept["artifacts"] == 1
    assert kept["artifact_bytes"] == 10 and kept["size_bytes"] == 10
    assert kept["until"] == pytest.approx(kept["ended_at"] + 7 * DAY_S)
    assert "7 days" in kept["policy"] and "artifacts_budget_mib" in kept["policy"]
    again, was_live = experiments.destroy("exp-00000000000a")
    assert not was_live and again["kept"] == kept


def test_prune_removes_what_is_older_than_the_age_and_marks_the_records(
    engine: FakeEngine, state: StateStore, tmp_path: Path
) -> None:
    experiments, _ = service(engine, state, tmp_path, artifacts_max_age_s=3 * DAY_S)
    old = ended_experiment(experiments, "exp-000000000001", ended_days_ago=4)
    young = ended_experiment(experiments, "exp-000000000002", ended_days_ago=2)
    pruned = experiments.prune()
    assert [r["experiment_id"] for r in pruned["removed"]] == ["exp-000000000001"]
    assert "older than 3 days" in pruned["removed"][0]["because"]
    assert not old.exists() and sorted(os.listdir(young)) == ["artifacts", "changes.json"]
    assert pruned["copies_removed_bytes"] == 2 * 1002 and pruned["kept_experiments"] == 1
    record = experiments.get("exp-000000000001")
    assert record.doc["kept"]["removed_because"] == pruned["removed"][0]["because"]
    (artifact,) = experiments.ledger.artifacts("exp-000000000001")
    assert artifact["removed_at"] and "older than" in artifact["removed_because"]
    changes = experiments.inspect_changes("exp-000000000001")
    assert changes["available"] is False and "removed" in changes["note"]
    assert experiments.ledger.artifacts("exp-000000000002")[0].get("removed_at") is None


def test_prune_holds_ended_experiments_to_the_budget_oldest_first(
    engine: FakeEngine, state: StateStore, tmp_path: Path
) -> None:
    experiments, _ = service(
        engine, state, tmp_path, artifacts_budget_bytes=MIB, max_artifact_bytes=MIB
    )
    third_of = MIB // 3  # three over the budget (with their recorded changes), two within
    first = ended_experiment(
        experiments, "exp-000000000001", artifact_bytes=third_of, ended_days_ago=3
    )
    second = ended_experiment(
        experiments, "exp-00000000000b", artifact_bytes=third_of, ended_days_ago=2
    )
    third = ended_experiment(
        experiments, "exp-000000000003", artifact_bytes=third_of, ended_days_ago=1
    )
    pruned = experiments.prune()
    assert [r["experiment_id"] for r in pruned["removed"]] == ["exp-000000000001"]
    assert "budget" in pruned["removed"][0]["because"]
    assert not first.exists() and second.exists() and third.exists()
    assert pruned["kept_bytes"] <= MIB and pruned["kept_experiments"] == 2
    assert experiments.prune()["removed"] == []  # within the budget now: nothing more


def test_live_experiments_and_fresh_folders_are_never_pruned(
    engine: FakeEngine, state: StateStore, tmp_path: Path
) -> None:
    experiments, _ = service(engine, state, tmp_path, artifacts_budget_bytes=MIB)
    now = time.time()
    experiments.ledger.add(
        ExperimentRecord("exp-00000000000c", "me", None, "/p", "creating", "c", now, now, {})
    )
    live = experiments.experiment_folder("exp-00000000000c", create=True)
    (live / "baseline.tar").write_bytes(b"t" * (2 * MIB))
    young_orphan = experiments.experiment_folder("exp-00000000000d", create=True)
    old_orphan = experiments.experiment_folder("exp-00000000000e", create=True)
    os.utime(old_orphan, (now - 2 * DAY_S, now - 2 * DAY_S))
    assert experiments.prune()["removed"] == []
    assert (live / "baseline.tar").exists() and young_orphan.exists()
    assert not old_orphan.exists()


def test_the_retention_settings_are_the_operators_with_checked_values() -> None:
    settings = ExperimentSettings().with_settings(
        {"artifacts_budget_mib": 256, "artifacts_max_age_days": 3}, "config.toml"
    )
    assert settings.artifacts_budget_bytes == 256 * MIB
    assert settings.artifacts_max_age_s == 3 * DAY_S
    assert settings.to_dict()["artifacts_max_age_days"] == 3
    assert ExperimentSettings().artifacts_budget_bytes == 1024 * MIB
    assert ExperimentSettings().artifacts_max_age_s == 30 * DAY_S
    with pytest.raises(ConfigError, match="artifacts_max_age_days must be a whole number"):
        ExperimentSettings().with_settings({"artifacts_max_age_days": 0}, "config.toml")
    with pytest.raises(ConfigError, match="below max_artifact_mib"):
        ExperimentSettings().with_settings({"artifacts_budget_mib": 8}, "config.toml")
    # A cap above the default budget raises the default budget with it.
    grown = ExperimentSettings().with_settings({"max_artifact_mib": 2048}, "config.toml")
    assert grown.artifacts_budget_bytes == 2048 * MIB


def test_the_policy_is_stated_in_words() -> None:
    class Holder:
        settings = ExperimentSettings(artifacts_budget_bytes=5 * MIB, artifacts_max_age_s=DAY_S)

    words = retention.policy_text(Holder())  # type: ignore[arg-type]
    assert "1 days" in words and "5 MiB" in words and "ended first are removed first" in words


def test_a_copy_stopped_by_a_cap_leaves_no_folder_behind(
    engine: FakeEngine, state: StateStore, tmp_path: Path
) -> None:
    from pybox._core.errors import ProjectTooBig

    project = tmp_path / "project"
    project.mkdir()
    for name in ("a.py", "b.py", "c.py"):
        (project / name).write_text("x = 1\n")
    experiments, _ = service(engine, state, tmp_path, max_files=2)
    with pytest.raises(ProjectTooBig):
        experiments.create(str(project))
    assert list(experiments.folder.iterdir()) == []
    assert experiments.ledger.list(include_destroyed=True) == []
