"""`pybox experiment`: a copy of a project in a sandbox, with tests, diffs and
comparisons (docs/experiments.md). The same operations as the MCP tools.

Every action prints a short summary, or with --json one versioned record on
stdout. What came from the box (program output, names it listed, the diff) is
shown escaped on a terminal. `exec --background` hands the job to a detached
`pybox experiment` worker process and prints its job id at once.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from typing import Any

from pybox._core.display import escape_text, neutralise_output
from pybox._core.errors import InvalidRequest, PyboxError
from pybox._frontends.cli._common import (
    ArgumentParser,
    Commands,
    is_terminal,
    json_error,
    open_session,
    read_file,
    say,
)
from pybox._frontends.cli._exec import limit_request

EXPERIMENT_JSON_VERSION = 1
VERSION_KEY = "pybox_experiment_version"
WORKER_FLAG = "--job-worker"
SKIPPED_SHOWN = 50


def _experiments(args: argparse.Namespace) -> Any:
    session = open_session(args)
    experiments = session.experiments()
    if getattr(args, "project_root", None):
        experiments.with_roots(list(args.project_root))
    return experiments


def _emit(args: argparse.Namespace, record: dict[str, Any], summary: str) -> int:
    if args.json:
        sys.stdout.write(json.dumps({VERSION_KEY: EXPERIMENT_JSON_VERSION, **record}) + "\n")
    else:
        say(summary, sys.stdout)
    return 0


def _box_text(text: str) -> str:
    """Text from inside the box, safe for a terminal (escaped), raw when piped."""
    if is_terminal(sys.stdout):
        return neutralise_output(text.encode("utf-8", "surrogateescape")).decode("utf-8")
    return text


# -- actions --------------------------------------------------------------------------


def cmd_create(args: argparse.Namespace) -> int:
    from pybox._core.host_env import HostEnvPolicy
    from pybox._features.experiments.lifecycle import experiment_dict

    experiments = _experiments(args)
    record = experiments.create(
        args.project,
        environment=args.environment,
        limits=limit_request(args),
        env=list(args.env or ()),
        libraries=tuple(args.library or ()),
        egress=args.egress,
        host_env=HostEnvPolicy.callers_own(),  # the user's own environment
    )
    described = experiment_dict(experiments, record)
    copy = described["copy"]
    lines = [
        f"experiment {record.experiment_id}: {copy['files']} files copied from {record.project}, "
        f"{copy['skipped_count']} skipped"
    ]
    shown = copy["skipped"][:SKIPPED_SHOWN]
    lines += [f"  skipped {escape_text(s['path'])}: {s['reason']}" for s in shown]
    if copy["skipped_count"] > len(shown):
        lines.append(
            f"  ... and {copy['skipped_count'] - len(shown)} more (`pybox experiment show "
            f"{record.experiment_id} --json` lists up to {len(copy['skipped'])})"
        )
    return _emit(args, described, "\n".join(lines))


def _job_out(args: argparse.Namespace, job: Any) -> int:
    from pybox._features.experiments.lifecycle import job_dict

    described = job_dict(job, with_output=True)
    if args.json:
        sys.stdout.write(json.dumps({VERSION_KEY: EXPERIMENT_JSON_VERSION, **described}) + "\n")
    else:
        if described.get("stdout"):
            sys.stdout.write(_box_text(described["stdout"]))
        if described.get("stderr"):
            sys.stderr.write(_box_text(described["stderr"]))
        words = f"job {job.job_id} ({job.kind}): {job.state}"
        if described.get("exit_code") is not None:
            words += f", exit {described['exit_code']}"
        tests = described.get("tests")
        if isinstance(tests, dict):
            words += (
                f"; {tests['passed']} passed, {tests['failed']} failed, {tests['errors']} errors, "
                f"{tests['skipped']} skipped" + ("" if tests["parsed"] else " (not parsed)")
            )
            for name in tests.get("failing", []):
                words += f"\n  failing: {escape_text(name)}"
        if "error" in described:
            words += f"\n  {described['error']}"
        say("pybox: " + words)
    if not job.finished:
        return 0
    return 0 if job.state == "completed" else 1


def cmd_exec(args: argparse.Namespace) -> int:
    if not args.args:
        raise InvalidRequest(
            "Give the command after --: `pybox experiment exec ID -- python3 -m pytest` "
            "(for a shell: -- sh -c '...')."
        )
    if args.background and not args.job_worker:
        return _start_worker(args, ["exec", args.experiment_id, *_timeout_args(args)], args.args)
    return _run_job(args, lambda e, hook: e.jobs.start(
        args.experiment_id, list(args.args), timeout_s=args.timeout, on_started=hook
    ))  # fmt: skip


def cmd_test(args: argparse.Namespace) -> int:
    argv = list(args.args) or None
    if args.background and not args.job_worker:
        return _start_worker(args, ["test", args.experiment_id], args.args)
    return _run_job(args, lambda e, hook: e.jobs.run_tests(
        args.experiment_id, argv, on_started=hook
    ))  # fmt: skip


def _timeout_args(args: argparse.Namespace) -> list[str]:
    return [] if args.timeout is None else ["--timeout", str(args.timeout)]


def _run_job(args: argparse.Namespace, start: Any) -> int:
    experiments = _experiments(args)

    def started(job: Any) -> None:
        if args.job_worker:  # tell the waiting `--background` caller, then go on alone
            sys.stdout.write(job.job_id + "\n")
            sys.stdout.flush()
            os.close(sys.stdout.fileno())

    job = start(experiments, started)
    if args.job_worker:
        return 0
    return _job_out(args, job)


def _start_worker(args: argparse.Namespace, action: list[str], argv: list[str]) -> int:
    """A detached `pybox experiment` process runs the job; this one prints its id."""
    command = [sys.executable, "-m", "pybox"]
    if args.config:
        command += ["--config", args.config]
    command += ["experiment", *action, WORKER_FLAG, "--", *argv]
    worker = subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    assert worker.stdout is not None
    line = worker.stdout.readline().decode("ascii", "replace").strip()
    worker.stdout.close()
    if not line.startswith("job-"):
        code = worker.wait()
        raise InvalidRequest(
            f"The background job did not start (the worker ended with {code}); run it without "
            "--background to see why."
        )
    return _emit(
        args, {"job_id": line, "state": "running"}, f"job {line} started in the background"
    )


def cmd_job(args: argparse.Namespace) -> int:
    job = _experiments(args).job_result(args.job_id, args.wait)
    return _job_out(args, job)


def cmd_cancel(args: argparse.Namespace) -> int:
    return _job_out(args, _experiments(args).cancel_job(args.job_id))


def cmd_diff(args: argparse.Namespace) -> int:
    changes = _experiments(args).inspect_changes(args.experiment_id)
    if args.json:
        return _emit(args, changes, "")
    if not changes.get("available"):
        say(f"pybox: no changes known: {changes.get('note')}")
        return 0
    sys.stdout.write(_box_text(changes.get("diff", "")))
    stats = changes["stats"]
    say(
        f"pybox: {stats['created']} created, {stats['modified']} modified, {stats['deleted']} "
        f"deleted; +{stats['lines_added']} -{stats['lines_removed']} lines"
        + (" (diff cut short)" if changes.get("diff_truncated") else "")
    )
    return 0


def cmd_read(args: argparse.Namespace) -> int:
    data = _experiments(args).read_file(args.experiment_id, args.path)
    sys.stdout.buffer.write(neutralise_output(data) if is_terminal(sys.stdout) else data)
    sys.stdout.flush()
    return 0


def cmd_write(args: argparse.Namespace) -> int:
    data = (
        sys.stdin.buffer.read()
        if args.source == "-"
        else read_file(args.source, "the file to write")
    )
    written = _experiments(args).write_file(args.experiment_id, args.path, data)
    return _emit(args, written, f"wrote {written['size_bytes']} bytes to {args.path}")


def cmd_artifacts(args: argparse.Namespace) -> int:
    collected = _experiments(args).collect_artifacts(args.experiment_id, list(args.paths))
    lines = [f"{a['sha256']}  {a['size_bytes']:>10}  {escape_text(a['path'])}" for a in collected]
    return _emit(args, {"artifacts": collected}, "\n".join(lines))


def cmd_show(args: argparse.Namespace) -> int:
    report = _experiments(args).report(args.experiment_id)
    lines = [f"{report['experiment_id']}: {report['state']} ({report['reason']})"]
    lines += [f"  {h['to']:<10} {h['reason']}" for h in report["history"]]
    return _emit(args, report, "\n".join(lines))


def cmd_list(args: argparse.Namespace) -> int:
    from pybox._features.experiments.lifecycle import experiment_dict

    experiments = _experiments(args)
    records = experiments.list(include_destroyed=args.all)
    described = [experiment_dict(experiments, r) for r in records]
    lines = [f"{d['experiment_id']}  {d['state']:<10} {d['project']}" for d in described]
    return _emit(args, {"experiments": described}, "\n".join(lines) or "no experiments")


def cmd_destroy(args: argparse.Namespace) -> int:
    final, was_live = _experiments(args).destroy(args.experiment_id)
    words = "destroyed" if was_live else "was already destroyed"
    lines = [f"experiment {args.experiment_id} {words}"]
    kept = final.get("kept")
    if isinstance(kept, dict):
        lines.append(kept_words(kept))
    return _emit(args, final | {"was_live": was_live}, "\n".join(lines))


def kept_words(kept: dict[str, Any]) -> str:
    """What an ended experiment keeps in pybox's state directory, and until when."""
    if kept.get("removed_at") is not None:
        return (
            f"  its kept files were removed on {_utc(kept['removed_at'])}: "
            f"{kept.get('removed_because')}"
        )
    what = f"{kept.get('artifacts', 0)} artifacts ({kept.get('artifact_bytes', 0)} bytes)"
    if kept.get("changes_recorded"):
        what += " and the recorded changes"
    removed = kept.get("copy_removed_bytes", 0)
    return (
        f"  its copy of the project was removed ({removed} bytes); it keeps {what}, "
        f"{kept.get('size_bytes', 0)} bytes, until {_utc(kept.get('until'))} at the latest: "
        f"{kept.get('policy')}"
    )


