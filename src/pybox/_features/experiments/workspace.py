"""What is in an experiment's copy: its files, what changed against the baseline,
and artifacts lifted out into the store (docs/experiments.md).

The box's answers are untrusted: the digest listing is parsed by
`tree.entries_from_json` (shapes and sizes checked), archives the box packs are
read member by member, regular files only, names matched against what was
asked. The baseline's side of a diff comes from the archive pybox itself made
of the project, never from the box.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pybox._adapters.host_files import replace_file
from pybox._core.errors import InvalidRequest, LimitExceeded, SandboxError
from pybox._features.experiments.changes import diff_trees, render_diff
from pybox._features.experiments.ledger import ExperimentRecord
from pybox._features.experiments.secrets import secret_reason
from pybox._features.experiments.states import ExperimentState
from pybox._features.experiments.tree import TreeEntry, entries_from_json
from pybox._features.sandboxes import fileops
from pybox._features.sandboxes.paths import workspace_path
from pybox._features.sandboxes.records import FILES_SOURCE

if TYPE_CHECKING:
    from pybox._features.experiments.service import Experiments

MAX_ENTRIES = 50_000
MAX_ARTIFACTS = 64
DIFF_BYTES = 256 * 1024
# pybox's own places in a sandbox's workspace: never part of the project's changes.
OWN_NAMES = frozenset({".pybox-packages"})
BASELINE_SOURCE = "pybox's copy of the project, digested on the host before the box existed"


def baseline_entries(experiments: Experiments, experiment_id: str) -> tuple[TreeEntry, ...]:
    path = experiments.experiment_folder(experiment_id) / "baseline.json"
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SandboxError(
            f"Experiment {experiment_id}'s baseline {path} cannot be read ({exc.strerror}); "
            "its changes cannot be shown. Create a new experiment."
        ) from exc
    return entries_from_json(data, MAX_ENTRIES)


def baseline_reader(
    experiments: Experiments, experiment_id: str, max_bytes: int = 1024 * 1024
) -> tuple[frozenset[str], Callable[[str], bytes | None]]:
    """The project's paths as copied, and a reader of their content as copied."""
    entries = baseline_entries(experiments, experiment_id)
    paths = frozenset(e.path for e in entries if e.kind == "file")
    tar_path = experiments.experiment_folder(experiment_id) / "baseline.tar"

    def read(path: str) -> bytes | None:
        if path not in paths:
            return None
        return _member(tar_path, path, max_bytes)

    return paths, read


def _member(tar_path: Path, name: str, max_bytes: int) -> bytes | None:
    with tarfile.open(tar_path, "r:") as archive:
        try:
            member = archive.getmember(name)
        except KeyError:
            return None
        if not member.isfile() or member.size > max_bytes:
            return None
        source = archive.extractfile(member)
        return None if source is None else source.read()


def _secret(path: str, kind: str) -> bool:
    """Secret-shaped names are never part of the changes: the copy never had them,
    and what the box made under such a name is not shown either."""
    return secret_reason(tuple(path.split("/")), kind == "folder") is not None


def current_entries(experiments: Experiments, record: ExperimentRecord) -> tuple[TreeEntry, ...]:
    assert record.sandbox_id is not None
    # What the copy skipped by name (caches, build output) and pybox's own folders
    # are left out in the box: not hashed, not part of the changes.
    skip = (*sorted(experiments.policy().skip_names), *sorted(OWN_NAMES))
    outcome = experiments.sandboxes.run(
        record.sandbox_id,
        fileops.digest_request("", MAX_ENTRIES, skip_names=skip),
        kind="experiment.inspect",
    )
    report = fileops.outcome_report(outcome, ".", "digest")
    if report.get("complete") is not True:
        raise LimitExceeded(
            f"Experiment {record.experiment_id}'s copy holds more than {MAX_ENTRIES} entries; "
            "its changes cannot be listed. Remove generated files first."
        )
    return tuple(
        e for e in entries_from_json(outcome.stdout, MAX_ENTRIES) if not _secret(e.path, e.kind)
    )


def packed(
    experiments: Experiments, record: ExperimentRecord, paths: Sequence[str], max_bytes: int
) -> dict[str, bytes]:
    """The regular files `paths` of the experiment's copy, read by pybox's file
    program in the box and sent as one archive (untrusted: checked here)."""
    if not paths:
        return {}
    assert record.sandbox_id is not None
    outcome = experiments.sandboxes.run(
        record.sandbox_id, fileops.pack_request(tuple(paths), max_bytes), kind="experiment.pack"
    )
    fileops.outcome_report(outcome, ", ".join(paths)[:200], "pack")
    wanted = set(paths)
    found: dict[str, bytes] = {}
    try:
        with tarfile.open(fileobj=io.BytesIO(outcome.stdout), mode="r:") as archive:
            for member in archive:
                if member.name not in wanted or not member.isfile() or member.name in found:
                    raise SandboxError(
                        f"The box's archive for experiment {record.experiment_id} held an "
                        "entry pybox did not ask for; nothing was taken from it."
                    )
                source = archive.extractfile(member)
                found[member.name] = b"" if source is None else source.read()
    except tarfile.TarError as exc:
        raise SandboxError(
            f"The box's archive for experiment {record.experiment_id} could not be read "
            f"({exc}); nothing was taken from it."
        ) from exc
    return found


