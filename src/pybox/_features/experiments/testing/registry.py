"""The test runners, in the order they are tried, and how an output finds its parser.

A toolchain (Node, Go, Rust, ...) joins by adding a module with a `TestRunner`
and naming it in RUNNERS; nothing else changes."""

from __future__ import annotations

from collections.abc import Sequence

from pybox._features.experiments.testing.cargo_runner import CARGO_TEST
from pybox._features.experiments.testing.go_runner import GO_TEST
from pybox._features.experiments.testing.jest_runner import JEST
from pybox._features.experiments.testing.node_runner import NODE_TEST
from pybox._features.experiments.testing.pytest_runner import PYTEST
from pybox._features.experiments.testing.summary import (
    ReadFile,
    TestRunner,
    TestSummary,
    unparsed,
)
from pybox._features.experiments.testing.unittest_runner import UNITTEST
from pybox._features.experiments.testing.vitest_runner import VITEST

# Priority order: the first whose detect() answers wins. pytest runs unittest
# tests too, so a project that configures pytest gets pytest; jest and vitest come
# before node's own runner (their test files are named alike); unittest, detected
# from any test_*.py, comes last. The order is also the order in which an output
# whose argv names no runner is tried, so each parser needs its runner's own totals.
RUNNERS: tuple[TestRunner, ...] = (PYTEST, JEST, VITEST, GO_TEST, CARGO_TEST, NODE_TEST, UNITTEST)


def detect_runner(
    paths: frozenset[str], read: ReadFile
) -> tuple[TestRunner, tuple[str, ...]] | None:
    """The first runner that recognises the project, and the argv it would run."""
    for runner in RUNNERS:
        argv = runner.detect(paths, read)
        if argv:
            return runner, argv
    return None


def runner_for_argv(argv: Sequence[str]) -> TestRunner | None:
    """The runner an argv names (`python3 -m pytest`, `/venv/bin/pytest-3`, `-m unittest`),
    by the first word of the argv that is a runner's name; None for any other command.
    `node` names node's own runner only when no later word names another
    (`node node_modules/jest/bin/jest.js` is jest)."""
    named = [
        runner
        for word in argv
        for runner in RUNNERS
        if (base := word.replace("\\", "/").rsplit("/", 1)[-1]) == runner.name
        or base.startswith((runner.name + "-", runner.name + "."))
    ]
    return next((r for r in named if r is not NODE_TEST), named[0] if named else None)


def parse_output(
    argv: Sequence[str], stdout: str, stderr: str, exit_code: int | None
) -> TestSummary:
    """The summary of one run of `argv`: by the runner the argv names, else by the first
    parser that can read the output, else judged by the exit code (`parsed=False`)."""
    named = runner_for_argv(argv)
    ordered = (named, *(r for r in RUNNERS if r is not named)) if named else RUNNERS
    for runner in ordered:
        summary = runner.parse(stdout, stderr, exit_code)
        if summary.parsed:
            return summary
    if named is not None:
        return named.parse(stdout, stderr, exit_code)
    return unparsed("unknown", exit_code)
