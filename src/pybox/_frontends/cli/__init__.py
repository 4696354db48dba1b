"""The `pybox` command line.

Exit codes of `pybox exec`: the program's own exit code; 124 when it timed
out; 125 when pybox or the engine failed; 130 when stopped; 2 for a rejected
request. Other commands: 0 on success, 2 for bad input, 125 for failures;
`pybox verify` exits 1 when a case was not contained. A bare `pybox` (or a
command group such as `pybox image` without its action) prints its help on
stderr and exits 2: nothing was done. `--help` lists these codes.

Each command group lives in its own module with a `register(commands)`
function. Other front ends (the MCP server) add their commands through
`main(argv, extra_commands=...)`, called by the composition root
`pybox._main`, so front ends never import each other.
"""

from __future__ import annotations

import argparse
import os
import signal
import traceback
from collections.abc import Callable, Sequence
from types import FrameType

from pybox._core.errors import ConfigError, PyboxError, RequestRejected
from pybox._frontends.cli import _exec, _images, _maintenance, _repair, _verify, _vm
from pybox._frontends.cli._common import (
    EXIT_PYBOX_FAILED,
    EXIT_REJECTED,
    EXIT_STOPPED,
    ArgumentParser,
    Commands,
    finish_parsers,
    say,
)
from pybox._version import __version__

Registrar = Callable[[Commands], None]
COMMAND_GROUPS: tuple[Registrar, ...] = (
    _exec.register,
    _images.register,
    _maintenance.register,
    _vm.register,
    _verify.register,
    _repair.register,
)

__all__ = ["Registrar", "build_parser", "main"]


def build_parser(extra_commands: Sequence[Registrar] = ()) -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="pybox",
        description="Run untrusted Python in a fresh, sealed box and get a receipt.",
    )
    parser.add_argument("--version", action="version", version=f"pybox {__version__}")
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="operator config file (TOML), given before the command (default: $PYBOX_CONFIG)",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=ArgumentParser)
    commands.required = True
    for register in (*COMMAND_GROUPS, *extra_commands):
        register(commands)
    finish_parsers(parser)
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


def main(argv: Sequence[str] | None = None, extra_commands: Sequence[Registrar] = ()) -> int:
    parser = build_parser(extra_commands)
    args = parse(parser, argv)
    handler: Callable[[argparse.Namespace], int] = args.handler
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        return handler(args)
    except (RequestRejected, ConfigError) as exc:
        say(f"pybox: {exc}")
        return EXIT_REJECTED
    except PyboxError as exc:
        say(f"pybox: {exc}")
        return EXIT_PYBOX_FAILED
    except KeyboardInterrupt:
        say("pybox: stopped before a box was started.")
        return EXIT_STOPPED
    except BrokenPipeError:
        return EXIT_PYBOX_FAILED
    except Exception as exc:  # never a traceback for a user, unless asked for
        if os.environ.get("PYBOX_DEBUG"):
            traceback.print_exc()
        say(
            f"pybox: internal error: {type(exc).__name__}: {exc}. This is a bug in pybox; "
            "run again with PYBOX_DEBUG=1 for details and report it."
        )
        return EXIT_PYBOX_FAILED
    finally:
        signal.signal(signal.SIGTERM, previous)
