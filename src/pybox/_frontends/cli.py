"""The `pybox` command line.

Exit codes of `pybox exec`: the program's own exit code; 124 when it timed
out; 125 when pybox or the engine failed; 130 when stopped; 2 for a rejected
request. Other commands: 0 on success, 2 for bad input, 125 for failures.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType
from typing import Any, NoReturn, TextIO

from pybox._core.errors import ConfigError, InvalidRequest, PyboxError, RequestRejected
from pybox._core.limits import FIELDS_BY_KEY, LimitRequest, parse_user_value
from pybox._core.receipt import Receipt, Status
from pybox._core.request import CODE_NAME_RE, InputFile, RunRequest, check_input_name
from pybox._orchestration.doctor import diagnose
from pybox._orchestration.lifecycle import RunInterrupted, RunOutcome
from pybox._orchestration.outputs import discard, prepare_destination, publish
from pybox._orchestration.session import Session
from pybox._version import __version__

EXEC_JSON_VERSION = 1
EXIT_TIMED_OUT = 124
EXIT_PYBOX_FAILED = 125
EXIT_REJECTED = 2
EXIT_STOPPED = 130

# CLI flag -> configuration key (user units); one table for all limit flags.
LIMIT_FLAGS: dict[str, tuple[str, str]] = {
    "--timeout": ("timeout_s", "wall-clock limit in seconds"),
    "--memory": ("memory_mib", "memory limit in MiB (swap is never allowed)"),
    "--cpus": ("cpus", "CPU limit, in CPUs (for example 0.5)"),
    "--pids": ("pids", "most processes and threads at once"),
    "--open-files": ("open_files", "most open files per process"),
    "--writable": ("writable_mib", "size of each writable tmpfs in MiB"),
    "--output-limit": ("output_kib", "output kept per stream in KiB (head and tail)"),
}


class _ArgumentParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_REJECTED, f"pybox: {message}. Run `{self.prog} --help` for the options.\n")


def _say(message: str, stream: TextIO | None = None) -> None:
    target = stream or sys.stderr
    target.write(message + "\n")
    target.flush()


def _open_session(args: argparse.Namespace) -> Session:
    return Session.open(os.environ, args.config)


def _status_exit_code(receipt: Receipt) -> int:
    if receipt.status is Status.TIMED_OUT:
        return EXIT_TIMED_OUT
    if receipt.status is Status.STOPPED:
        return EXIT_STOPPED
    if receipt.status is Status.SANDBOX_ERROR or receipt.exit_code is None:
        return EXIT_PYBOX_FAILED
    return receipt.exit_code


def _read_file(path: str, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise InvalidRequest(f"Cannot read the {what} {path}: {exc.strerror or exc}.") from exc


def _limit_request(args: argparse.Namespace) -> LimitRequest:
    values: dict[str, float | int] = {}
    for flag, (key, _) in LIMIT_FLAGS.items():
        raw = getattr(args, flag.lstrip("-").replace("-", "_"))
        if raw is None:
            continue
        try:
            values[FIELDS_BY_KEY[key].attr] = parse_user_value(key, raw, flag)
        except ConfigError as exc:
            raise InvalidRequest(str(exc)) from None
    return LimitRequest(**values)  # type: ignore[arg-type]


def _exec_request(args: argparse.Namespace) -> RunRequest:
    if args.program == "-":
        code, code_name = sys.stdin.buffer.read(), "main.py"
    else:
        code = _read_file(args.program, "program")
        name = os.path.basename(args.program)
        code_name = name if CODE_NAME_RE.fullmatch(name) else "main.py"
    inputs = []
    for path in args.input or []:
        name = check_input_name(os.path.basename(path.rstrip("/")))
        inputs.append(InputFile(name, _read_file(path, "input file")))
    return RunRequest(
        code=code,
        code_name=code_name,
        inputs=tuple(inputs),
        limits=_limit_request(args),
        image=args.image,
        collect_outputs=args.output is not None,
    )


def _exec_json(outcome: RunOutcome, output_dir: Path | None) -> dict[str, Any]:
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


def _error_kind(exc: BaseException) -> str:
    """`LimitExceeded` -> `limit_exceeded`, `EngineAPIError` -> `engine_api_error`."""
    return re.sub(
        r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", type(exc).__name__
    ).lower()


def _json_error(exc: PyboxError) -> str:
    return json.dumps(
        {
            "pybox_exec_version": EXEC_JSON_VERSION,
            "error": {"kind": _error_kind(exc), "message": str(exc)},
        }
    )


def cmd_exec(args: argparse.Namespace) -> int:
    try:
        request = _exec_request(args)
        session = _open_session(args)
        session.resolve(request)  # a bad request is refused before the engine is touched
        destination = Path(args.output).absolute() if args.output is not None else None
        staging = prepare_destination(destination) if destination is not None else None
    except PyboxError as exc:
        if args.json:
            _say(_json_error(exc), sys.stdout)
        raise
    interrupted = False
    try:
        outcome = session.run(request, files_dir=staging)
    except RunInterrupted as stop:
        # Ctrl-C or SIGTERM: the box is gone; show what the run produced so far.
        outcome, interrupted = stop.outcome, True
    except PyboxError as exc:
        if staging is not None:
            discard(staging)
        if args.json:
            _say(_json_error(exc), sys.stdout)
        raise
    except BaseException:
        if staging is not None:
            discard(staging)
        raise
    publish_error: PyboxError | None = None
    if destination is not None and staging is not None:
        try:
            publish(staging, destination)
        except PyboxError as exc:
            # Nothing is lost: the files stay in the staging directory, which is reported.
            publish_error, destination = exc, staging
    _print_outcome(args, outcome, destination)
    if publish_error is not None:
        _say(f"pybox: {publish_error}")
        return EXIT_PYBOX_FAILED
    return EXIT_STOPPED if interrupted else _status_exit_code(outcome.receipt)


def _print_outcome(args: argparse.Namespace, outcome: RunOutcome, destination: Path | None) -> None:
    if args.json:
        _say(json.dumps(_exec_json(outcome, destination)), sys.stdout)
        return
    sys.stdout.buffer.write(outcome.stdout)
    sys.stdout.flush()
    sys.stderr.buffer.write(outcome.stderr)
    sys.stderr.flush()
    for line in outcome.receipt.summary_lines():
        _say(line)
    if destination is not None:
        _say(f"  files:  {len(outcome.output_files)} written to {destination}")


def _progress(message: str) -> None:
    _say(f"pybox: {message}")


def cmd_setup(args: argparse.Namespace) -> int:
    mode = "" if args.yes else " (dry run: nothing will be changed)"
    _say(f"pybox setup{mode}")
    session = _open_session(args)
    engine = session.engine_facts()
    _say(f"  engine: {engine.endpoint}, Docker {engine.server_version}, API {engine.api_version}")
    _say(f"  state:  {session.state.root}")
    plan = session.plan_stdlib(mirror=args.mirror, suite=args.suite)
    if plan.up_to_date and plan.recorded is not None:
        _say(f"  image:  stdlib is built and recorded ({plan.recorded.image_id[:19]})")
    else:
        _say(
            f"  image:  {'building' if args.yes else 'would build'} stdlib as {plan.reference}: "
            f"Debian {plan.recipe.suite} minbase + python3 from {plan.recipe.mirror} "
            f"(mirror found in {plan.mirror_found_in}), with debootstrap in a temporary "
            "folder that is removed afterwards"
        )
    if not args.yes:
        _say("  then:   would run print(6*7) in a fresh box to check the whole path")
        _say("Run `pybox setup --yes` to do this.")
        return 0
    session.build_stdlib(plan, _progress, force=args.force)
    outcome = session.run(RunRequest(code=b"print(6*7)\n", limits=LimitRequest(timeout_s=30.0)))
    receipt = outcome.receipt
    if receipt.status is not Status.SUCCEEDED or outcome.stdout != b"42\n":
        for line in receipt.summary_lines():
            _say(line)
        raise PyboxError("The check run did not print 42; see the receipt above.")
    _say(
        "  check:  print(6*7) -> 42 in a fresh box "
        f"({receipt.observed_by_engine.posture_fields_checked} "
        "settings verified, box removed and confirmed gone)"
    )
    _say("pybox is ready: echo 'print(6*7)' | pybox exec -")
    return 0


def cmd_image_build(args: argparse.Namespace) -> int:
    if args.name != "stdlib":
        raise InvalidRequest(
            f"Only the stdlib image can be built in this version, not {args.name!r}."
        )
    session = _open_session(args)
    plan = session.plan_stdlib(mirror=args.mirror, suite=args.suite)
    record = session.build_stdlib(plan, _progress, force=args.force)
    _say(f"{record.name} {record.image_id} {record.recipe_hash}", sys.stdout)
    return 0


def cmd_image_list(args: argparse.Namespace) -> int:
    session = _open_session(args)
    statuses = session.check_images()
    if args.json:
        _say(
            json.dumps(
                [
                    {
                        "name": s.record.name,
                        "image_id": s.record.image_id,
                        "recipe_hash": s.record.recipe_hash,
                        "built_at": s.record.built_at,
                        "present": s.present,
                        "problem": s.problem,
                    }
                    for s in statuses
                ]
            ),
            sys.stdout,
        )
        return 0
    if not statuses:
        _say("No images recorded. Run `pybox setup --yes`.", sys.stdout)
    for s in statuses:
        state = "ok" if s.problem is None else s.problem
        _say(
            f"{s.record.name:<12} {s.record.image_id[:19]}  built {s.record.built_at}  {state}",
            sys.stdout,
        )
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    report = _open_session(args).sweep()
    for name in report.removed:
        _say(f"removed {name} (confirmed gone)", sys.stdout)
    for name, why in report.kept:
        _say(f"kept {name}: {why}", sys.stdout)
    for name in report.not_confirmed:
        _say(f"could NOT confirm {name} removed", sys.stdout)
    if not (report.removed or report.kept or report.not_confirmed):
        _say("no pybox boxes found", sys.stdout)
    return EXIT_PYBOX_FAILED if report.not_confirmed else 0


def cmd_doctor(args: argparse.Namespace) -> int:
    report = diagnose(os.environ, args.config)
    if args.json:
        _say(json.dumps(report, indent=2), sys.stdout)
        return 0
    out = sys.stdout
    platform_facts = report["platform"]
    _say(
        f"pybox {report['pybox_version']} on {platform_facts['system']} "
        f"{platform_facts['machine']}, Python {platform_facts['python']}",
        out,
    )
    engine = report.get("engine")
    if engine:
        _say(f"engine: {engine['socket']} (found by {engine['found_by']})", out)
        if engine.get("reachable"):
            _say(
                f"        Docker {engine['server_version']}, API {engine['api_version']}, cgroup v"
                f"{engine['cgroup_version']} ({engine['cgroup_driver']}), "
                f"runtimes {', '.join(engine['runtimes'])}",
                out,
            )
    for image in report.get("images", []):
        _say(
            f"image:  {image['name']} {image['image_id'][:19]} {image['problem'] or 'ok'}",
            out,
        )
    boxes = report.get("boxes", [])
    _say(f"boxes:  {len(boxes)} pybox box(es) exist", out)
    for problem in report["problems"]:
        _say(f"problem: {problem['what']}: {problem['detail']} -> next: {problem['next']}", out)
    if not report["problems"]:
        _say("no problems found", out)
    return 0


def cmd_version(args: argparse.Namespace) -> int:
    _say(f"pybox {__version__}", sys.stdout)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = _ArgumentParser(
        prog="pybox",
        description="Run untrusted Python in a fresh, sealed box and get a receipt.",
    )
    parser.add_argument("--version", action="version", version=f"pybox {__version__}")
    parser.add_argument("--config", help="operator config file (TOML); default $PYBOX_CONFIG")
    commands = parser.add_subparsers(
        dest="command", metavar="COMMAND", parser_class=_ArgumentParser
    )
    commands.required = True

    run = commands.add_parser("exec", help="run a program in a fresh box")
    run.add_argument("program", help="the Python file to run, or - to read it from stdin")
    run.add_argument(
        "--input", action="append", metavar="FILE", help="a file the program can read (repeatable)"
    )
    run.add_argument(
        "--output", metavar="DIR", help="a new or empty directory for the files the program returns"
    )
    for flag, (key, help_text) in LIMIT_FLAGS.items():
        run.add_argument(
            flag, metavar=FIELDS_BY_KEY[key].unit.upper().replace(" ", "_"), help=help_text
        )
    run.add_argument("--image", default="stdlib", help="a recorded image (default: stdlib)")
    run.add_argument("--json", action="store_true", help="print one JSON record on stdout")
    run.set_defaults(handler=cmd_exec)

    setup = commands.add_parser("setup", help="check the engine and build the stdlib image")
    setup.add_argument("--yes", action="store_true", help="do it (without it: a dry run)")
    setup.add_argument(
        "--mirror", help="Debian mirror URL (default: from this machine's apt sources)"
    )
    setup.add_argument("--suite", help="Debian suite (default: this machine's)")
    setup.add_argument("--force", action="store_true", help="rebuild even if up to date")
    setup.set_defaults(handler=cmd_setup)

    image = commands.add_parser("image", help="build and list images")
    image_commands = image.add_subparsers(
        dest="image_command", metavar="ACTION", parser_class=_ArgumentParser
    )
    image_commands.required = True
    build = image_commands.add_parser("build", help="build an image")
    build.add_argument("name", help="image name (stdlib)")
    build.add_argument(
        "--mirror", help="Debian mirror URL (default: from this machine's apt sources)"
    )
    build.add_argument("--suite", help="Debian suite (default: this machine's)")
    build.add_argument("--force", action="store_true", help="rebuild even if up to date")
    build.set_defaults(handler=cmd_image_build)
    listing = image_commands.add_parser("list", help="list recorded images")
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(handler=cmd_image_list)

    sweep = commands.add_parser("sweep", help="remove boxes left by runs that died")
    sweep.set_defaults(handler=cmd_sweep)
    doctor = commands.add_parser("doctor", help="read-only check of engine, images and leftovers")
    doctor.add_argument("--json", action="store_true")
    doctor.set_defaults(handler=cmd_doctor)
    version = commands.add_parser("version", help="print the version")
    version.set_defaults(handler=cmd_version)
    return parser


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Callable[[argparse.Namespace], int] = args.handler
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        return handler(args)
    except (RequestRejected, ConfigError) as exc:
        _say(f"pybox: {exc}")
        return EXIT_REJECTED
    except PyboxError as exc:
        _say(f"pybox: {exc}")
        return EXIT_PYBOX_FAILED
    except KeyboardInterrupt:
        _say("pybox: stopped before a box was started.")
        return EXIT_STOPPED
    except BrokenPipeError:
        return EXIT_PYBOX_FAILED
    except Exception as exc:  # never a traceback for a user, unless asked for
        if os.environ.get("PYBOX_DEBUG"):
            traceback.print_exc()
        _say(
            f"pybox: internal error: {type(exc).__name__}: {exc}. This is a bug in pybox; "
            "run again with PYBOX_DEBUG=1 for details and report it."
        )
        return EXIT_PYBOX_FAILED
    finally:
        signal.signal(signal.SIGTERM, previous)
