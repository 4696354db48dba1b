"""What every `pybox` command shares: the parser class, messages, exit codes."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NoReturn, TextIO

from pybox._core.errors import ConfigError, InvalidRequest, PyboxError
from pybox._core.limits import LimitField, parse_user_value
from pybox._core.receipt import Receipt, Status
from pybox._orchestration.platforms import ToolPaths
from pybox._orchestration.session import Session

EXIT_TIMED_OUT = 124
EXIT_PYBOX_FAILED = 125
EXIT_REJECTED = 2
EXIT_STOPPED = 130

# What `add_subparsers()` returns; argparse does not name the type publicly.
Commands = Any
# CLI flag -> (configuration key, help text), for flags that set a bounded value.
FlagTable = Mapping[str, tuple[str, str]]


class ArgumentParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_REJECTED, f"pybox: {message}. Run `{self.prog} --help` for the options.\n")


def say(message: str, stream: TextIO | None = None) -> None:
    target = stream or sys.stderr
    target.write(message + "\n")
    target.flush()


def progress(message: str) -> None:
    say(f"pybox: {message}")


def open_session(args: argparse.Namespace) -> Session:
    return Session.open(os.environ, args.config)


def add_tool_flags(parser: argparse.ArgumentParser) -> None:
    """Explicit `colima` and `docker` executables (macOS); otherwise Homebrew's are used."""
    parser.add_argument(
        "--colima", metavar="PATH", help="the colima executable (default: Homebrew's)"
    )
    parser.add_argument(
        "--docker", metavar="PATH", help="the docker CLI Colima uses (default: Homebrew's)"
    )


def tool_paths(args: argparse.Namespace) -> ToolPaths:
    return ToolPaths(colima=args.colima, docker=args.docker)


def status_exit_code(receipt: Receipt) -> int:
    if receipt.status is Status.TIMED_OUT:
        return EXIT_TIMED_OUT
    if receipt.status is Status.STOPPED:
        return EXIT_STOPPED
    if receipt.status is Status.SANDBOX_ERROR or receipt.exit_code is None:
        return EXIT_PYBOX_FAILED
    return receipt.exit_code


def read_file(path: str, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise InvalidRequest(f"Cannot read the {what} {path}: {exc.strerror or exc}.") from exc


def error_kind(exc: BaseException) -> str:
    """`LimitExceeded` -> `limit_exceeded`, `EngineAPIError` -> `engine_api_error`."""
    return re.sub(
        r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", type(exc).__name__
    ).lower()


def json_error(version_key: str, version: int, exc: PyboxError) -> str:
    """The one-line JSON error record of a command's `--json` output."""
    return json.dumps(
        {version_key: version, "error": {"kind": error_kind(exc), "message": str(exc)}}
    )


def add_bounded_flags(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    flags: FlagTable,
    fields: Mapping[str, LimitField],
) -> None:
    for flag, (key, help_text) in flags.items():
        metavar = fields[key].unit.upper().replace(" ", "_")
        parser.add_argument(flag, metavar=metavar, help=help_text)


def bounded_flag_values(
    args: argparse.Namespace, flags: FlagTable, fields: Mapping[str, LimitField]
) -> dict[str, float | int]:
    """The values given for `flags`, in base units, keyed by attribute."""
    values: dict[str, float | int] = {}
    for flag, (key, _) in flags.items():
        raw = getattr(args, flag.lstrip("-").replace("-", "_"))
        if raw is None:
            continue
        try:
            values[fields[key].attr] = parse_user_value(key, raw, flag, fields)
        except ConfigError as exc:
            raise InvalidRequest(str(exc)) from None
    return values
