"""`pybox runs list|show|receipt`: the runs recorded in pybox's store (docs/store.md).

A stored receipt holds text that came from inside a box (the cause, file names,
reasons): every such value is escaped on its own (`escape_text`, `quoted`) before
it is placed in a line of pybox's, so it can neither start a line nor act on the
terminal. `--json` prints one versioned record on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import UTC, datetime
from typing import Any

from pybox._core.display import escape_text, plural, quoted
from pybox._core.errors import InvalidRequest, PyboxError
from pybox._features.store import RunRow, Store, open_store
from pybox._frontends.cli._common import ArgumentParser, Commands, json_error, say

RUNS_JSON_VERSION = 1
VERSION_KEY = "pybox_runs_version"


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return value


def when(epoch: float | None) -> str:
    if epoch is None:
        return "-"
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M:%S")


def at(data: Any, *keys: str) -> Any:
    """data[k1][k2]..., or None where a level is missing or not a mapping: a stored
    receipt is read, not trusted to have every field."""
    for key in keys:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


def run_json(run: RunRow, *, receipt: bool) -> dict[str, Any]:
    data: dict[str, Any] = {
        "run_id": run.run_id,
        "kind": run.kind,
        "sandbox_id": run.sandbox_id,
        "owner": run.owner,
        "started_at": run.started_at,
        "finished_at": run.finished_at,
        "status": run.status,
        "exit_code": at(run.receipt, "exit_code"),
        "image": at(run.receipt, "configured", "image", "name") or at(run.request, "image"),
        "request": dict(run.request),
    }
    if receipt:
        data["receipt"] = None if run.receipt is None else dict(run.receipt)
    return data


def _store(args: argparse.Namespace) -> Store:
    return open_store(os.environ, args.config)


def _found(store: Store, run_id: str) -> RunRow:
    run = store.get_run(run_id)
    if run is None:
        raise InvalidRequest(
            f"No run {run_id!r} is recorded in {store.path}. `pybox runs list` shows the "
            "recorded runs (an id may be shortened to its first 6 characters or more)."
        )
    return run


def _json_errors(args: argparse.Namespace, exc: PyboxError) -> None:
    if getattr(args, "json", False):
        say(json_error(VERSION_KEY, RUNS_JSON_VERSION, exc), sys.stdout)


def cmd_list(args: argparse.Namespace) -> int:
    try:
        store = _store(args)
        runs = store.list_runs(limit=args.limit, sandbox_id=args.sandbox)
    except PyboxError as exc:
        _json_errors(args, exc)
        raise
    if args.json:
        record = {
            VERSION_KEY: RUNS_JSON_VERSION,
            "runs": [run_json(r, receipt=False) for r in runs],
        }
        say(json.dumps(record), sys.stdout)
        return 0
    if not runs:
        where = f" for sandbox {quoted(args.sandbox)}" if args.sandbox else ""
        say(f"no runs recorded{where} in {store.path}", sys.stdout)
        return 0
    lines = [f"{'RUN':<16}  {'STARTED (UTC)':<19}  {'KIND':<6}  {'STATUS':<13}  EXIT  IMAGE"]
    for run in runs:
        shown = run_json(run, receipt=False)
        exit_code = "-" if shown["exit_code"] is None else str(shown["exit_code"])
        sandbox = f"  sandbox {run.sandbox_id}" if run.sandbox_id else ""
        lines.append(
            escape_text(
                f"{run.run_id:<16}  {when(run.started_at):<19}  {run.kind:<6}  "
                f"{run.status or 'unfinished':<13}  {exit_code:<4}  {shown['image'] or '-'}"
                f"{sandbox}"
            )
        )
    say("\n".join(lines), sys.stdout)
    return 0


def show_lines(run: RunRow) -> list[str]:
    """`pybox runs show`: each line escaped; box text escaped (and names quoted) first."""
    request, receipt = run.request, run.receipt
    status = run.status or "unfinished (no receipt recorded)"
    exit_code = at(receipt, "exit_code")
    duration = at(receipt, "observed_by_pybox", "run_duration_s")
    lines = [
        f"run {run.run_id} ({run.kind})",
        f"  status:   {status}" + ("" if exit_code is None else f", exit {exit_code}"),
        f"  owner:    {run.owner}",
        f"  started:  {when(run.started_at)} UTC",
        f"  finished: {when(run.finished_at)}"
        + ("" if run.finished_at is None else " UTC")
        + ("" if not isinstance(duration, int | float) else f" (ran {duration:.2f} s)"),
    ]
    if run.sandbox_id:
        lines.append(f"  sandbox:  {run.sandbox_id}")
    image = at(receipt, "configured", "image", "id") or at(request, "image_id") or ""
    lines.append(f"  image:    {at(request, 'image') or '-'} {str(image)[:19]}")
    if "code_size_bytes" in request:
        lines.append(
            f"  program:  {quoted(str(request.get('code_name', '')))}, "
            f"{plural(int(request['code_size_bytes']), 'byte')}, "
            f"sha256 {str(request.get('code_sha256', ''))[:16]}"
        )
    argv = request.get("argv")
    if argv:
        lines.append(f"  argv:     {' '.join(quoted(str(a)) for a in argv)}")
    env = request.get("env")
    if env:
        names = ", ".join(escape_text(str(n)) for n in env)
        lines.append(f"  env:      {names} (names only: values are never stored)")
    for item in request.get("inputs") or ():
        lines.append(
            f"  input:    {quoted(str(at(item, 'name')))} "
            f"{plural(int(at(item, 'size_bytes') or 0), 'byte')}"
        )
    if receipt is not None:
        lines.extend(_receipt_lines(receipt, run.run_id))
    return [escape_text(line) for line in lines]


def _receipt_lines(receipt: Any, run_id: str) -> list[str]:
    lines = [f"  cause:    {escape_text(str(at(receipt, 'cause', 'summary') or 'unknown'))}"]
    streams = []
    for name in ("stdout", "stderr"):
        total = at(receipt, "reported_by_program", name, "bytes_total")
        truncated = at(receipt, "reported_by_program", name, "truncated")
        size = "unknown size" if not isinstance(total, int) else plural(total, "byte")
        streams.append(f"{name} {size}{' (truncated)' if truncated else ''}")
    lines.append(f"  output:   {'; '.join(streams)} (the output itself is not stored)")
    for item in at(receipt, "reported_by_program", "output_files") or ():
        lines.append(
            f"  file:     {quoted(str(at(item, 'path')))} "
            f"{plural(int(at(item, 'size_bytes') or 0), 'byte')}"
        )
    for item in at(receipt, "reported_by_program", "output_files_skipped") or ():
        lines.append(
            f"  skipped:  {quoted(str(at(item, 'path')))} ({escape_text(str(at(item, 'reason')))})"
        )
    for item in at(receipt, "unknown") or ():
        lines.append(
            f"  unknown:  {escape_text(str(at(item, 'fact')))}: "
            f"{escape_text(str(at(item, 'reason')))}"
        )
    lines.append(f"  receipt:  `pybox runs receipt {run_id}` prints it whole")
    return lines


def cmd_show(args: argparse.Namespace) -> int:
    try:
        run = _found(_store(args), args.run_id)
    except PyboxError as exc:
        _json_errors(args, exc)
        raise
    if args.json:
        record = {VERSION_KEY: RUNS_JSON_VERSION, "run": run_json(run, receipt=True)}
        say(json.dumps(record), sys.stdout)
    else:
        say("\n".join(show_lines(run)), sys.stdout)
    return 0


def cmd_receipt(args: argparse.Namespace) -> int:
    run = _found(_store(args), args.run_id)
    if run.receipt is None:
        raise InvalidRequest(
            f"Run {run.run_id} has no receipt recorded: it has not finished, or the process "
            "running it ended first. `pybox runs show` shows what is recorded."
        )
    # ASCII JSON: a box's text inside it is escaped, never raw on the terminal.
    say(json.dumps(run.receipt, indent=2), sys.stdout)
    return 0


def register(commands: Commands) -> None:
    runs = commands.add_parser("runs", help="list recorded runs, show one and its receipt")
    actions = runs.add_subparsers(
        dest="runs_command", metavar="ACTION", parser_class=ArgumentParser
    )
    actions.required = True
    listing = actions.add_parser("list", help="the newest recorded runs, newest first")
    listing.add_argument("--json", action="store_true", help="print one JSON record on stdout")
    listing.add_argument(
        "--limit", type=positive_int, default=50, metavar="N", help="at most N runs"
    )
    listing.add_argument("--sandbox", metavar="ID", help="only the runs of this sandbox")
    listing.set_defaults(handler=cmd_list)
    show = actions.add_parser("show", help="what is recorded of one run")
    show.add_argument(
        "run_id", metavar="RUN_ID", help="a run id, or its first 6 characters or more"
    )
    show.add_argument("--json", action="store_true", help="print one JSON record on stdout")
    show.set_defaults(handler=cmd_show)
    receipt = actions.add_parser("receipt", help="print a run's stored receipt (JSON)")
    receipt.add_argument(
        "run_id", metavar="RUN_ID", help="a run id, or its first 6 characters or more"
    )
    receipt.set_defaults(handler=cmd_receipt)
