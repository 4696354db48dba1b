"""What every `pybox` command shares: the parser class, messages, exit codes."""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Iterable, Mapping

from pybox._core.display import escape_lines, escape_text, plural
from pybox._core.errors import ConfigError, InvalidRequest, PyboxError
from pybox._frontends.cli._argparse_private import (
    HelpFormatter,
    options_of,
    subcommand_actions,
)

# What a command needs is imported where it is used: `pybox version` and
# `pybox --help` import this module, `_argparse_private` and no more
# (tests/unit/test_cli_entry.py).
# Not typing's TYPE_CHECKING: importing typing costs every command.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, NoReturn, TextIO

    from pybox._core.limits import LimitField
    from pybox._core.receipt import Receipt
    from pybox._frontends.cli._argparse_private import ArgumentGroup
    from pybox._orchestration.hosts import ToolPaths
    from pybox._orchestration.session import Session

EXIT_TIMED_OUT = 124
EXIT_PYBOX_FAILED = 125
EXIT_REJECTED = 2
EXIT_STOPPED = 130

# What `add_subparsers()` returns; argparse does not name the type publicly.
if TYPE_CHECKING:
    Commands = Any
else:
    Commands = object  # only ever an annotation
# CLI flag -> (configuration key, help text), for flags that set a bounded value.
FlagTable = Mapping[str, tuple[str, str]]


def _builtin_defaults(fields: Mapping[str, LimitField]) -> object | None:
    """The built-in defaults of a table of bounded fields, for --help."""
    from pybox._core.limits import BUILTIN_DEFAULTS, FIELDS_BY_KEY

    if fields is FIELDS_BY_KEY:
        return BUILTIN_DEFAULTS
    from pybox._core.repair import REPAIR_DEFAULTS, REPAIR_FIELDS_BY_KEY

    return REPAIR_DEFAULTS if fields is REPAIR_FIELDS_BY_KEY else None


EXIT_CODES_HELP = """\
exit codes:
  pybox exec        the program's own exit code; 124 it timed out; 125 pybox or the
                    engine failed; 130 stopped (Ctrl-C, SIGTERM); 2 request rejected
  other commands    0 done; 2 bad input or usage (a bare `pybox` or `pybox image`
                    prints its help and exits 2); 125 pybox or the engine failed;
                    130 stopped; `pybox verify`: 1 when a case was not contained;
                    `pybox audit verify`: 1 when the audit chain is broken
"""
# Options of `pybox` itself that people also try after the command.
GLOBAL_OPTIONS = ("--config", "--engine")


class ArgumentParser(argparse.ArgumentParser):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_REJECTED, f"pybox: {message}. Run `{self.prog} --help` for the options.\n")

    def refuse_extras(self, extras: list[str]) -> NoReturn:
        """What was left over after parsing, named: an unknown option comes first
        (with the nearest real one), so a typo is never read as a file name."""
        unknown = [item for item in extras if item.startswith("-") and item != "-"]
        if unknown:
            flag = unknown[0].split("=", 1)[0]
            import difflib

            known = [o for o in options_of(self) if o.startswith("--")]
            near = difflib.get_close_matches(flag, known, n=1)
            hint = f" (did you mean {near[0]}?)" if near else ""
            self.error(f"unknown option {flag}{hint}")
        words = f"argument{'s' if len(extras) > 1 else ''}: {' '.join(extras)}"
        if self.prog.endswith(" exec"):
            words += " (the program's own arguments go after --: `pybox exec job.py -- a b`)"
        self.error(f"unexpected {words}")


