"""The `experiments` tool group: a copy of a project to break, with tests, diffs
and comparisons (the names agents know from Sandbox MCP).

No tool names the engine, an image reference, a mount, a network or a
capability: the agent states an intent and pybox decides how. Everything that
came from inside the box (program output, file names it listed, the diff of
files it wrote) is shown only inside fenced, untrusted sections; the JSON in
structuredContent carries the same facts as data.
"""

from __future__ import annotations

import json
import time
from typing import Any

from pybox._core.errors import InvalidRequest
from pybox._core.limits import LimitRequest
from pybox._frontends.mcp._protocol import JSONObject
from pybox._frontends.mcp._sections import Section, fenced_sections
from pybox._frontends.mcp._toolbox import CallContext, Toolbox, text_result

GROUP = "experiments"
MAX_WAIT_S = 300.0


def _experiments(toolbox: Toolbox) -> Any:
    return toolbox.session.experiments()


def _result(text: str, structure: JSONObject, sections: list[Section] | None = None) -> JSONObject:
    lines = [text, *fenced_sections(sections or [])]
    result = text_result("\n".join(lines), is_error=False)
    result["structuredContent"] = structure
    return result


def _own_json(structure: JSONObject) -> str:
    """JSON of values pybox made itself (ids, states, counts): no box text in it."""
    return json.dumps(structure, indent=2)


EGRESS_WORDS = {
    "none": "no network",
    "packages": "it reaches the operator's package registries only",
    "open": "network open: general egress",
}

# -- handlers -----------------------------------------------------------------------


def create_experiment(toolbox: Toolbox, args: JSONObject, ctx: CallContext) -> JSONObject:
    environment = args.get("environment", "stdlib")
    if environment not in toolbox.allowed_images():
        raise InvalidRequest(
            f"The environment {environment!r} is not one this server offers: "
            f"{', '.join(toolbox.allowed_images()) or 'none'}."
        )
    experiments = _experiments(toolbox)
    record = experiments.create(
        args["project"],
        environment=environment,
        limits=args.get("limits", LimitRequest()),
        env=list(args.get("env", [])),
        libraries=tuple(args.get("libraries", ())),
        egress=args.get("egress"),
        host_env=toolbox.host_env,
    )
    described = _described(toolbox, record)
    copy = described["copy"]
    skipped = "\n".join(f"{s['path']}\t{s['reason']}" for s in copy.get("skipped", []))
    return _result(
        f"Created experiment {record.experiment_id}: {copy.get('files')} files of "
        f"{record.project} copied into a sealed sandbox "
        f"({EGRESS_WORDS.get(str(record.doc.get('egress', 'none')), 'no network')}); "
        f"{copy.get('skipped_count', 0)} skipped (listed below: path, reason). The project "
        "itself is never written. Run commands with execute_experiment, tests with run_tests, "
        "see changes with inspect_changes; destroy_experiment when done.",
        described,
        [Section("skipped paths (the project's own names)", skipped)],
    )


def _described(toolbox: Toolbox, record: Any) -> JSONObject:
    from pybox._features.experiments.lifecycle import experiment_dict

    return experiment_dict(_experiments(toolbox), record)