def inspect_changes(experiments: Experiments, experiment_id: object) -> dict[str, Any]:
    """Created, modified and deleted files against the baseline, with a bounded
    unified diff. After teardown: what was recorded before the box was removed."""
    record = experiments.get(experiment_id)
    saved = experiments.experiment_folder(record.experiment_id) / "changes.json"
    if record.state == ExperimentState.DESTROYED.value:
        try:
            result: dict[str, Any] = json.loads(saved.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            kept = record.doc.get("kept") or {}
            note = (
                f"the changes recorded at teardown were removed ({kept['removed_because']})"
                if kept.get("removed_because")
                else f"no changes were recorded before the experiment ended ({record.reason})"
            )
            return {"experiment_id": record.experiment_id, "available": False, "note": note}
        return result | {"recorded_at_teardown": True}
    record = experiments.usable(record.experiment_id, "inspect_changes")
    result = _changes(experiments, record)
    _save(saved, result)
    experiments.ledger.update_doc(record.experiment_id, {"changes": result["stats"]})
    return result


def _changes(experiments: Experiments, record: ExperimentRecord) -> dict[str, Any]:
    baseline = baseline_entries(experiments, record.experiment_id)
    changes = diff_trees(baseline, current_entries(experiments, record))
    limits = experiments.sandboxes.get(record.sandbox_id or "").limits
    new_files = [
        c.path for c in (*changes.created, *changes.modified) if c.new and c.new.kind == "file"
    ]
    contents = packed(experiments, record, new_files, limits.output_bytes)
    _, read_old = baseline_reader(experiments, record.experiment_id, limits.output_bytes)
    rendered = render_diff(changes, read_old, contents.get, max_bytes=DIFF_BYTES)
    described = changes.to_dict()
    return {
        "experiment_id": record.experiment_id,
        "available": True,
        # Who established each side: the baseline is pybox's own record, made on
        # the host; the copy's side was read by pybox's file program in the box.
        "source": {"baseline": BASELINE_SOURCE, "current": FILES_SOURCE},
        **described,
        "stats": {
            **changes.stats(),
            "lines_added": rendered.lines_added,
            "lines_removed": rendered.lines_removed,
        },
        "diff": rendered.text,
        "diff_truncated": rendered.truncated,
        "binary": list(rendered.binary),
    }


def final_changes(experiments: Experiments, record: ExperimentRecord) -> dict[str, Any]:
    """The changes, recorded before the box is removed (destroy_experiment)."""
    saved = experiments.experiment_folder(record.experiment_id) / "changes.json"
    result = _changes(experiments, record)
    _save(saved, result)
    return result


def collect_artifacts(
    experiments: Experiments, experiment_id: object, paths: object
) -> list[dict[str, Any]]:
    """Copy files out of the experiment into the store, with their checksums."""
    if not isinstance(paths, list | tuple) or not paths:
        raise InvalidRequest("paths must be a non-empty list of files in the experiment.")
    if len(paths) > MAX_ARTIFACTS:
        raise InvalidRequest(f"{len(paths)} paths asked for; at most {MAX_ARTIFACTS} at once.")
    relative = list(dict.fromkeys(workspace_path(path) for path in paths))
    record = experiments.usable(experiment_id, "collect_artifacts")
    kept = sum(a.get("size_bytes", 0) for a in experiments.ledger.artifacts(record.experiment_id))
    budget = experiments.settings.max_artifact_bytes - kept
    limits = experiments.sandboxes.get(record.sandbox_id or "").limits
    if budget <= 0:
        raise LimitExceeded(
            f"Experiment {record.experiment_id} already keeps {kept} bytes of artifacts; the "
            f"operator allows {experiments.settings.max_artifact_bytes}."
        )
    files = packed(experiments, record, relative, min(budget, limits.output_bytes))
    missing = [path for path in relative if path not in files]
    if missing:
        raise SandboxError(
            f"The box's archive lacked {', '.join(map(repr, missing[:5]))}; nothing was kept."
        )
    folder = experiments.experiment_folder(record.experiment_id) / "artifacts"
    folder.mkdir(mode=0o700, exist_ok=True)
    collected = []
    for path in relative:
        data = files[path]
        digest = hashlib.sha256(data).hexdigest()
        target = folder / digest
        if not target.exists():
            _write_private(target, data)
        entry = {"size_bytes": len(data), "sha256": digest, "stored_as": str(target)}
        experiments.ledger.add_artifact(record.experiment_id, path, entry)
        collected.append({"path": path, **entry})
    return collected


def _save(path: Path, value: Any) -> None:
    _write_private(path, json.dumps(value).encode("utf-8"))


def _write_private(path: Path, data: bytes) -> None:
    # The bytes came from the box: under a random new name, then renamed (never
    # through a link or an earlier file at a name that could be guessed).
    replace_file(path, data, 0o600)
