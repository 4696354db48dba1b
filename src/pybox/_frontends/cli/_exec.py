"""`pybox exec`: run one program in a fresh box.

Every cold `pybox exec` imports what this module imports at its top: the exec
import budget (tests/unit/test_cli_entry.py) counts it. Import what only some
runs need where it is used.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, Protocol, TextIO

from pybox._boxes.record import RunInterrupted, RunOutcome
from pybox._core.display import plural
from pybox._core.errors import InvalidRequest, PyboxError
from pybox._core.events import EventSink, RunEvent, RunStarted
from pybox._core.limit_surfaces import cli_limit_fields
from pybox._core.limits import FIELDS_BY_KEY, LimitRequest
from pybox._core.request import CODE_NAME_RE, InputFile, RunRequest, check_input_name
from pybox._frontends.cli._argparse_private import intercept_parse
from pybox._frontends.cli._common import (
    EXIT_PYBOX_FAILED,
    EXIT_STOPPED,
    Commands,
    add_bounded_flags,
    bounded_flag_values,
    json_error,
    open_session,
    read_file,
    say,
    say_after_output,
    status_exit_code,
)
from pybox._frontends.cli._live import LiveOutput
from pybox._orchestration.staging import check_destination

if TYPE_CHECKING:
    from pybox._core.request import PreparedRun
    from pybox._frontends.cli._argparse_private import ParseKnown
    from pybox._orchestration.session import Session

EXEC_JSON_VERSION = 1

# CLI flag -> (configuration key, help), generated from the one limit table.
LIMIT_FLAGS: dict[str, tuple[str, str]] = {f.flag: (f.key, f.help) for f in cli_limit_fields()}


def add_limit_flags(parser: argparse.ArgumentParser) -> None:
    """The per-run limit flags, shared by every command that runs a box."""
    add_bounded_flags(parser, LIMIT_FLAGS, FIELDS_BY_KEY)


def add_runtime_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--runtime",
        metavar="NAME",
        help="the isolation runtime: runc or gvisor, where the operator allows it "
        "(default: the operator's runtime)",
    )


def add_egress_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--egress",
        choices=("none", "packages", "open"),
        default="none",
        help="what the box may reach: none (default), packages (the operator's registries "
        "only, through pybox's proxy), open (general egress); the operator's policy decides "
        "which are allowed",
    )


def limit_request(args: argparse.Namespace) -> LimitRequest:
    return LimitRequest(**bounded_flag_values(args, LIMIT_FLAGS, FIELDS_BY_KEY))  # type: ignore[arg-type]


def _exec_request(
    args: argparse.Namespace,
    read: Callable[[str, str], bytes] = read_file,
    stdin: Callable[[], bytes] | None = None,
) -> RunRequest:
    """The request of `pybox exec`'s arguments; `read` reads a named file (the pool
    service reads the ones its client sent), `stdin` the program given as `-`."""
    if args.program == "-":
        code, code_name = (stdin or sys.stdin.buffer.read)(), "main.py"
    else:
        code = read(args.program, "program")
        name = os.path.basename(args.program)
        code_name = name if CODE_NAME_RE.fullmatch(name) else "main.py"
    inputs = []
    for path in args.input or []:
        name = check_input_name(os.path.basename(path.rstrip("/")))
        inputs.append(InputFile(name, read(path, "input file")))
    env = []
    for item in args.env or []:
        name, sep, value = item.partition("=")
        if not sep:
            raise InvalidRequest(f"--env {item!r} is not NAME=VALUE.")
        env.append((name, value))
    return RunRequest(
        code=code,
        code_name=code_name,
        inputs=tuple(inputs),
        limits=limit_request(args),
        image=args.image,
        collect_outputs=args.output is not None,
        argv=tuple(args.args),
        env=tuple(env),
        stdin_bytes=b"" if args.stdin is None else read(args.stdin, "stdin file"),
        runtime=args.runtime,
        egress=args.egress,
    )


def exec_json(outcome: RunOutcome, output_dir: Path | None) -> dict[str, Any]:
    receipt = outcome.receipt
    return {
        "pybox_exec_version": EXEC_JSON_VERSION,
        "status": receipt.status.value,
        "exit_code": receipt.exit_code,
        "stdout": outcome.stdout.decode("utf-8", "replace"),
        "stderr": outcome.stderr.decode("utf-8", "replace"),
        "stdout_truncated": receipt.reported_by_program.stdout.truncated,
        "stderr_truncated": receipt.reported_by_program.stderr.truncated,
        "output_dir": None if output_dir is None else str(output_dir),
        "output_files": [
            {"path": f.path, "size_bytes": f.size_bytes, "sha256": f.sha256}
            for f in outcome.output_files
        ],
        "receipt": receipt.to_dict(),
    }


class StopOnSignal:
    """Ctrl-C or SIGTERM while the program runs: stop the run through its cancel flag.

    The watch then kills the box and still takes in what the box already sent; a
    KeyboardInterrupt raised in the middle of the watch would drop output waiting
    in the connection, or cut a chunk off halfway into the capture. Before the
    program has its code, and on a second signal, the signal does what it did.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, on_event: EventSink | None) -> None:
        self.cancel = threading.Event()
        self._on_event = on_event
        self._started = False
        self._previous: dict[int, Any] = {}

    def sink(self, event: RunEvent) -> None:
        if isinstance(event, RunStarted):
            self._started = True
        if self._on_event is not None:
            self._on_event(event)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self._started and not self.cancel.is_set():
            self.cancel.set()
            return
        self._previous[signum](signum, frame)

    def __enter__(self) -> StopOnSignal:
        if threading.current_thread() is threading.main_thread():
            for signum in self.SIGNALS:
                previous = signal.getsignal(signum)
                if callable(previous):  # an ignored or default (fatal) signal stays so
                    self._previous[signum] = previous
                    signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)