def _utc(at: object) -> str:
    import time

    if not isinstance(at, int | float):
        return "unknown"
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(at))


def cmd_prune(args: argparse.Namespace) -> int:
    pruned = _experiments(args).prune()
    lines = [
        f"removed {len(pruned['removed'])} ended experiments' kept files "
        f"({pruned['removed_bytes']} bytes)"
        + (
            f", and {pruned['copies_removed_bytes']} bytes of leftover copies"
            if pruned["copies_removed_bytes"]
            else ""
        )
    ]
    lines += [
        f"  {r['experiment_id']}: {r['size_bytes']} bytes ({r['because']})"
        for r in pruned["removed"]
    ]
    lines.append(
        f"kept: {pruned['kept_experiments']} ended experiments, {pruned['kept_bytes']} bytes of "
        f"a {pruned['budget_bytes']}-byte budget; policy: {pruned['policy']}"
    )
    return _emit(args, pruned, "\n".join(lines))


def cmd_compare(args: argparse.Namespace) -> int:
    comparison = _experiments(args).compare(list(args.experiment_ids))
    head = comparison.get("recommended") or "no recommendation (indistinguishable)"
    lines = [f"recommended: {head}", *(f"  {escape_text(r)}" for r in comparison["reasons"])]
    return _emit(args, comparison, "\n".join(lines))


