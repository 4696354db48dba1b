"""Test-runner detection and output parsing, on outputs captured from real runs
(tests/unit/data/test_output/index.json says how each was made)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pybox._features.experiments.testing import registry, summary
from pybox._features.experiments.testing.pytest_runner import PYTEST
from pybox._features.experiments.testing.unittest_runner import UNITTEST

DATA = Path(__file__).parent / "data" / "test_output"
INDEX: dict[str, Any] = json.loads((DATA / "index.json").read_text())["cases"]

U = "tests.test_b.TestB."
P = "tests/test_m.py::"
Expected = tuple[str, int, int, int, int, tuple[str, ...], str]
# The same project, -v or not: the same summary.
UNITTEST_MIXED: Expected = (
    "unittest",
    2,
    3,
    3,  # 2 skipped + 1 expected failure
    1,
    (
        U + "test_boom",
        U + "test_also_wrong",
        U + "test_wrong",
        "tests.test_b.TestC.test_c_wrong",
    ),
    "",
)
PYTEST_MIXED: Expected = (
    "pytest",
    3,  # 2 passed + 1 xpassed
    4,
    2,  # 1 skipped + 1 xfailed
    1,
    (
        P + "test_bad",
        P + "test_param[a b]",
        P + "test_param[c - d]",
        P + "TestK::test_method_bad",
        P + "test_uses_broken",
    ),
    "",
)
# case: (runner, passed, failed, skipped, errors, failing names, a word of the note)
EXPECTED: dict[str, Expected] = {
    "unittest_pass": ("unittest", 3, 0, 0, 0, (), ""),
    "unittest_mixed": UNITTEST_MIXED,
    "unittestq_mixed": UNITTEST_MIXED,
    "unittestq_pass": ("unittest", 3, 0, 0, 0, (), ""),
    "unittest_skips": ("unittest", 1, 0, 1, 0, (), ""),
    "unittest_importerr": ("unittest", 1, 0, 0, 1, ("tests.test_i",), ""),
    "unittest_setup": ("unittest", 1, 0, 0, 1, ("tests.test_setup.TestSetup.setUpClass",), ""),
    "unittest_none": ("unittest", 0, 0, 0, 0, (), "no tests"),
    "unittest_subtests": (
        "unittest",
        1,
        2,
        0,
        0,
        ("tests.test_sub.TestSub.test_evens (i=1)", "tests.test_sub.TestSub.test_evens (i=3)"),
        "",
    ),
    "unittest_failing_project": (
        "unittest",
        11,
        3,
        0,
        0,
        (
            "tests.test_money.TestDiscountAndTax.test_tax_rounds_half_cents_up",
            "tests.test_money.TestLineItems.test_subtotal_of_line_items",
            "tests.test_money.TestSplit.test_split_three_ways",
        ),
        "",
    ),
    "pytest_pass": ("pytest", 2, 0, 0, 0, (), ""),
    "pytest_mixed": PYTEST_MIXED,
    "pytest_q_mixed": PYTEST_MIXED,
    "pytest_collect": ("pytest", 0, 0, 0, 1, ("tests/test_c.py",), "interrupted"),
    "pytest_none": ("pytest", 0, 0, 0, 0, (), "no tests"),
    "pytest_unittest_mixed": (
        "pytest",
        2,
        4,
        3,
        0,
        (
            "tests/test_b.py::TestB::test_also_wrong",
            "tests/test_b.py::TestB::test_boom",
            "tests/test_b.py::TestB::test_wrong",
            "tests/test_b.py::TestC::test_c_wrong",
        ),
        "",
    ),
    "pytest_subtests": (
        "pytest",
        2,
        2,
        0,
        0,
        (
            "tests/test_sub.py::TestSub::test_evens (i=1)",
            "tests/test_sub.py::TestSub::test_evens (i=3)",
        ),
        "",
    ),
    "pytest_failing_project": (
        "pytest",
        11,
        3,
        0,
        0,
        (
            "tests/test_money.py::TestLineItems::test_subtotal_of_line_items",
            "tests/test_money.py::TestDiscountAndTax::test_tax_rounds_half_cents_up",
            "tests/test_money.py::TestSplit::test_split_three_ways",
        ),
        "",
    ),
}


def captured(case: str) -> tuple[list[str], str, str, int]:
    meta = INDEX[case]
    return (
        meta["argv"],
        (DATA / f"{case}.stdout").read_text(),
        (DATA / f"{case}.stderr").read_text(),
        meta["exit_code"],
    )


def test_every_captured_case_is_pinned() -> None:
    # The other toolchains' captures are pinned in test_toolchain_runners.py.
    python = {case for case in INDEX if case.startswith(("pytest", "unittest"))}
    assert set(EXPECTED) == python - {"pytest_usage"}


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_captured_output_parses(case: str) -> None:
    argv, stdout, stderr, exit_code = captured(case)
    runner, passed, failed, skipped, errors, failing, note = EXPECTED[case]
    result = registry.parse_output(argv, stdout, stderr, exit_code)
    assert result.parsed
    assert (result.runner, result.passed, result.failed, result.skipped, result.errors) == (
        runner,
        passed,
        failed,
        skipped,
        errors,
    )
    assert result.failing == failing
    assert not result.failing_truncated
    assert result.exit_code == exit_code
    assert note in result.note
    # The same output read without its argv is found by trying each parser.
    assert registry.parse_output(["make", "check"], stdout, stderr, exit_code) == result


def test_unittest_reports_on_stderr_and_pytest_on_stdout() -> None:
    _, stdout, stderr, _ = captured("unittest_failing_project")
    assert stdout == "" and "Ran 14 tests" in stderr
    _, stdout, stderr, _ = captured("pytest_failing_project")
    assert stderr == "" and "3 failed, 11 passed" in stdout


def test_unittest_report_redirected_to_stdout_is_read_too() -> None:
    argv, stdout, stderr, code = captured("unittest_mixed")
    swapped = registry.parse_output(argv, stderr, stdout, code)
    assert (swapped.failed, swapped.errors, swapped.passed) == (3, 1, 2)


def test_a_usage_error_is_judged_by_the_exit_code() -> None:
    argv, stdout, stderr, code = captured("pytest_usage")
    result = registry.parse_output(argv, stdout, stderr, code)
    assert not result.parsed and result.runner == "pytest"
    assert (result.passed, result.failed, result.failing) == (0, 0, ())
    assert "nothing could be parsed" in result.note and "4" in result.note
    assert "wrong option" in result.note


@pytest.mark.parametrize(
    ("code", "words"),
    [(0, "0, the command succeeded"), (3, "3, the command failed"), (None, "did not finish")],
)
def test_unknown_output_falls_back_to_the_exit_code(code: int | None, words: str) -> None:
    result = registry.parse_output(["./check.sh"], "all good\n", "", code)
    assert not result.parsed and result.runner == "unknown"
    assert words in result.note and result.exit_code == code
    assert result.to_dict()["parsed"] is False


def test_the_short_form_summary() -> None:
    result = PYTEST.parse("..F\n3 failed, 11 passed in 0.05s\n", "", 1)
    assert (result.failed, result.passed) == (3, 11)
    long = PYTEST.parse("== 1 failed, 2 errors in 65.20s (0:01:05) ==\n", "", 1)
    assert (long.failed, long.errors) == (1, 2)


def test_failing_names_are_capped() -> None:
    lines = "".join(f"FAILED tests/test_x.py::test_{i} - AssertionError\n" for i in range(60))
    result = PYTEST.parse(lines + "==== 60 failed in 1.00s ====\n", "", 1)
    assert result.failed == 60 and len(result.failing) == summary.MAX_FAILING
    assert result.failing_truncated and result.failing[0] == "tests/test_x.py::test_0"


def test_unittest_python_3_10_headers() -> None:
    report = (
        "FAIL: test_x (tests.test_a.TestA)\n---\n"
        "ERROR: tests.test_b (unittest.loader._FailedTest)\n---\n"
        "Ran 2 tests in 0.001s\n\nFAILED (failures=1, errors=1)\n"
    )
    result = UNITTEST.parse("", report, 1)
    assert result.failing == ("tests.test_a.TestA.test_x", "tests.test_b")
    assert result.passed == 0


@pytest.mark.parametrize(
    ("argv", "name"),
    [
        (["python3", "-m", "pytest", "tests/test_unittest_style.py"], "pytest"),
        (["/venv/bin/pytest-3", "-q"], "pytest"),
        (["python3", "-m", "unittest", "discover"], "unittest"),
        (["python3", "-m", "unittest.main"], "unittest"),
        (["make", "test"], None),
    ],
)
def test_the_parser_is_picked_from_the_argv(argv: list[str], name: str | None) -> None:
    runner = registry.runner_for_argv(argv)
    assert (runner.name if runner else None) == name


def files(tree: dict[str, bytes]) -> tuple[frozenset[str], summary.ReadFile]:
    return frozenset(tree), tree.get


PYTEST_ARGV = ("python3", "-m", "pytest", "-rfE", "-p", "no:cacheprovider")
UNITTEST_ARGV = ("python3", "-m", "unittest", "discover", "-v")
PLAIN_TEST = b"import unittest\nclass T(unittest.TestCase):\n    def test_a(self): pass\n"


@pytest.mark.parametrize(
    ("tree", "argv"),
    [
        ({"pytest.ini": b"[pytest]\n", "t.py": b""}, PYTEST_ARGV),
        ({"src/conftest.py": b"", "tests/test_a.py": PLAIN_TEST}, PYTEST_ARGV),
        ({"pyproject.toml": b"[project]\n[tool.pytest.ini_options]\n"}, PYTEST_ARGV),
        ({"pyproject.toml": b"[tool.pytest]\nminversion = '9'\n"}, PYTEST_ARGV),
        ({"setup.cfg": b"[metadata]\n[tool:pytest]\naddopts = -q\n"}, PYTEST_ARGV),
        ({"tox.ini": b"[tox]\n[pytest]\n"}, PYTEST_ARGV),
        ({"tests/test_a.py": b"import os\nimport pytest\n"}, PYTEST_ARGV),
        ({"a_test.py": b"from pytest import raises\n"}, PYTEST_ARGV),
        # Not pytest: a tox.ini without [pytest], a pyproject without its table.
        ({"tox.ini": b"[tox]\n", "test_a.py": PLAIN_TEST}, UNITTEST_ARGV),
        ({"pyproject.toml": b"[tool.ruff]\n", "test_a.py": PLAIN_TEST}, UNITTEST_ARGV),
        ({"tests/__init__.py": b"", "tests/test_a.py": PLAIN_TEST}, UNITTEST_ARGV),
        # A tests/ folder that is not a package: discover from it.
        ({"tests/test_a.py": PLAIN_TEST}, (*UNITTEST_ARGV, "-s", "tests")),
        ({"app.py": b"x = 1\n", "README.md": b"pytest\n"}, None),
    ],
)
def test_detection(tree: dict[str, bytes], argv: tuple[str, ...] | None) -> None:
    found = registry.detect_runner(*files(tree))
    assert (found[1] if found else None) == argv
    if found:
        assert found[0] is (PYTEST if argv == PYTEST_ARGV else UNITTEST)


def test_the_example_project_is_detected_as_unittest() -> None:
    root = Path(__file__).parents[2] / "examples" / "failing-project"
    tree = {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}
    found = registry.detect_runner(*files(tree))
    assert found is not None and found[1] == UNITTEST_ARGV


def test_the_summary_as_a_dict() -> None:
    result = summary.summarize(
        "pytest", passed=1, failed=1, skipped=0, errors=1, failing=["a", "a", "b"], exit_code=1
    )
    assert result.failing == ("a", "b") and result.failing_count == 2
    assert result.to_dict() == {
        "runner": "pytest",
        "parsed": True,
        "passed": 1,
        "failed": 1,
        "skipped": 0,
        "errors": 1,
        "failing": ["a", "b"],
        "failing_truncated": False,
        "exit_code": 1,
        "note": "",
    }