def _json_error(exc: PyboxError) -> str:
    return json_error("pybox_exec_version", EXEC_JSON_VERSION, exc)


def cmd_exec(args: argparse.Namespace) -> int:
    try:
        request = _exec_request(args)
        destination = Path(args.output).absolute() if args.output is not None else None
        if destination is not None:
            check_destination(destination)  # bad input is named before the engine is asked
        session = open_session(args)
    except PyboxError as exc:
        if args.json:
            say(_json_error(exc), sys.stdout)
        raise
    return exec_in_session(args, session, request, destination)


class Stopper(Protocol):
    """What `exec_in_session` needs of the thing that stops a run (`StopOnSignal`;
    the pool service's stands for its client's signals)."""

    cancel: threading.Event

    def sink(self, event: RunEvent) -> None: ...
    def __enter__(self) -> Stopper: ...
    def __exit__(self, *exc: object) -> None: ...


def exec_in_session(
    args: argparse.Namespace,
    session: Session,
    request: RunRequest,
    destination: Path | None,
    *,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
    stopper: Callable[[EventSink | None], Stopper] = StopOnSignal,
    before_run: Callable[[PreparedRun], None] | None = None,
) -> int:
    """Prepare, run and present one `pybox exec`: the same code for a cold run and
    for the pool service (which passes its client's streams and signals, and
    `before_run`, its last word with the client before anything runs)."""
    out, err = stdout or sys.stdout, stderr or sys.stderr
    try:
        # A bad request is refused before the engine is touched; nothing is staged yet.
        prepared = session.prepare(request)
        staging = session.stage_outputs(prepared, destination)
        for stale in staging.swept if staging is not None else ():
            say(f"pybox: removed {stale}: partial files of a pybox that was killed", err)
        if before_run is not None:
            before_run(prepared)
    except PyboxError as exc:
        if args.json:
            say(_json_error(exc), out)
        raise
    interrupted = False
    files_dir = staging.files_dir if staging is not None else None
    # --json keeps its one record on stdout: no live output beside it.
    live = None if args.json else LiveOutput(prepared.limits.output_bytes, out, err)
    try:
        with stopper(None if live is None else live.sink) as stop:
            outcome = session.run(
                prepared, files_dir=files_dir, cancel=stop.cancel, on_event=stop.sink
            )
    except RunInterrupted as stop_early:
        # Ctrl-C or SIGTERM before the program had its code, or twice: the box is
        # gone; show what the run produced so far.
        outcome, interrupted = stop_early.outcome, True
    except PyboxError as exc:
        if staging is not None:
            staging.discard()
        if args.json:
            say(_json_error(exc), out)
        if live is not None:
            _end_live_output(live, err)
        raise
    except BaseException:
        if staging is not None:
            staging.discard()
        if live is not None:
            _end_live_output(live, err)
        raise
    publish_error: PyboxError | None = None
    if staging is not None:
        try:
            staging.publish()
        except PyboxError as exc:
            # Nothing is lost: the files stay in the staging directory, which is reported.
            publish_error, destination = exc, staging.files_dir
    notes = [] if publish_error is None else [f"pybox: {publish_error}"]
    _print_outcome(args, outcome, destination, notes, live, out, err)
    if publish_error is not None:
        return EXIT_PYBOX_FAILED
    return EXIT_STOPPED if interrupted else status_exit_code(outcome.receipt)


