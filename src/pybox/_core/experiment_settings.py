"""The operator's settings for experiments (`[experiments]` in the config file; pure).

A client cannot change them. `project_roots` are the folders a project may be
copied from (`pybox mcp --project-root DIR` adds more for one server); none by
default, so an experiment needs the operator's say-so. The caps bound the one
read-only pass over the project (docs/experiments.md). `artifacts_budget_mib`
and `artifacts_max_age_days` bound what ended experiments keep in the state
directory (their artifacts and recorded changes; `experiments.retention`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from pybox._core.errors import ConfigError

MIB = 1024 * 1024
DAY_S = 86_400
# key: (unit, lowest, highest, scale, field)
EXPERIMENT_NUMBERS: dict[str, tuple[str, int, int, int, str]] = {
    "max_files": ("files", 1, 1_000_000, 1, "max_files"),
    "max_project_mib": ("MiB", 1, 4096, MIB, "max_project_bytes"),
    "max_file_mib": ("MiB", 1, 1024, MIB, "max_file_bytes"),
    "max_artifact_mib": ("MiB", 1, 4096, MIB, "max_artifact_bytes"),
    "artifacts_budget_mib": ("MiB", 1, 1_048_576, MIB, "artifacts_budget_bytes"),
    "artifacts_max_age_days": ("days", 1, 36_500, DAY_S, "artifacts_max_age_s"),
}
EXPERIMENT_KEYS = (*EXPERIMENT_NUMBERS, "project_roots", "skip_names")


@dataclass(frozen=True)
class ExperimentSettings:
    project_roots: tuple[str, ...] = ()
    # Folder names never copied as build output or caches; None: pybox's defaults
    # (docs/experiments.md). Secret-shaped names are never copied, whatever this says.
    skip_names: tuple[str, ...] | None = None
    max_files: int = 20_000
    max_project_bytes: int = 32 * MIB
    max_file_bytes: int = 8 * MIB
    max_artifact_bytes: int = 64 * MIB  # collected artifacts, per experiment
    # What all ended experiments keep (artifacts, recorded changes), and for how long.
    artifacts_budget_bytes: int = 1024 * MIB
    artifacts_max_age_s: int = 30 * DAY_S

    def to_dict(self) -> dict[str, object]:
        return {
            "project_roots": list(self.project_roots),
            "skip_names": None if self.skip_names is None else list(self.skip_names),
            "max_files": self.max_files,
            "max_project_mib": self.max_project_bytes // MIB,
            "max_file_mib": self.max_file_bytes // MIB,
            "max_artifact_mib": self.max_artifact_bytes // MIB,
            "artifacts_budget_mib": self.artifacts_budget_bytes // MIB,
            "artifacts_max_age_days": self.artifacts_max_age_s // DAY_S,
        }

    def with_roots(self, roots: tuple[str, ...]) -> ExperimentSettings:
        return dataclasses.replace(self, project_roots=(*self.project_roots, *roots))

    def with_settings(self, values: Mapping[str, object], source: str) -> ExperimentSettings:
        """Apply `[experiments]` settings; a bad value is a clear config error."""
        changes: dict[str, object] = {}
        for key, raw in values.items():
            if key in ("project_roots", "skip_names"):
                if not isinstance(raw, list) or not all(
                    isinstance(item, str) and item and "/" not in item.strip("/")
                    if key == "skip_names"
                    else isinstance(item, str)
                    for item in raw
                ):
                    what = "folder paths" if key == "project_roots" else "folder names"
                    raise ConfigError(
                        f"{source}: experiments {key} must be a list of {what}, not {raw!r}."
                    )
                changes[key] = tuple(raw)
                continue
            if key not in EXPERIMENT_NUMBERS:
                raise ConfigError(
                    f"{source}: unknown experiments setting {key!r}. Known: "
                    f"{', '.join(EXPERIMENT_KEYS)}."
                )
            unit, low, high, scale, field_name = EXPERIMENT_NUMBERS[key]
            if isinstance(raw, bool) or not isinstance(raw, int) or not low <= raw <= high:
                raise ConfigError(
                    f"{source}: experiments {key} must be a whole number of {unit} from {low} "
                    f"to {high}, not {raw!r}."
                )
            changes[field_name] = raw * scale
        settings = dataclasses.replace(self, **changes)  # type: ignore[arg-type]
        if "artifacts_budget_bytes" not in changes:  # the default grows with the cap
            budget = max(settings.artifacts_budget_bytes, settings.max_artifact_bytes)
            settings = dataclasses.replace(settings, artifacts_budget_bytes=budget)
        if settings.artifacts_budget_bytes < settings.max_artifact_bytes:
            # One experiment's artifacts must fit, or a destroy would lose them at once.
            raise ConfigError(
                f"{source}: experiments artifacts_budget_mib "
                f"({settings.artifacts_budget_bytes // MIB}) is below max_artifact_mib "
                f"({settings.max_artifact_bytes // MIB}); the budget for all ended experiments "
                "must hold at least one experiment's artifacts."
            )
        return settings
