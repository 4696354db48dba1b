"""What a repaired program must do, and how one run is judged against it."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from pybox._core.errors import InvalidRequest
from pybox._core.receipt import Status

TESTS_RUNNER_NAME = "pybox_run_tests.py"
TESTS_SUMMARY_PREFIX = "pybox-tests"
IDENTIFIER_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,99}")


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class GoalKind(StrEnum):
    EXIT0 = "exit0"
    EXPECT_STDOUT = "expect_stdout"
    TESTS = "tests"


@dataclass(frozen=True)
class GoalCheck:
    met: bool
    detail: str
    ran: bool = True  # for tests: whether the tests' summary was found


@dataclass(frozen=True)
class RepairGoal:
    """What a repaired program must do. Build one with `exit0()`, `expect_stdout()`
    or `tests()`."""

    kind: GoalKind
    expected_stdout: str | None = None
    tests_code: bytes | None = None
    tests_name: str | None = None
    module_name: str | None = None

    @classmethod
    def exit0(cls) -> RepairGoal:
        """The program ends with exit status 0."""
        return cls(GoalKind.EXIT0)

    @classmethod
    def expect_stdout(cls, text: str) -> RepairGoal:
        """The program exits 0 and prints exactly `text` (trailing line ends ignored)."""
        if not isinstance(text, str):
            raise InvalidRequest(f"The expected stdout must be text, not {type(text).__name__}.")
        return cls(GoalKind.EXPECT_STDOUT, expected_stdout=text)

    @classmethod
    def tests(
        cls,
        tests_code: str | bytes,
        *,
        tests_name: str = "test_solution.py",
        module_name: str = "solution",
    ) -> RepairGoal:
        """Stdlib `unittest` tests pass. The tests import the program as `module_name`."""
        code = tests_code.encode("utf-8") if isinstance(tests_code, str) else tests_code
        if not isinstance(code, bytes) or not code.strip():
            raise InvalidRequest("The tests must be non-empty Python source (str or bytes).")
        if not isinstance(tests_name, str) or not (
            tests_name.endswith(".py") and IDENTIFIER_RE.fullmatch(tests_name[:-3])
        ):
            raise InvalidRequest(
                f"The tests file name {tests_name!r} is not an importable module name: use "
                "letters, digits and '_', not starting with a digit, ending in .py "
                "(for example test_solution.py)."
            )
        if not isinstance(module_name, str) or not IDENTIFIER_RE.fullmatch(module_name):
            raise InvalidRequest(
                f"The program's module name {module_name!r} is not importable: use letters, "
                "digits and '_', not starting with a digit. Rename the program file."
            )
        if module_name == tests_name[:-3] or f"{module_name}.py" == TESTS_RUNNER_NAME:
            raise InvalidRequest(
                f"The program's module name {module_name!r} clashes with the tests file "
                f"{tests_name!r}; give them different names."
            )
        return cls(GoalKind.TESTS, tests_code=code, tests_name=tests_name, module_name=module_name)

    def describe(self) -> str:
        if self.kind is GoalKind.EXIT0:
            return "the program ends with exit status 0"
        if self.kind is GoalKind.EXPECT_STDOUT:
            return (
                "the program ends with exit status 0 and prints exactly the expected text "
                "on stdout (trailing line ends ignored)"
            )
        return (
            f"the unittest tests in {self.tests_name} pass; they import the program as "
            f"the module {self.module_name!r}"
        )

    def to_dict(self) -> dict[str, Any]:
        tests = None
        if self.tests_code is not None:
            tests = {
                "name": self.tests_name,
                "module": self.module_name,
                "size_bytes": len(self.tests_code),
                "sha256": sha256_hex(self.tests_code),
            }
        return {"kind": self.kind.value, "expected_stdout": self.expected_stdout, "tests": tests}

    def check(
        self,
        status: Status,
        exit_code: int | None,
        stdout: bytes,
        stdout_truncated: bool,
        nonce: str,
    ) -> GoalCheck:
        """Whether one run met the goal. Judged from what came out of the box, which
        is untrusted: a program written to cheat could fake it (see docs/repair.md)."""
        if status is not Status.SUCCEEDED:
            exit_text = "" if exit_code is None else f", exit {exit_code}"
            ended = GoalCheck(False, f"the run ended {status.value}{exit_text}")
            if self.kind is GoalKind.TESTS:
                tests = _check_tests_summary(stdout, nonce)
                return GoalCheck(False, f"{tests.detail}; {ended.detail}") if tests.ran else ended
            return ended
        if self.kind is GoalKind.EXIT0:
            return GoalCheck(True, "exit status 0")
        if self.kind is GoalKind.EXPECT_STDOUT:
            if stdout_truncated:
                return GoalCheck(False, "stdout was longer than the output limit (truncated)")
            assert self.expected_stdout is not None
            try:
                text = stdout.decode("utf-8")
            except UnicodeDecodeError:
                return GoalCheck(False, "stdout is not valid UTF-8")
            if _trim_line_ends(text) == _trim_line_ends(self.expected_stdout):
                return GoalCheck(True, "exit status 0 and the expected stdout")
            return GoalCheck(False, "stdout differs from the expected text")
        return _check_tests_summary(stdout, nonce)


def _trim_line_ends(text: str) -> str:
    return text.replace("\r\n", "\n").rstrip("\n")


def _check_tests_summary(stdout: bytes, nonce: str) -> GoalCheck:
    pattern = re.compile(
        rf"^{TESTS_SUMMARY_PREFIX} {re.escape(nonce)} ran=(\d+) failures=(\d+) errors=(\d+)$"
    )
    for line in stdout.decode("utf-8", "replace").splitlines():
        found = pattern.match(line)
        if found:
            ran, failures, errors = (int(x) for x in found.groups())
            if ran == 0:
                return GoalCheck(False, "no test ran")
            if failures or errors:
                return GoalCheck(False, f"{ran} tests ran: {failures} failed, {errors} errors")
            return GoalCheck(True, f"all {ran} tests passed")
    return GoalCheck(
        False,
        "the test run ended without its summary (the tests did not run to the end)",
        ran=False,
    )


def runner_for_tests(goal: RepairGoal, nonce: str) -> bytes:
    """The program the box runs for a `tests` goal.

    The proposal and the tests are read-only input files; the runner puts the
    input folder first on sys.path, runs the tests with stdlib unittest (report
    on stderr) and prints one summary line carrying a per-run nonce, so a
    proposal that merely exits 0 on import does not pass.
    """
    assert goal.tests_name is not None
    module = goal.tests_name[:-3]
    return (
        "import os, sys, unittest\n"
        "sys.path.insert(0, os.environ['PYBOX_INPUT_DIR'])\n"
        f"suite = unittest.defaultTestLoader.loadTestsFromName({module!r})\n"
        "result = unittest.TextTestRunner(stream=sys.stderr, verbosity=2).run(suite)\n"
        f"print('{TESTS_SUMMARY_PREFIX} {nonce} ran=%d failures=%d errors=%d' % (\n"
        "    result.testsRun, len(result.failures) + len(result.unexpectedSuccesses),\n"
        "    len(result.errors)), flush=True)\n"
        "sys.exit(0 if result.wasSuccessful() and result.testsRun else 1)\n"
    ).encode()
