"""The `pybox` command line.

Exit codes of `pybox exec`: the program's own exit code; 124 when it timed
out; 125 when pybox or the engine failed; 130 when stopped; 2 for a rejected
request. Other commands: 0 on success, 2 for bad input, 125 for failures;
`pybox verify` exits 1 when a case was not contained. A bare `pybox` (or a
command group such as `pybox image` without its action) prints its help on
stderr and exits 2: nothing was done. `pybox audit verify` exits 1 when the
audit chain is broken. `--help` lists these codes.

Each command group lives in its own module with a `register(commands)`
function. Other front ends (the MCP server) add their commands through
`main(argv, extra_commands=...)`, called by the composition root
`pybox._main`, so front ends never import each other.

A command line starts fast by importing only what its command needs: the
groups are listed as `CommandGroup`s (each command's name and one-line help),
and a group's module is imported, and its `register` run, only when one of its
commands is chosen. `pybox version` and `pybox --help` import no command's
implementation; tests/unit/test_cli_entry.py pins that.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Callable, Mapping, Sequence

from pybox._core.errors import ConfigError, PyboxError, RequestRejected
from pybox._frontends.cli._argparse_private import HelpFormatter, Subcommands
from pybox._frontends.cli._common import (
    EXIT_PYBOX_FAILED,
    EXIT_REJECTED,
    EXIT_STOPPED,
    ArgumentParser,
    Commands,
    finish_commands,
    finish_parsers,
    say,
)
from pybox._version import __version__

# Not typing's: importing typing costs every command (see pybox/__init__.py).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from types import FrameType
    from typing import Any, TextIO

Registrar = Callable[[Commands], None]


class CommandGroup:
    """The commands a registrar adds, each with its one-line help for `pybox --help`.

    The registrar runs (and imports what it needs) only when one of these
    commands is chosen. It must add exactly these commands with this help; the
    test of the command line's start-up checks every group.
    """

    __slots__ = ("commands", "register")

    def __init__(self, register: Registrar, commands: Mapping[str, str]) -> None:
        self.register = register
        self.commands = dict(commands)


def _module_group(module: str, commands: Mapping[str, str]) -> CommandGroup:
    """The commands `register` of this package's `module` adds, imported when chosen."""

    def register(parsers: Commands) -> None:
        import importlib

        importlib.import_module(f"{__name__}.{module}").register(parsers)

    return CommandGroup(register, commands)


COMMAND_GROUPS: tuple[CommandGroup, ...] = (
    _module_group("_exec", {"exec": "run a program in a fresh box"}),
    _module_group(
        "_images",
        {
            "setup": "check the engine (or make pybox's VM on macOS) and build the stdlib image",
            "image": "build and list images",
        },
    ),
    _module_group(
        "_maintenance",
        {
            "sweep": "remove boxes left by runs that died",
            "doctor": "read-only check of platform, tools, VM, engine, images and leftovers",
            "version": "print the version",
        },
    ),
    _module_group(
        "_sandbox",
        {"sandbox": "create, use and destroy sandboxes that keep their files between runs"},
    ),
    _module_group(
        "_experiment",
        {"experiment": "experiment on a copy of a project: commands, tests, diffs, comparisons"},
    ),
    _module_group("_vm", {"vm": "start, stop, check or delete pybox's VM (macOS)"}),
    _module_group(
        "_verify",
        {"verify": "prove containment here: run hostile programs, judge each on evidence"},
    ),
    _module_group(
        "_repair",
        {"repair": "let a model propose fixes; each runs in a fresh box until a goal is met"},
    ),
    _module_group("_runs", {"runs": "list recorded runs, show one and its receipt"}),
    _module_group("_pool", {"pool": "start, stop or check the warm pool service for `pybox exec`"}),
    _module_group("_audit", {"audit": "show the audit log's last entries, verify its chain"}),
)


def terminal_columns() -> int:
    """The terminal's width as `shutil.get_terminal_size()` gives it ($COLUMNS, else
    the terminal's, else 80), without importing shutil."""
    try:
        columns = int(os.environ.get("COLUMNS", ""))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns or 80


class _SizedHelpFormatter(HelpFormatter):
    """The command line's help formatter, given the terminal's width: left to
    itself, argparse imports shutil for it (with bz2 and lzma, about 2 ms) every
    time an argument is added, which every command does."""

    def __init__(
        self,
        prog: str,
        indent_increment: int = 2,
        max_help_position: int = 24,
        width: int | None = None,
    ) -> None:
        width = terminal_columns() - 2 if width is None else width
        super().__init__(prog, indent_increment, max_help_position, width)


__all__ = ["COMMAND_GROUPS", "CommandGroup", "Commands", "Registrar", "build_parser", "main"]