def _job_result(job: Any, *, with_output: bool) -> JSONObject:
    from pybox._features.experiments.lifecycle import job_dict

    described = job_dict(job, with_output=with_output)
    state = described["state"]
    words = f"Job {job.job_id} ({job.kind}) is {state}"
    if "exit_code" in described:
        words += f", exit code {described['exit_code']}"
    tests = described.get("tests")
    if isinstance(tests, dict):
        words += (
            "; tests (as the test command printed them): "
            f"{tests.get('passed', 0)} passed, {tests.get('failed', 0)} failed, "
            f"{tests.get('errors', 0)} errors, {tests.get('skipped', 0)} skipped"
            + ("" if tests.get("parsed") else " (not parsed: judged by the exit code)")
        )
    if "error" in described:
        words += f". pybox: {described['error']}"
    sections: list[Section] = []
    if with_output:
        sections = [
            Section(f"program {stream}", str(described.get(stream, "")))
            for stream in ("stdout", "stderr")
        ]
        failing = (tests or {}).get("failing") if isinstance(tests, dict) else None
        if failing:
            sections.append(Section("failing tests (names the runner printed)", "\n".join(failing)))
    elif not job.finished:
        words += ". Follow it with get_job_status or get_job_result; stop it with cancel_job"
    text = words + "."
    lines = [text, *(fenced_sections(sections) if with_output else [])]
    result = text_result("\n".join(lines), is_error=with_output and state != "completed")
    result["structuredContent"] = described
    return result


def execute_experiment(toolbox: Toolbox, args: JSONObject, ctx: CallContext) -> JSONObject:
    job = _experiments(toolbox).execute(
        args["experiment_id"],
        args["argv"],
        timeout_s=args.get("timeout"),
        background=bool(args.get("background", False)),
    )
    return _job_result(job, with_output=job.finished)


def run_tests(toolbox: Toolbox, args: JSONObject, ctx: CallContext) -> JSONObject:
    job = _experiments(toolbox).run_tests(
        args["experiment_id"], args.get("argv"), background=bool(args.get("background", False))
    )
    return _job_result(job, with_output=job.finished)


def inspect_changes(toolbox: Toolbox, args: JSONObject, ctx: CallContext) -> JSONObject:
    changes = _experiments(toolbox).inspect_changes(args["experiment_id"])
    if not changes.get("available"):
        return _result(f"No changes are known: {changes.get('note')}.", changes)
    stats = changes["stats"]
    listing = "\n".join(
        f"{kind}\t{item['path']}"
        for kind in ("created", "modified", "deleted")
        for item in changes.get(kind, [])
    )
    return _result(
        f"Experiment {changes['experiment_id']} against its baseline: {stats.get('created', 0)} "
        f"created, {stats.get('modified', 0)} modified, {stats.get('deleted', 0)} deleted; "
        f"+{stats.get('lines_added', 0)} -{stats.get('lines_removed', 0)} lines"
        + (" (the diff was cut short)" if changes.get("diff_truncated") else "")
        + (" (recorded at teardown)" if changes.get("recorded_at_teardown") else "")
        + ". Paths and the diff come from the box's files, as pybox's own file program "
        "(isolated from the workspace) read them there:",
        changes,
        [Section("changed paths", listing), Section("unified diff", changes.get("diff", ""))],
    )


def collect_artifacts(toolbox: Toolbox, args: JSONObject, ctx: CallContext) -> JSONObject:
    collected = _experiments(toolbox).collect_artifacts(args["experiment_id"], args["paths"])
    total = sum(item["size_bytes"] for item in collected)
    return _result(
        f"Collected {len(collected)} files ({total} bytes) into pybox's store, with their "
        "sha256; they outlive the experiment (pybox://experiments/{id}/artifacts).",
        {"experiment_id": args["experiment_id"], "artifacts": collected},
    )


def get_experiment(toolbox: Toolbox, args: JSONObject, ctx: CallContext) -> JSONObject:
    described = _experiments(toolbox).report(args["experiment_id"])
    return _result(
        f"Experiment {described['experiment_id']} is {described['state']} "
        f"({len(described['history'])} state changes, {described['jobs_count']} jobs).",
        described,
    )


def list_experiments(toolbox: Toolbox, args: JSONObject, ctx: CallContext) -> JSONObject:
    experiments = _experiments(toolbox)
    records = experiments.list(include_destroyed=bool(args.get("include_destroyed", False)))
    described = [_described(toolbox, record) for record in records]
    summary = [
        {k: d[k] for k in ("experiment_id", "state", "project", "created_at")} for d in described
    ]
    return _result(
        f"{len(described)} experiments." + ("\n" + _own_json({"experiments": summary})),
        {"experiments": described},
    )


