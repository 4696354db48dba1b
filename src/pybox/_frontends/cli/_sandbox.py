"""`pybox sandbox`: sandboxes that keep their files and packages between runs.

create, run, exec, cp, ls, destroy and list, each one operation of the
sandboxes of pybox's state directory (`Session.sandboxes()`), so any `pybox`
process can use a sandbox another created. `run` and `exec` show the program's
output and the receipt exactly as `pybox exec` does, with its exit codes.
Everything the box said (output, file contents on a terminal, listed names) is
shown escaped.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import stat
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pybox._boxes.record import RunInterrupted, RunOutcome
from pybox._core.display import escape_text, neutralise_output, plural
from pybox._core.errors import InvalidRequest, PyboxError
from pybox._core.limits import FIELDS_BY_KEY, LIMIT_FIELDS, LimitRequest
from pybox._core.request import RunRequest
from pybox._features.sandboxes.fileops import save_on_host
from pybox._features.sandboxes.records import BOX_WIDE, FILES_SOURCE, RUN_PROGRAM, SandboxInfo
from pybox._frontends.cli._common import (
    EXIT_STOPPED,
    ArgumentParser,
    Commands,
    bounded_flag_values,
    is_terminal,
    json_error,
    open_session,
    progress,
    read_file,
    say,
    status_exit_code,
)
from pybox._frontends.cli._exec import (
    _end_live_output,
    _print_outcome,
    limit_request,
)
from pybox._frontends.cli._live import LiveOutput
from pybox._frontends.cli._sandboxparser import TIMEOUT_FLAG, add_actions

if TYPE_CHECKING:
    from pybox._features.sandboxes.service import Sandboxes

SANDBOX_JSON_VERSION = 1
VERSION_KEY = "pybox_sandbox_version"
# `ID:PATH` names a path in a sandbox; anything else in `cp` is a host path.
_SANDBOX_SIDE = re.compile(r"(sbx-[A-Za-z0-9]{1,36}):(.*)", re.DOTALL)


def _sandboxes(args: argparse.Namespace) -> Sandboxes:
    return open_session(args).sandboxes()


def _json(record: dict[str, Any]) -> None:
    say(json.dumps({VERSION_KEY: SANDBOX_JSON_VERSION, **record}), sys.stdout)


def _with_json_errors(
    handler: Callable[[argparse.Namespace], int], version: tuple[str, int]
) -> Callable[[argparse.Namespace], int]:
    """With --json, a failure is also one JSON record on stdout (then the usual message)."""

    def wrapped(args: argparse.Namespace) -> int:
        try:
            return handler(args)
        except PyboxError as exc:
            if getattr(args, "json", False):
                say(json_error(*version, exc), sys.stdout)
            raise

    return wrapped


def _limits_line(info: SandboxInfo) -> str:
    shown = ("timeout_s", *BOX_WIDE)
    return ", ".join(
        f.amount(getattr(info.limits, f.attr)) for f in LIMIT_FIELDS if f.attr in shown
    )


def _in(seconds: float) -> str:
    left = max(0.0, seconds - time.time())
    return f"{left / 60:.0f} min" if left >= 60 else f"{left:.0f} s"


# -- create, list, destroy ------------------------------------------------------------


def cmd_create(args: argparse.Namespace) -> int:
    sandboxes = _sandboxes(args)
    info = sandboxes.create(
        image=args.image,
        limits=limit_request(args),
        libraries=tuple(args.library or ()),
        say=progress,
        egress=args.egress,
        runtime=args.runtime,
    )
    if args.json:
        _json({"sandbox": info.to_dict()})
        return 0
    say(info.sandbox_id, sys.stdout)
    say(
        f"pybox: created sandbox {info.sandbox_id} from {info.image}; its workspace keeps files "
        "and installed packages between runs (each run is a fresh process).\n"
        f"  limits:   {_limits_line(info)}\n"
        f"  expires:  after {_in(info.idle_expires_at)} idle, at the latest in "
        f"{_in(info.expires_at)}\n"
        + (f"  packages: {', '.join(info.libraries)}\n" if info.libraries else "")
        + f"  destroy it with: pybox sandbox destroy {info.sandbox_id}"
    )
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    infos = _sandboxes(args).list()
    if args.json:
        _json({"sandboxes": [info.to_dict() for info in infos]})
        return 0
    if not infos:
        say("pybox: no live sandboxes.")
        return 0
    say(
        f"{'SANDBOX':<18} {'IMAGE':<12} {'STATE':<8} {'RUNS':>5}  IDLE EXPIRY  LIFETIME END",
        sys.stdout,
    )
    for info in infos:
        say(
            f"{info.sandbox_id:<18} {escape_text(info.image):<12} {info.state:<8} "
            f"{info.runs:>5}  {_in(info.idle_expires_at):<11}  {_in(info.expires_at)}",
            sys.stdout,
        )
    return 0


def cmd_destroy(args: argparse.Namespace) -> int:
    info, was_live = _sandboxes(args).destroy(args.sandbox_id)
    if args.json:
        _json({"sandbox_id": info.sandbox_id, "destroyed": True, "was_live": was_live})
    elif was_live:
        say(
            f"destroyed sandbox {info.sandbox_id}; the engine confirmed its box is gone", sys.stdout
        )
    else:
        say(f"sandbox {info.sandbox_id} was already destroyed ({info.reason})", sys.stdout)
    return 0


# -- programs ------------------------------------------------------------------------


def _run_shown(
    args: argparse.Namespace, sandboxes: Sandboxes, go: Callable[..., RunOutcome]
) -> int:
    """Run `go(on_event=...)` and show it as `pybox exec` does; its exit code."""
    # --json keeps its one record on stdout: no live output beside it.
    output_bytes = sandboxes.get(args.sandbox_id).limits.output_bytes
    live = None if args.json else LiveOutput(output_bytes)
    interrupted = False
    try:
        outcome = go(on_event=None if live is None else live.sink)
    except RunInterrupted as stop:
        outcome, interrupted = stop.outcome, True
    except BaseException:
        if live is not None:
            _end_live_output(live)
        raise
    _print_outcome(args, outcome, None, [], live)
    return EXIT_STOPPED if interrupted else status_exit_code(outcome.receipt)


def _timeout(args: argparse.Namespace) -> float | None:
    value = bounded_flag_values(args, TIMEOUT_FLAG, FIELDS_BY_KEY).get("timeout_s")
    return None if value is None else float(value)


def cmd_run(args: argparse.Namespace) -> int:
    timeout_s = _timeout(args)  # a bad value is named before stdin is read
    code = sys.stdin.buffer.read() if args.program == "-" else read_file(args.program, "program")
    request = RunRequest(code=code, code_name=RUN_PROGRAM, limits=LimitRequest(timeout_s=timeout_s))
    sandboxes = _sandboxes(args)
    return _run_shown(args, sandboxes, lambda **kw: sandboxes.run(args.sandbox_id, request, **kw))


def cmd_exec(args: argparse.Namespace) -> int:
    if not args.args:
        raise InvalidRequest(
            "Give the command after --, as a list of words: `pybox sandbox exec ID -- ls -l` "
            "(for a shell: -- sh -c '...')."
        )
    timeout_s = _timeout(args)
    sandboxes = _sandboxes(args)
    return _run_shown(
        args,
        sandboxes,
        lambda **kw: sandboxes.exec(args.sandbox_id, list(args.args), timeout_s=timeout_s, **kw),
    )


# -- files ---------------------------------------------------------------------------


def _sandbox_side(text: str) -> tuple[str, str] | None:
    match = _SANDBOX_SIDE.fullmatch(text)
    return None if match is None else (match.group(1), match.group(2))


def cmd_cp(args: argparse.Namespace) -> int:
    source, target = _sandbox_side(args.source), _sandbox_side(args.target)
    if (source is None) == (target is None):
        raise InvalidRequest(
            "Exactly one side of `pybox sandbox cp` is in a sandbox, written ID:PATH: "
            "`pybox sandbox cp data.csv sbx-...:data.csv` or `pybox sandbox cp sbx-...:out.txt "
            "out.txt` (- for stdin or stdout)."
        )
    sandboxes = _sandboxes(args)
    if target is not None:  # host -> sandbox
        sandbox_id, path = target
        data = sys.stdin.buffer.read() if args.source == "-" else read_file(args.source, "file")
        if path in ("", ".") or path.endswith("/"):
            if args.source == "-":
                raise InvalidRequest("Name the file to write in the sandbox: ID:PATH.")
            path += os.path.basename(args.source.rstrip("/"))
        written = sandboxes.write_file(sandbox_id, path, data)
        say(f"pybox: copied {plural(len(data), 'byte')} to {sandbox_id}:{written['path']}")
        return 0
    assert source is not None
    sandbox_id, path = source
    data = sandboxes.read_file(sandbox_id, path)
    if args.target == "-":
        # Straight to a pipe or file; on a terminal shown as `pybox exec` shows output.
        out = sys.stdout.buffer
        out.write(neutralise_output(data) if is_terminal(sys.stdout) else data)
        out.flush()
        return 0
    destination = Path(args.target)
    if _is_folder(args.target):
        destination = destination / os.path.basename(path.rstrip("/"))
    _write_host_file(destination, data, args.force)
    say(f"pybox: copied {plural(len(data), 'byte')} from {sandbox_id}:{path} to {destination}")
    return 0


def _is_folder(target: str) -> bool:
    """A folder to copy into: a real one, or one named with a trailing slash (a
    link to a folder is followed only then). Any other name is the file itself,
    and a link there is never followed."""
    if target.endswith("/"):
        return os.path.isdir(target)
    try:
        return stat.S_ISDIR(os.lstat(target).st_mode)
    except OSError:
        return False


def _write_host_file(destination: Path, data: bytes, force: bool) -> None:
    """Write the user's own file: a new one, or with `force` replaced whole (never
    half-written, never through a link: `save_on_host`)."""
    try:
        save_on_host(destination, data, replace=force)
    except FileExistsError:
        raise InvalidRequest(
            f"{destination} exists already; pybox does not overwrite it. Add --force to "
            "replace it (a link there is replaced, not followed), or give another name."
        ) from None
    except IsADirectoryError:
        raise InvalidRequest(
            f"{destination} is a folder; pybox does not replace a folder with a file. "
            "Give a file name."
        ) from None
    except OSError as exc:
        raise InvalidRequest(f"Cannot write {destination}: {exc.strerror or exc}.") from None


def cmd_ls(args: argparse.Namespace) -> int:
    files, complete = _sandboxes(args).list_files(args.sandbox_id, args.path)
    if args.json:
        _json({"files": [f.to_dict() for f in files], "complete": complete, "source": FILES_SOURCE})
        return 0
    for item in files:
        # The names came from the box: one line each, anything a terminal acts on escaped.
        say(f"{item.kind:<6} {item.size_bytes:>10}  {escape_text(item.path)}", sys.stdout)
    if not complete:
        say(f"pybox: the listing was cut short after {plural(len(files), 'entry', 'entries')}.")
    return 0


# -- the parser (its arguments: `_sandboxparser`) ------------------------------------


def register(commands: Commands) -> None:
    group = commands.add_parser(
        "sandbox",
        help="create, use and destroy sandboxes that keep their files between runs",
        description="Sandboxes keep their workspace (files, installed packages) between runs; "
        "each run is a fresh process under the same seal as `pybox exec`'s box. Any pybox "
        "process using the same state directory can use them.",
    )
    actions = group.add_subparsers(
        dest="sandbox_command", metavar="ACTION", parser_class=ArgumentParser
    )
    actions.required = True
    exec_version = ("pybox_exec_version", 1)
    own = (VERSION_KEY, SANDBOX_JSON_VERSION)
    add_actions(
        actions,
        {
            "create": _with_json_errors(cmd_create, own),
            "run": _with_json_errors(cmd_run, exec_version),
            "exec": _with_json_errors(cmd_exec, exec_version),
            "cp": cmd_cp,
            "ls": _with_json_errors(cmd_ls, own),
            "destroy": _with_json_errors(cmd_destroy, own),
            "list": _with_json_errors(cmd_list, own),
        },
    )
