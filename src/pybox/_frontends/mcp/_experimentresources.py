"""The experiments' resources: pybox://experiments, pybox://experiments/{id}
(metadata and state history), .../logs (every command with its output),
.../diff (the changes against the baseline) and .../artifacts.

They are data (JSON): program output and the diff sit in their own fields, as in
the tools' structuredContent, never in pybox's own words.
"""

from __future__ import annotations

import json
from typing import Any

from pybox._core.errors import PyboxError
from pybox._frontends.mcp._protocol import JSONObject
from pybox._frontends.mcp._toolbox import Toolbox

PREFIX = "pybox://experiments"
PARTS = ("logs", "diff", "artifacts")


def offered(toolbox: Toolbox) -> bool:
    return "experiments" in toolbox.groups


def listed(toolbox: Toolbox) -> list[JSONObject]:
    if not offered(toolbox):
        return []
    return [
        {
            "uri": PREFIX,
            "name": "experiments",
            "title": "The experiments",
            "description": "Every experiment of this state directory, with its state.",
            "mimeType": "application/json",
        }
    ]


def templates(toolbox: Toolbox) -> list[JSONObject]:
    if not offered(toolbox):
        return []
    named = {
        "": ("experiment", "An experiment's record and state history"),
        "/logs": ("experiment-logs", "Every command run in the experiment, with its output"),
        "/diff": ("experiment-diff", "The experiment's changes against its baseline"),
        "/artifacts": ("experiment-artifacts", "Files collected from the experiment"),
    }
    return [
        {
            "uriTemplate": f"{PREFIX}/{{experiment_id}}{suffix}",
            "name": name,
            "title": title,
            "mimeType": "application/json",
        }
        for suffix, (name, title) in named.items()
    ]


def read(toolbox: Toolbox, uri: str) -> tuple[str, bool]:
    """The JSON text at `uri` and whether it can no longer change. A PyboxError
    (unknown id) is the caller's to turn into 'resource not found'."""
    experiments = toolbox.session.experiments()
    if uri == PREFIX:
        records = experiments.list(include_destroyed=True)
        from pybox._features.experiments.lifecycle import experiment_dict

        data: Any = {"experiments": [experiment_dict(experiments, r) for r in records]}
        return json.dumps(data, indent=2), False
    experiment_id, _, part = uri[len(PREFIX) + 1 :].partition("/")
    if part and part not in PARTS:
        raise ResourcePartUnknown(f"{uri}: experiments have {', '.join(PARTS)}, not {part!r}.")
    record = experiments.get(experiment_id)
    final = record.state == "destroyed"
    if part == "":
        data = experiments.report(experiment_id)
    elif part == "logs":
        from pybox._features.experiments.lifecycle import job_dict

        jobs = experiments.ledger.jobs(record.experiment_id)
        data = {"experiment_id": record.experiment_id,
                "jobs": [job_dict(job, with_output=True) for job in jobs]}  # fmt: skip
        final = final and all(job.finished for job in jobs)
    elif part == "diff":
        data = experiments.inspect_changes(experiment_id)
    else:
        data = {
            "experiment_id": record.experiment_id,
            "artifacts": experiments.ledger.artifacts(record.experiment_id),
        }
    return json.dumps(data, indent=2), final


class ResourcePartUnknown(PyboxError):
    """A URI under pybox://experiments/{id}/ names no part."""
