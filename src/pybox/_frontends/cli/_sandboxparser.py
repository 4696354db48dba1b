"""The `pybox sandbox` actions' arguments (their handlers: `_sandbox`)."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from typing import Any

from pybox._core.limits import FIELDS_BY_KEY
from pybox._frontends.cli._common import add_bounded_flags
from pybox._frontends.cli._exec import (
    LIMIT_FLAGS,
    _program_arguments_after_double_dash,
    add_egress_flag,
    add_limit_flags,
    add_runtime_flag,
)

# A run in a sandbox may set only its timeout (the rest is the sandbox's, for life).
TIMEOUT_FLAG = {"--timeout": LIMIT_FLAGS["--timeout"]}


def _add_json(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON record on stdout")


def _add_id(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("sandbox_id", metavar="ID", help="the sandbox's id (sbx-...)")


def _add_timeout(parser: argparse.ArgumentParser) -> None:
    add_bounded_flags(parser, TIMEOUT_FLAG, FIELDS_BY_KEY)


def add_actions(actions: Any, handlers: Mapping[str, Callable[[argparse.Namespace], int]]) -> None:
    """Every action's parser, each with its handler (`handlers`, by action name)."""
    create = actions.add_parser("create", help="create a sandbox and print its id")
    create.add_argument("--image", default="stdlib", help="a recorded image")
    create.add_argument(
        "--library",
        action="append",
        metavar="SPEC",
        help="a package to install, name and version specifiers only (repeatable)",
    )
    add_egress_flag(create)
    add_limit_flags(create)
    add_runtime_flag(create)
    _add_json(create)
    create.set_defaults(handler=handlers["create"])

    run = actions.add_parser(
        "run",
        help="run a Python program in a sandbox",
        usage="pybox sandbox run ID FILE|- [options]",
    )
    _add_id(run)
    run.add_argument("program", metavar="FILE", help="the Python file to run, or - for stdin")
    _add_timeout(run)
    _add_shown(run)
    run.set_defaults(handler=handlers["run"])

    execute = actions.add_parser(
        "exec",
        help="run a command in a sandbox",
        usage="pybox sandbox exec ID [options] -- COMMAND [ARG ...]",
        description="Run a command in the sandbox's workspace, given as words after -- "
        "(never a shell string; for a shell: -- sh -c '...').",
    )
    _add_id(execute)
    _add_timeout(execute)
    _add_shown(execute)
    _program_arguments_after_double_dash(execute)
    execute.set_defaults(handler=handlers["exec"])

    copy = actions.add_parser(
        "cp",
        help="copy a file into or out of a sandbox",
        usage="pybox sandbox cp [--force] SRC DST",
        description="Copy one file; exactly one side is ID:PATH in a sandbox, the other a "
        "host path or - (stdin or stdout).",
    )
    copy.add_argument("source", metavar="SRC")
    copy.add_argument("target", metavar="DST")
    copy.add_argument(
        "--force",
        action="store_true",
        help="replace an existing host file in one rename "
        "(a symbolic link there is replaced itself, never written through)",
    )
    copy.set_defaults(handler=handlers["cp"])

    listing = actions.add_parser("ls", help="list a sandbox's files")
    _add_id(listing)
    listing.add_argument("path", nargs="?", default="", metavar="PATH", help="a folder in it")
    _add_json(listing)
    listing.set_defaults(handler=handlers["ls"])

    destroy = actions.add_parser("destroy", help="destroy a sandbox (safe to repeat)")
    _add_id(destroy)
    _add_json(destroy)
    destroy.set_defaults(handler=handlers["destroy"])

    every = actions.add_parser("list", help="list the live sandboxes")
    _add_json(every)
    every.set_defaults(handler=handlers["list"])


def _add_shown(parser: argparse.ArgumentParser) -> None:
    shown = parser.add_mutually_exclusive_group()
    shown.add_argument(
        "--json", action="store_true", help="print one JSON record on stdout (as `pybox exec`)"
    )
    shown.add_argument(
        "--quiet", "-q", action="store_true", help="print only the output and a one-line result"
    )