class _GlobalOnly(argparse.Action):
    """A global option given after the command: say where it goes instead."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        top, _, command = parser.prog.partition(" ")
        parser.error(
            f"{option_string} is a global option: put it before the command, as in "
            f"`{top} {option_string} {values} {command} [...]`"
        )


def finish_parsers(parser: argparse.ArgumentParser, epilog: str = EXIT_CODES_HELP) -> None:
    """What every command's parser gets, whoever registered it.

    Each parser names itself in the namespace (so leftovers are reported by the
    command they were given to), prints its help when run without its action,
    hints at a misplaced global option, and lists the exit codes in --help.
    """
    parser.set_defaults(pybox_parser=parser)
    if parser.epilog is None:
        parser.epilog = epilog
    for action in subcommand_actions(parser):
        if action.required:
            # Run bare, a command group prints its help (exit 2) instead of one usage line.
            action.required = False
            parser.set_defaults(handler=lambda _args, shown=parser: _print_help(shown))
        finish_commands(action.choices.values(), epilog)


def finish_commands(
    children: Iterable[argparse.ArgumentParser], epilog: str = EXIT_CODES_HELP
) -> None:
    """What `finish_parsers` gives a parser's commands, for commands added after it
    ran (no parent parser is made for them: each one costs every command line)."""
    for child in dict.fromkeys(children):
        for option in GLOBAL_OPTIONS:
            if option not in options_of(child):
                # Its own dest and no default: the global value must not be overwritten.
                child.add_argument(
                    option,
                    action=_GlobalOnly,
                    dest=f"misplaced_{option.lstrip('-')}",
                    default=argparse.SUPPRESS,
                    metavar="VALUE",
                    help=argparse.SUPPRESS,
                )
        finish_parsers(child, epilog)


def _print_help(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return EXIT_REJECTED


# On a terminal, before pybox's own lines after a program's output: CAN abandons an
# escape sequence left half-written, ST ends an OSC/DCS/APC/PM/SOS string left open
# (one would swallow everything after it), SGR 0 resets colours and attributes.
TERMINAL_RESET = "\x18\x1b\\\x1b[0m"
# pybox's mark on a terminal: "pybox:" in bold reverse video. Program output shown on
# a terminal has every escape sequence neutralised, so it cannot draw this mark.
MARK_ON, MARK_OFF = "\x1b[1;7m", "\x1b[0m"
PYBOX_PREFIX = "pybox:"
# Lines meant to be read in a terminal fit the classic width.
TERMINAL_COLUMNS = 80


def say(message: str, stream: TextIO | None = None) -> None:
    """Print one message of pybox's. Anything in it a terminal would act on (text that
    came from a box, a model or an engine) is shown as an escape, line by line."""
    target = stream or sys.stderr
    target.write(escape_lines(message) + "\n")
    target.flush()


def fit(text: str, width: int = TERMINAL_COLUMNS, indent: str = "    ") -> str:
    """`text` escaped and wrapped to `width` columns, later lines indented by `indent`."""
    import textwrap

    return textwrap.fill(
        escape_text(text),
        width=width,
        subsequent_indent=indent,
        break_long_words=True,
        break_on_hyphens=False,
    )


def is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a replaced or closed stream
        return False


def styled(stream: TextIO) -> bool:
    """Whether pybox marks its lines on `stream`: a terminal that understands escapes.
    (A stream relayed to a pool service's client carries the client's TERM.)"""
    term = getattr(stream, "pybox_term", None)
    if not isinstance(term, str):
        term = os.environ.get("TERM", "")
    return is_terminal(stream) and term != "dumb"


def say_after_output(lines: list[str], stream: TextIO, output_ended_line: bool) -> None:
    """pybox's own lines after a program's output, in a form the program cannot forge.

    On a terminal: reset whatever state the output may have left, start on a fresh
    line, and mark the first line's "pybox:" (see MARK_ON). Elsewhere the lines
    are plain; every line is escaped either way.
    """
    if not lines:
        return
    safe = [escape_lines(line) for line in lines]
    if styled(stream):
        stream.write(TERMINAL_RESET + ("" if output_ended_line else "\n"))
        first = safe[0]
        if first.startswith(PYBOX_PREFIX):
            safe[0] = MARK_ON + PYBOX_PREFIX + MARK_OFF + first[len(PYBOX_PREFIX) :]
    elif not output_ended_line:
        stream.write("\n")
    stream.write("\n".join(safe) + "\n")
    stream.flush()


def boxes_exist(count: int) -> str:
    """`1 pybox box exists`, `3 pybox boxes exist`."""
    return f"{plural(count, 'pybox box', 'pybox boxes')} {'exists' if count == 1 else 'exist'}"


def progress(message: str) -> None:
    say(f"pybox: {message}")


def open_session(args: argparse.Namespace) -> Session:
    from pybox._orchestration.session import Session

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
    from pybox._orchestration.hosts import ToolPaths

    return ToolPaths(colima=args.colima, docker=args.docker)


def status_exit_code(receipt: Receipt) -> int:
    from pybox._core.receipt import Status

    if receipt.status is Status.TIMED_OUT:
        return EXIT_TIMED_OUT
    if receipt.status is Status.STOPPED:
        return EXIT_STOPPED
    if receipt.status is Status.SANDBOX_ERROR or receipt.exit_code is None:
        return EXIT_PYBOX_FAILED
    return receipt.exit_code


def read_file(path: str, what: str) -> bytes:
    from pathlib import Path

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
    import json

    return json.dumps(
        {version_key: version, "error": {"kind": error_kind(exc), "message": str(exc)}}
    )


def add_bounded_flags(
    parser: argparse.ArgumentParser | ArgumentGroup,
    flags: FlagTable,
    fields: Mapping[str, LimitField],
) -> None:
    defaults = _builtin_defaults(fields)
    for flag, (key, help_text) in flags.items():
        field = fields[key]
        metavar = field.unit.upper().replace(" ", "_")
        shown = help_text.replace("%", "%%")
        if defaults is not None:
            # The value comes from the operator's config when it sets one, so say both.
            default = field.describe(getattr(defaults, field.attr))
            shown += f" (default: {default}, unless the config sets another)"
        parser.add_argument(flag, metavar=metavar, help=shown)


def bounded_flag_values(
    args: argparse.Namespace, flags: FlagTable, fields: Mapping[str, LimitField]
) -> dict[str, float | int]:
    """The values given for `flags`, in base units, keyed by attribute."""
    from pybox._core.limits import parse_user_value

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
