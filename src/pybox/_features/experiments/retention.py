"""What an ended experiment leaves in the state directory, and for how long
(docs/experiments.md, "What is kept").

When an experiment ends (destroyed, failed to start, or its sandbox gone) its
copy of the project (`baseline.tar`) and baseline (`baseline.json`) are removed:
they served the diff, which is recorded first (`changes.json`). What stays is
what a user asked to keep: the collected artifacts, and the changes recorded at
teardown. Those are kept for `artifacts_max_age_days` after the experiment
ended, and while the kept files of all ended experiments fit in
`artifacts_budget_mib`; over the budget, the experiments that ended first lose
theirs first. Both limits are the operator's (`[experiments]` in the config),
stated in every destroy result, and enforced by `prune`: after every destroy,
by `pybox experiment prune`, and when `pybox mcp` starts.

The store's records stay (state history, jobs, the artifacts' paths, sizes and
checksums), each marked with what was removed, when and why: a removed file is
never reported as present. Live experiments are never touched. A folder no
record names (a create interrupted before its record was written) is removed
once it is a day old.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pybox._core.experiment_settings import DAY_S, MIB
from pybox._features.experiments.states import ExperimentState

if TYPE_CHECKING:
    from pybox._features.experiments.ledger import ExperimentRecord
    from pybox._features.experiments.service import Experiments

COPY_FILES = ("baseline.tar", "baseline.json")
ORPHAN_GRACE_S = DAY_S  # a create in progress has a folder before it has a record


@dataclass(frozen=True)
class Removed:
    experiment_id: str
    size_bytes: int
    because: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "experiment_id": self.experiment_id,
            "size_bytes": self.size_bytes,
            "because": self.because,
        }


@dataclass(frozen=True)
class PruneReport:
    """What one prune removed and what the ended experiments still keep."""

    removed: tuple[Removed, ...]
    copies_removed_bytes: int  # copies of ended experiments left by older versions
    kept_experiments: int
    kept_bytes: int
    budget_bytes: int
    max_age_s: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "removed": [item.to_dict() for item in self.removed],
            "removed_bytes": sum(item.size_bytes for item in self.removed),
            "copies_removed_bytes": self.copies_removed_bytes,
            "kept_experiments": self.kept_experiments,
            "kept_bytes": self.kept_bytes,
            "budget_bytes": self.budget_bytes,
            "max_age_days": self.max_age_s / DAY_S,
        }


def policy_text(experiments: Experiments) -> str:
    """The retention policy in force, in words (shown in destroy results)."""
    settings = experiments.settings
    return (
        f"an ended experiment's artifacts and recorded changes are kept "
        f"{settings.artifacts_max_age_s / DAY_S:g} days after it ended "
        f"(artifacts_max_age_days), while the kept files of all ended experiments fit in "
        f"{settings.artifacts_budget_bytes / MIB:g} MiB (artifacts_budget_mib); over the "
        "budget, those that ended first are removed first"
    )


def ended(experiments: Experiments, record: ExperimentRecord) -> dict[str, Any]:
    """Reclaim the copy of an experiment that has just ended, and record what it
    keeps and until when (its `kept` entry, returned)."""
    folder = experiments.experiment_folder(record.experiment_id)
    freed = _remove_copy(folder)
    ended_at = experiments.ledger.ended_at(record.experiment_id) or time.time()
    artifacts = experiments.ledger.artifacts(record.experiment_id)
    kept = {
        "copy_removed_bytes": freed,
        "artifacts": len(artifacts),
        "artifact_bytes": sum(int(a.get("size_bytes", 0)) for a in artifacts),
        "changes_recorded": (folder / "changes.json").is_file(),
        "size_bytes": _size(folder),
        "ended_at": ended_at,
        "until": ended_at + experiments.settings.artifacts_max_age_s,
        "budget_bytes": experiments.settings.artifacts_budget_bytes,
        "policy": policy_text(experiments),
    }
    experiments.ledger.update_doc(record.experiment_id, {"kept": kept})
    return kept


def prune(experiments: Experiments, *, now: float | None = None) -> PruneReport:
    """Apply the policy to every ended experiment (module docstring)."""
    now = time.time() if now is None else now
    settings = experiments.settings
    held: list[tuple[float, ExperimentRecord, int]] = []  # (ended at, record, bytes kept)
    removed: list[Removed] = []
    copies = 0
    known: set[str] = set()
    for listed in experiments.ledger.list(include_destroyed=True):
        known.add(listed.experiment_id)
        record = experiments.get(listed.experiment_id)  # a gone sandbox ends it here
        if record.state != ExperimentState.DESTROYED.value:
            continue
        folder = experiments.experiment_folder(record.experiment_id)
        if not folder.exists():
            continue
        copies += _remove_copy(folder)
        ended_at = experiments.ledger.ended_at(record.experiment_id) or record.updated_at
        size = _size(folder)
        if now - ended_at > settings.artifacts_max_age_s:
            days = settings.artifacts_max_age_s / DAY_S
            removed.append(_remove(experiments, record, size, f"older than {days:g} days", now))
        else:
            held.append((ended_at, record, size))
    held.sort(key=lambda item: (item[0], item[1].experiment_id))
    total = sum(size for _, _, size in held)
    while held and total > settings.artifacts_budget_bytes:
        _, record, size = held.pop(0)
        why = (
            f"the ended experiments kept {total} bytes, over the {settings.artifacts_budget_bytes}"
            "-byte budget; the ones that ended first go first"
        )
        removed.append(_remove(experiments, record, size, why, now))
        total -= size
    _remove_orphans(experiments, known, now)
    return PruneReport(
        removed=tuple(removed),
        copies_removed_bytes=copies,
        kept_experiments=len(held),
        kept_bytes=total,
        budget_bytes=settings.artifacts_budget_bytes,
        max_age_s=settings.artifacts_max_age_s,
    )


def _remove(
    experiments: Experiments, record: ExperimentRecord, size: int, because: str, now: float
) -> Removed:
    shutil.rmtree(experiments.experiment_folder(record.experiment_id), ignore_errors=True)
    mark = {"removed_at": now, "removed_because": because}
    kept = dict(record.doc.get("kept") or {})
    experiments.ledger.update_doc(record.experiment_id, {"kept": {**kept, **mark}})
    experiments.ledger.mark_artifacts(record.experiment_id, mark)
    experiments.sandboxes.store.audit(
        "experiment.prune", record.experiment_id, {"size_bytes": size, "because": because}
    )
    return Removed(record.experiment_id, size, because)


def _remove_copy(folder: Path) -> int:
    freed = 0
    for name in COPY_FILES:
        path = folder / name
        with contextlib.suppress(FileNotFoundError):
            size = path.lstat().st_size
            path.unlink()
            freed += size
    return freed


def _remove_orphans(experiments: Experiments, known: set[str], now: float) -> None:
    try:
        names = os.listdir(experiments.folder)
    except FileNotFoundError:
        return
    for name in names:
        path = experiments.folder / name
        if name in known or not name.startswith("exp-"):
            continue
        with contextlib.suppress(OSError):
            info = path.lstat()
            if stat.S_ISDIR(info.st_mode) and now - info.st_mtime > ORPHAN_GRACE_S:
                shutil.rmtree(path, ignore_errors=True)


def _size(folder: Path) -> int:
    """The bytes of the files under `folder` (links not followed)."""
    total = 0
    for top, _, files in os.walk(folder):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(top, name)).st_size
    return total
