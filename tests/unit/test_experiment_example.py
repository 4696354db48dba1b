"""examples/failing-project and its three fixes, run for real with unittest (in a
temporary copy) and read by pybox's own parser: 3 failures today, Decimal passes
all 14, round() and truncation each leave different failures."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pybox._features.experiments.compare import ExperimentOutcome, compare
from pybox._features.experiments.testing.registry import detect_runner, parse_output
from pybox._features.experiments.testing.summary import TestSummary

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "failing-project"
FIXES = REPO / "tests" / "integration" / "data" / "failing_project_fixes"
CASE = "tests.test_money.Test"

# fix: (passed, failed, the failing tests)
EXPECTED: dict[str | None, tuple[int, int, tuple[str, ...]]] = {
    None: (
        11,
        3,
        (
            CASE + "DiscountAndTax.test_tax_rounds_half_cents_up",
            CASE + "LineItems.test_subtotal_of_line_items",
            CASE + "Split.test_split_three_ways",
        ),
    ),
    "decimal": (14, 0, ()),
    "round": (13, 1, (CASE + "DiscountAndTax.test_tax_rounds_half_cents_up",)),
    "truncate": (
        12,
        2,
        (
            CASE + "DiscountAndTax.test_no_discount_changes_nothing",
            CASE + "DiscountAndTax.test_tax_rounds_half_cents_up",
        ),
    ),
}


def run_example(tmp_path: Path, fix: str | None) -> TestSummary:
    project = tmp_path / "project"
    shutil.copytree(EXAMPLE, project)
    if fix is not None:
        shutil.copyfile(FIXES / fix / "money.py", project / "money.py")
    paths = frozenset(p.relative_to(project).as_posix() for p in project.rglob("*") if p.is_file())
    found = detect_runner(paths, lambda rel: (project / rel).read_bytes())
    assert found is not None
    runner, argv = found
    assert runner.name == "unittest" and argv[0] == "python3"
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("PYTHONPATH", None)  # the example imports only its own money.py
    done = subprocess.run(
        [sys.executable, *argv[1:]],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    return parse_output(argv, done.stdout, done.stderr, done.returncode)


@pytest.mark.parametrize("fix", list(EXPECTED), ids=lambda f: f or "original")
def test_counts(tmp_path: Path, fix: str | None) -> None:
    passed, failed, failing = EXPECTED[fix]
    result = run_example(tmp_path, fix)
    assert result.parsed and result.runner == "unittest"
    assert (result.passed, result.failed, result.errors, result.skipped) == (passed, failed, 0, 0)
    assert result.failing == failing
    assert result.exit_code == (0 if failed == 0 else 1)


def test_compare_recommends_decimal(tmp_path: Path) -> None:
    outcomes = [
        ExperimentOutcome(
            experiment_id=f"exp-{fix}",
            project=str(EXAMPLE),
            tests=(summary := run_example(tmp_path / fix, fix)),
            exit_code=summary.exit_code,
            files_changed=1,
            lines_changed=20,
            duration_s=1.0,
            state="completed",
        )
        for fix in ("round", "decimal", "truncate")
    ]
    result = compare(outcomes)
    assert result.recommended == "exp-decimal"
    assert [r.experiment_id for r in result.ranking] == ["exp-decimal", "exp-round", "exp-truncate"]
    assert "exp-round: 1 failing (test_tax_rounds_half_cents_up)" in result.reasons[0]


def test_the_planted_secrets_are_there_to_be_skipped() -> None:
    assert (EXAMPLE / ".env").read_text() == "API_TOKEN=not-a-real-secret\n"
    assert "NOT A KEY" in (EXAMPLE / "id_rsa").read_text()
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    tracked = subprocess.run(
        ["git", "ls-files", "--error-unmatch", ".env", "id_rsa"],
        cwd=EXAMPLE,
        capture_output=True,
        check=False,
    )
    if tracked.returncode == 128 and b"not a git repository" in tracked.stderr:
        pytest.skip("not a git checkout")
    assert tracked.returncode == 0, tracked.stderr  # committed: CI runs on a clean checkout