def _print_outcome(
    args: argparse.Namespace,
    outcome: RunOutcome,
    destination: Path | None,
    notes: list[str],
    live: LiveOutput | None,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> None:
    out, err = out or sys.stdout, err or sys.stderr
    if live is None:  # --json
        say(json.dumps(exec_json(outcome, destination)), out)
        for note in notes:
            say(note, err)
        return
    # The head was shown as it arrived; now the rest the receipt kept, then the receipt.
    ended_line, lost = live.finish(outcome)
    lines = outcome.receipt.summary_lines()
    if args.quiet:
        lines = lines[:1]  # the status line: what happened, the exit code, the run id
    elif destination is not None:
        lines.append(
            f"  files:  {plural(len(outcome.output_files), 'file')} written to {destination}"
        )
    say_after_output([*lines, *lost, *notes], err, ended_line)


def _end_live_output(live: LiveOutput, err: TextIO | None = None) -> None:
    """The run raised: let what was shown end its line, so pybox's error starts its own."""
    ended_line, _ = live.finish(None)
    if not ended_line:
        (err or sys.stderr).write("\n")


def _program_arguments_after_double_dash(parser: argparse.ArgumentParser) -> None:
    """Everything after the first `--` is the program's, wherever the options were,
    and only that: a stray word before `--` is refused, never passed on, so a
    typo cannot quietly become the program's argument (or the program)."""

    def split_at_double_dash(
        parse: ParseKnown, args: Sequence[str] | None, namespace: argparse.Namespace | None
    ) -> tuple[argparse.Namespace, list[str]]:
        given = list(sys.argv[1:] if args is None else args)
        rest: list[str] = []
        if "--" in given:
            at = given.index("--")
            given, rest = given[:at], given[at + 1 :]
        parsed, extras = parse(given, namespace)
        parsed.args = rest
        return parsed, extras

    intercept_parse(parser, split_at_double_dash)


def register(commands: Commands) -> None:
    run = commands.add_parser(
        "exec",
        help="run a program in a fresh box",
        usage="pybox exec [options] FILE|- [-- ARG ...]",
        description="Run a program in a fresh box. Its own arguments go after --: "
        "`pybox exec job.py -- a b` gives it sys.argv == ['job.py', 'a', 'b'].",
    )
    run.add_argument("program", help="the Python file to run, or - to read it from stdin")
    run.add_argument(
        "--input", action="append", metavar="FILE", help="a file the program can read (repeatable)"
    )
    run.add_argument(
        "--output", metavar="DIR", help="a new or empty directory for the files the program returns"
    )
    run.add_argument(
        "--stdin", metavar="FILE", help="a file the program reads on stdin (default: empty)"
    )
    run.add_argument(
        "--env",
        action="append",
        metavar="NAME=VALUE",
        help="an environment variable for the program (repeatable)",
    )
    add_limit_flags(run)
    _program_arguments_after_double_dash(run)
    run.add_argument("--image", default="stdlib", help="a recorded image (default: stdlib)")
    add_runtime_flag(run)
    add_egress_flag(run)
    shown = run.add_mutually_exclusive_group()
    shown.add_argument("--json", action="store_true", help="print one JSON record on stdout")
    shown.add_argument(
        "--quiet",
        "-q",
        action="store_true",
        help="print only the program's output and a one-line result (same exit code)",
    )
    run.set_defaults(handler=cmd_exec)