class _Commands(Subcommands):
    """`pybox`'s commands. A command listed by a `CommandGroup` is named (its choice
    and its help line) before it has a parser: its group's registrar makes the
    parser when the command is chosen, for its help too. Until then the name maps
    to one shared, empty stand-in, so argparse knows it as a choice. (What this
    takes of argparse's private API is in `_argparse_private`.)"""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._stand_in = ArgumentParser(add_help=False)
        self._waiting: dict[str, CommandGroup] = {}
        self._claimable: set[str] = set()

    def add_group(self, group: CommandGroup | Registrar) -> None:
        if not isinstance(group, CommandGroup):
            self._run_registrar(group, ())  # a bare registrar adds its commands now
            return
        for name, help_text in group.commands.items():
            self.name_command(name, help_text, self._stand_in)
            self._waiting[name] = group

    def add_parser(self, name: str, **kwargs: Any) -> ArgumentParser:
        kwargs.setdefault("formatter_class", _SizedHelpFormatter)
        if name in self._claimable:
            # A listed command: its help line is there already, and its parser takes
            # the stand-in's place (the order of the commands stays as listed).
            self._claimable.discard(name)
            parser = self.put_parser(name, **kwargs)
        else:
            parser = super().add_parser(name, **kwargs)
        assert isinstance(parser, ArgumentParser)  # parser_class: every parser is ours
        return parser

    def fill(self, name: str) -> None:
        """Run the registrar of `name`'s group, if it has not run yet."""
        group = self._waiting.get(name)
        if group is None:
            return
        names = [listed for listed, waiting in self._waiting.items() if waiting is group]
        for listed in names:
            del self._waiting[listed]
        self._run_registrar(group.register, names)

    def fill_all(self) -> None:
        for name in list(self._waiting):
            self.fill(name)

    def _run_registrar(self, register: Registrar, listed: Sequence[str]) -> None:
        parsers = self.parsers()
        before = set(parsers)
        self._claimable = set(listed)
        try:
            register(self)
            unclaimed = sorted(self._claimable)
        finally:
            self._claimable = set()
        if unclaimed:
            raise RuntimeError(f"the registrar of {unclaimed} did not add them")  # a bug
        added = {*listed, *(set(parsers) - before)}
        # `pybox`'s own parser was finished before any command was added.
        finish_commands(parsers[name] for name in added)

    def choosing(self, name: str) -> None:
        self.fill(name)


def build_parser(
    extra_commands: Sequence[CommandGroup | Registrar] = (), *, fill: bool = False
) -> argparse.ArgumentParser:
    """`pybox`'s parser. Listed commands are filled in when chosen, or all at once
    with `fill=True`; bare registrars in `extra_commands` run at once."""
    parser = ArgumentParser(
        prog="pybox",
        description="Run untrusted Python in a fresh, sealed box and get a receipt.",
        formatter_class=_SizedHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"pybox {__version__}")
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="operator config file (TOML), given before the command (default: $PYBOX_CONFIG)",
    )
    parser.add_argument(
        "--engine",
        dest="engine_choice",
        choices=("auto", "docker", "podman"),
        help="the container engine, given before the command (default: $PYBOX_ENGINE, the "
        "config's engine, else Docker's socket if there is one, then Podman's)",
    )
    commands = parser.add_subparsers(
        # prog as argparse would work it out, given so that no usage is formatted for it
        prog="pybox",
        dest="command",
        metavar="COMMAND",
        parser_class=ArgumentParser,
        action=_Commands,
    )
    assert isinstance(commands, _Commands)
    commands.required = True
    finish_parsers(parser)  # before any command is added: each is finished as it is
    for group in (*COMMAND_GROUPS, *extra_commands):
        commands.add_group(group)
    if fill:
        commands.fill_all()
    return parser


def parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse argv; anything left over is refused by the command it was given to."""
    args, extras = parser.parse_known_args(argv)
    if extras:
        leaf = getattr(args, "pybox_parser", parser)
        if not isinstance(leaf, ArgumentParser):  # pragma: no cover - every parser is ours
            parser.error(f"unrecognized arguments: {' '.join(extras)}")
        leaf.refuse_extras(extras)
    return args


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main(
    argv: Sequence[str] | None = None, extra_commands: Sequence[CommandGroup | Registrar] = ()
) -> int:
    parser = build_parser(extra_commands)
    args = parse(parser, argv)
    if args.engine_choice:
        # One place for every command (and the processes it starts): the flag wins
        # over the config file, as PYBOX_ENGINE does.
        os.environ["PYBOX_ENGINE"] = args.engine_choice
    handler: Callable[[argparse.Namespace], int] = args.handler
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        return handler(args)
    except Exception as exc:
        return command_failed(exc)
    except KeyboardInterrupt:
        say("pybox: stopped before a box was started.")
        return EXIT_STOPPED
    finally:
        signal.signal(signal.SIGTERM, previous)


def command_failed(exc: Exception, stream: TextIO | None = None) -> int:
    """A command's failure said as pybox says it (on `stream`, default stderr), and
    its exit code: the one place for it, the pool service's runs included."""
    if isinstance(exc, (RequestRejected, ConfigError)):
        say(f"pybox: {exc}", stream)
        return EXIT_REJECTED
    if isinstance(exc, PyboxError):
        say(f"pybox: {exc}", stream)
        return EXIT_PYBOX_FAILED
    if isinstance(exc, BrokenPipeError):
        return EXIT_PYBOX_FAILED
    # never a traceback for a user, unless asked for
    if os.environ.get("PYBOX_DEBUG"):
        import traceback

        traceback.print_exc()
    say(
        f"pybox: internal error: {type(exc).__name__}: {exc}. This is a bug in pybox; "
        "run again with PYBOX_DEBUG=1 for details and report it.",
        stream,
    )
    return EXIT_PYBOX_FAILED
