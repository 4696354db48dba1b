"""What a test run found: counts, the failing tests' names (capped), and how it was judged."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

# At most this many failing test names are kept; `failing_truncated` says more failed.
MAX_FAILING = 50

# A project file's bytes by its path relative to the project root (posix, no "./"),
# or None when there is no such file or it cannot be read.
ReadFile = Callable[[str], bytes | None]


@dataclass(frozen=True)
class TestSummary:
    """One test run as its runner reported it.

    `parsed` is False when nothing could be read from the output: the counts are
    then 0 and the run is judged by `exit_code` alone (`note` says so)."""

    __test__ = False  # not a pytest test class

    runner: str
    parsed: bool
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    errors: int = 0
    failing: tuple[str, ...] = ()
    failing_truncated: bool = False
    exit_code: int | None = None
    note: str = ""

    @property
    def failing_count(self) -> int:
        """Failed and erroring tests together: what "failing" means when ranking."""
        return self.failed + self.errors

    def to_dict(self) -> dict[str, Any]:
        return {
            "runner": self.runner,
            "parsed": self.parsed,
            "passed": self.passed,
            "failed": self.failed,
            "skipped": self.skipped,
            "errors": self.errors,
            "failing": list(self.failing),
            "failing_truncated": self.failing_truncated,
            "exit_code": self.exit_code,
            "note": self.note,
        }


class TestRunner(Protocol):
    """A test runner: detected from a project's files, its output parsed.

    A toolchain joins by adding one module with an object of this shape and
    naming it in `registry.RUNNERS`."""

    @property
    def name(self) -> str: ...

    def detect(self, paths: frozenset[str], read: ReadFile) -> tuple[str, ...] | None:
        """The argv that runs this project's tests (plain argv, no shell), or None."""

    def parse(self, stdout: str, stderr: str, exit_code: int | None) -> TestSummary:
        """The run's summary; `parsed=False` when the output holds nothing of ours."""


def summarize(
    runner: str,
    *,
    passed: int,
    failed: int,
    skipped: int,
    errors: int,
    failing: Iterable[str],
    exit_code: int | None,
    note: str = "",
) -> TestSummary:
    """A parsed summary; failing names deduplicated in order and capped at MAX_FAILING."""
    names = tuple(dict.fromkeys(name for name in failing if name))
    return TestSummary(
        runner=runner,
        parsed=True,
        passed=passed,
        failed=failed,
        skipped=skipped,
        errors=errors,
        failing=names[:MAX_FAILING],
        failing_truncated=len(names) > MAX_FAILING,
        exit_code=exit_code,
        note=note,
    )


def unparsed(runner: str, exit_code: int | None, meaning: str = "") -> TestSummary:
    """A run whose output held nothing a parser could read: judged by its exit code."""
    if exit_code is None:
        verdict = "the command did not finish, so there is no exit code to judge by either"
    elif exit_code == 0:
        verdict = "judged by the exit code: 0, the command succeeded"
    else:
        verdict = f"judged by the exit code: {exit_code}, the command failed"
        if meaning:
            verdict += f" ({meaning})"
    return TestSummary(
        runner=runner,
        parsed=False,
        exit_code=exit_code,
        note=f"nothing could be parsed from the output; {verdict}",
    )


def is_test_file(path: str) -> bool:
    """A Python file named like a test: test_*.py or *_test.py (pytest's default)."""
    base = path.rsplit("/", 1)[-1]
    return base.endswith(".py") and (base.startswith("test_") or base.endswith("_test.py"))