def get_job_status(toolbox: Toolbox, args: JSONObject, ctx: CallContext) -> JSONObject:
    return _job_result(_experiments(toolbox).job_status(args["job_id"]), with_output=False)


def get_job_result(toolbox: Toolbox, args: JSONObject, ctx: CallContext) -> JSONObject:
    wait = float(args.get("wait", 0))
    job = _experiments(toolbox).job_result(args["job_id"], min(wait, MAX_WAIT_S))
    return _job_result(job, with_output=job.finished)


def cancel_job(toolbox: Toolbox, args: JSONObject, ctx: CallContext) -> JSONObject:
    return _job_result(_experiments(toolbox).cancel_job(args["job_id"]), with_output=False)


def destroy_experiment(toolbox: Toolbox, args: JSONObject, ctx: CallContext) -> JSONObject:
    final, was_live = _experiments(toolbox).destroy(args["experiment_id"])
    text = (
        f"Destroyed experiment {final['experiment_id']}; its changes were recorded first and the "
        "engine confirmed its box is gone. The final report follows (also in get_experiment)."
        if was_live
        else f"Experiment {final['experiment_id']} was already destroyed; its final report follows."
    )
    final["was_live"] = was_live
    kept = final.get("kept")
    if isinstance(kept, dict):
        text += "\n" + _kept_words(kept)
    summary = {k: final.get(k) for k in ("experiment_id", "state", "changes", "jobs_count", "kept")}
    return _result(text + "\n" + _own_json(summary), final)


def _kept_words(kept: JSONObject) -> str:
    """What the ended experiment keeps in pybox's store, and for how long."""
    if kept.get("removed_at") is not None:
        return f"Its kept files were removed since: {kept.get('removed_because')}."
    what = f"{kept.get('artifacts', 0)} collected artifacts"
    if kept.get("changes_recorded"):
        what += " and the recorded changes"
    until = kept.get("until")
    when = (
        time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(until))
        if isinstance(until, int | float)
        else "unknown"
    )
    return (
        f"Its copy of the project was removed. Kept: {what} ({kept.get('size_bytes', 0)} "
        f"bytes) until {when} at the latest; policy: {kept.get('policy')}."
    )


def compare_experiments(toolbox: Toolbox, args: JSONObject, ctx: CallContext) -> JSONObject:
    comparison = _experiments(toolbox).compare(args["experiment_ids"])
    if comparison.get("recommended"):
        head = f"Recommended: {comparison['recommended']}."
    else:
        head = "No recommendation: the experiments are indistinguishable on these measures."
    # The reasons quote failing tests' names, which the runner in the box printed.
    return _result(
        head + " Ranking and reasons in structuredContent; the reasons below quote test names "
        "the box printed.",
        comparison,
        [Section("reasons", "\n".join(comparison.get("reasons", [])))],
    )


def check_sandbox_runtime(toolbox: Toolbox, args: JSONObject, ctx: CallContext) -> JSONObject:
    checked = _experiments(toolbox).runtime_check()
    # The names an agent may forward by name alone (the operator's list); values never.
    checked["forward_env"] = sorted(toolbox.host_env.names or ())
    engine = checked["engine"]
    head = (
        f"The engine is reachable (version {engine.get('version')})."
        if engine["reachable"]
        else "The engine is NOT reachable: experiments cannot be created or run."
    )
    return _result(head + "\n" + _own_json(checked), checked)


# The declarations are in _experimentdecl (one module per concern).
__all__ = [
    "cancel_job",
    "check_sandbox_runtime",
    "collect_artifacts",
    "compare_experiments",
    "create_experiment",
    "destroy_experiment",
    "execute_experiment",
    "get_experiment",
    "get_job_result",
    "get_job_status",
    "inspect_changes",
    "list_experiments",
    "run_tests",
]