def cmd_check(args: argparse.Namespace) -> int:
    checked = _experiments(args).runtime_check()
    engine = checked["engine"]
    reach = f"reachable, {engine.get('version')}" if engine["reachable"] else "NOT reachable"
    text = f"engine: {reach}"
    return _emit(
        args, checked, text + f"\nproject roots: {', '.join(checked['project_roots']) or 'none'}"
    )


# -- the parser -------------------------------------------------------------------------


def _with_json_errors(handler: Any) -> Any:
    def wrapped(args: argparse.Namespace) -> int:
        try:
            return int(handler(args))
        except PyboxError as exc:
            if getattr(args, "json", False):
                say(json_error(VERSION_KEY, EXPERIMENT_JSON_VERSION, exc), sys.stdout)
            raise

    return wrapped


def register(commands: Commands) -> None:
    from pybox._frontends.cli._experimentparser import add_actions

    group = commands.add_parser(
        "experiment",
        help="experiment on a copy of a project: commands, tests, diffs, comparisons",
        description="An experiment copies a project (never mounts it) into a sandbox; "
        "commands and tests run on the copy, and the changes are shown against a baseline. "
        "The project on the host is only read.",
    )
    actions = group.add_subparsers(
        dest="experiment_command", metavar="ACTION", parser_class=ArgumentParser
    )
    actions.required = True
    add_actions(actions, sys.modules[__name__], _with_json_errors)
