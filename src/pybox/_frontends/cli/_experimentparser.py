"""The `pybox experiment` actions' arguments (handlers: `_experiment`)."""

from __future__ import annotations

import argparse
from types import ModuleType
from typing import Any

from pybox._frontends.cli._exec import (
    _program_arguments_after_double_dash,
    add_egress_flag,
    add_limit_flags,
)


def _json(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON record on stdout")


def _id(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("experiment_id", metavar="ID", help="the experiment's id (exp-...)")


def _job_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--background",
        action="store_true",
        help="print the job id at once; follow it with `pybox experiment job JOB`",
    )
    parser.add_argument("--job-worker", action="store_true", help=argparse.SUPPRESS)
    _json(parser)
    _program_arguments_after_double_dash(parser)


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r}: give a positive number of seconds")
    return value


def add_actions(actions: Any, handlers: ModuleType, wrap: Any) -> None:
    def action(name: str, help_text: str, handler: str, **kwargs: Any) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = actions.add_parser(name, help=help_text, **kwargs)
        parser.set_defaults(handler=wrap(getattr(handlers, handler)))
        return parser

    create = action("create", "copy a project into a new experiment", "cmd_create")
    create.add_argument("project", metavar="PROJECT", help="the project's folder")
    create.add_argument("--environment", default="stdlib", help="a recorded image")
    create.add_argument(
        "--env", action="append", metavar="NAME[=VALUE]",
        help="forward NAME from here, or set NAME=VALUE, for its commands (repeatable)",
    )  # fmt: skip
    create.add_argument("--library", action="append", metavar="SPEC", help="a package to install")
    add_egress_flag(create)
    create.add_argument(
        "--project-root", action="append", metavar="DIR",
        help="allow projects under DIR too (besides the config's [experiments] project_roots)",
    )  # fmt: skip
    add_limit_flags(create)
    _json(create)

    execute = action(
        "exec", "run a command in an experiment", "cmd_exec",
        usage="pybox experiment exec ID [--timeout S] [--background] -- COMMAND [ARG ...]",
    )  # fmt: skip
    _id(execute)
    execute.add_argument("--timeout", type=_positive_seconds, metavar="S", help="seconds")
    _job_flags(execute)

    test = action(
        "test", "run the project's tests (detected, or the command after --)", "cmd_test",
        usage="pybox experiment test ID [--background] [-- COMMAND [ARG ...]]",
    )  # fmt: skip
    _id(test)
    test.set_defaults(timeout=None)
    _job_flags(test)

    job = action("job", "a job's state and result", "cmd_job")
    job.add_argument("job_id", metavar="JOB")
    job.add_argument("--wait", type=float, default=0.0, metavar="S", help="wait up to S seconds")
    _json(job)
    cancel = action("cancel", "stop a running job", "cmd_cancel")
    cancel.add_argument("job_id", metavar="JOB")
    _json(cancel)

    diff = action("diff", "what changed against the baseline", "cmd_diff")
    _id(diff)
    _json(diff)
    read = action("read", "print a file of the experiment's copy", "cmd_read")
    _id(read)
    read.add_argument("path", metavar="PATH")
    write = action("write", "write a file into the experiment's copy", "cmd_write")
    _id(write)
    write.add_argument("path", metavar="PATH")
    write.add_argument("source", metavar="FILE", help="a host file, or - for stdin")
    _json(write)
    artifacts = action("collect", "keep files of the experiment in pybox's store", "cmd_artifacts")
    _id(artifacts)
    artifacts.add_argument("paths", nargs="+", metavar="PATH")
    _json(artifacts)

    show = action("show", "an experiment's record and state history", "cmd_show")
    _id(show)
    _json(show)
    listing = action("list", "the live experiments", "cmd_list")
    listing.add_argument("--all", action="store_true", help="destroyed ones too")
    _json(listing)
    destroy = action(
        "destroy", "record the changes, remove the box and the copy (safe to repeat)",
        "cmd_destroy",
    )  # fmt: skip
    _id(destroy)
    _json(destroy)
    prune = action(
        "prune", "remove ended experiments' kept files past the operator's age and budget",
        "cmd_prune",
    )  # fmt: skip
    _json(prune)
    compare = action("compare", "rank experiments on one project", "cmd_compare")
    compare.add_argument("experiment_ids", nargs="+", metavar="ID")
    _json(compare)
    check = action("check", "is the engine reachable; the policy in force", "cmd_check")
    _json(check)
