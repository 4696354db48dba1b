"""compare(): the ranking rules, the recommendation, and the refusals."""

from __future__ import annotations

import pytest

from pybox._core.errors import InvalidRequest
from pybox._features.experiments.compare import (
    ExperimentOutcome,
    compare,
    short_test_name,
)
from pybox._features.experiments.testing.summary import TestSummary, summarize, unparsed

MONEY = "tests.test_money.TestDiscountAndTax."


def summary_of(passed: int, failing: tuple[str, ...] = (), errors: int = 0) -> TestSummary:
    return summarize(
        "unittest",
        passed=passed,
        failed=len(failing) - errors,
        skipped=0,
        errors=errors,
        failing=failing,
        exit_code=1 if failing else 0,
    )


def outcome(
    name: str,
    summary: TestSummary | None,
    *,
    exit_code: int | None = 0,
    lines: int = 10,
    files: int = 1,
    duration_s: float | None = 2.0,
    project: str = "/projects/till",
) -> ExperimentOutcome:
    return ExperimentOutcome(
        experiment_id=name,
        project=project,
        tests=summary,
        exit_code=exit_code,
        files_changed=files,
        lines_changed=lines,
        duration_s=duration_s,
        state="completed",
    )


def order(result: object) -> list[str]:
    assert hasattr(result, "ranking")
    return [r.experiment_id for r in result.ranking]


def test_the_money_fixes() -> None:
    result = compare(
        [
            outcome(
                "exp-round", summary_of(13, (MONEY + "test_tax_rounds_half_cents_up",)), lines=8
            ),
            outcome("exp-decimal", summary_of(14), lines=40),
            outcome(
                "exp-truncate",
                summary_of(
                    12,
                    (
                        MONEY + "test_no_discount_changes_nothing",
                        MONEY + "test_tax_rounds_half_cents_up",
                    ),
                ),
                lines=8,
            ),
        ]
    )
    assert order(result) == ["exp-decimal", "exp-round", "exp-truncate"]
    assert [r.rank for r in result.ranking] == [1, 2, 3]
    assert result.recommended == "exp-decimal" and not result.indistinguishable
    assert result.reasons[0] == (
        "exp-decimal: 0 failing of 14; exp-round: 1 failing (test_tax_rounds_half_cents_up); "
        "exp-truncate: 2 failing (test_no_discount_changes_nothing, "
        "test_tax_rounds_half_cents_up)."
    )
    assert result.reasons[-1] == (
        "exp-decimal is recommended: fewest failing tests "
        "(0 failing against 1 failing for exp-round)."
    )
    assert result.ranking[0].score_reasons[0] == "0 failing of 14 tests (14 passed)"
    as_dict = result.to_dict()
    assert as_dict["recommended"] == "exp-decimal"
    assert as_dict["ranking"][1]["experiment_id"] == "exp-round"


def test_errors_count_as_failing() -> None:
    result = compare(
        [
            outcome("a", summary_of(10, ("t1", "t2"), errors=2)),
            outcome("b", summary_of(10, ("t3",))),
        ]
    )
    assert order(result) == ["b", "a"]


def test_untested_experiments_rank_below_tested_ones_and_say_so() -> None:
    result = compare(
        [
            outcome("none", None, lines=1),
            outcome("garbled", unparsed("unknown", 0), lines=1),
            outcome("red", summary_of(3, ("t1", "t2", "t3", "t4")), exit_code=1, lines=500),
        ]
    )
    assert order(result)[0] == "red"
    assert "none, garbled" in result.reasons[1] or "garbled, none" in result.reasons[1]
    assert "below the experiments whose tests were" in result.reasons[1]
    assert "4 failing (t1, t2, t3 and 1 more)" in result.reasons[0]
    untested = {r.experiment_id: r for r in result.ranking}
    assert "not run" in untested["none"].score_reasons[0]
    assert "could not be parsed" in untested["garbled"].score_reasons[0]


def test_no_tests_anywhere_ranks_by_exit_code_then_change() -> None:
    result = compare([outcome("a", None, exit_code=1), outcome("b", None, exit_code=0)])
    assert order(result) == ["b", "a"] and result.recommended == "b"
    assert "No experiment's tests were run and parsed" in result.reasons[1]
    assert "exit code 0" in result.reasons[-1]


@pytest.mark.parametrize(
    ("a", "b", "winner", "words"),
    [
        ({"passed": 14}, {"passed": 12}, "a", "most passed tests"),
        ({"exit_code": 0}, {"exit_code": None}, "a", "exit code 0"),
        ({"lines": 4}, {"lines": 40}, "a", "smallest change (4 lines changed against 40"),
        ({"files": 1}, {"files": 3}, "a", "fewest files changed (1 file against 3 files"),
    ],
)
def test_each_criterion_decides_in_turn(
    a: dict[str, int | None], b: dict[str, int | None], winner: str, words: str
) -> None:
    def build(name: str, spec: dict[str, int | None]) -> ExperimentOutcome:
        passed = spec.get("passed", 14)
        return outcome(
            name,
            summary_of(passed if passed is not None else 14),
            exit_code=spec.get("exit_code", 0),
            lines=spec.get("lines") or 10,
            files=spec.get("files") or 1,
            duration_s=1.0 if name == "b" else 9.0,  # duration never outweighs the rest
        )

    result = compare([build("b", b), build("a", a)])
    assert result.recommended == winner
    assert words in result.reasons[-1]


def test_a_tie_before_duration_is_indistinguishable() -> None:
    result = compare(
        [
            outcome("slow", summary_of(14), duration_s=5.0),
            outcome("fast", summary_of(14), duration_s=1.5),
        ]
    )
    assert result.indistinguishable and result.recommended is None
    assert order(result) == ["fast", "slow"]
    assert "fast and slow are indistinguishable" in result.reasons[1]
    assert "only because it took less time (1.50 s against 5.00 s)" in result.reasons[2]
    assert "tie-breaker" in result.ranking[0].score_reasons[-1]


def test_a_tie_below_the_top_two_does_not_matter() -> None:
    result = compare(
        [
            outcome("a", summary_of(14)),
            outcome("b", summary_of(13, ("t",))),
            outcome("c", summary_of(13, ("t",))),
        ]
    )
    assert result.recommended == "a" and not result.indistinguishable


@pytest.mark.parametrize("count", [0, 1, 11])
def test_refuses_too_few_or_too_many(count: int) -> None:
    with pytest.raises(InvalidRequest, match=f"2 to 10 ids; got {count}"):
        compare([outcome(f"e{i}", None) for i in range(count)])


def test_refuses_duplicates() -> None:
    with pytest.raises(InvalidRequest, match="e1 is given more than once"):
        compare([outcome("e1", None), outcome("e1", None), outcome("e2", None)])


def test_refuses_different_projects() -> None:
    with pytest.raises(InvalidRequest, match="same project") as caught:
        compare([outcome("a", None, project="/p/one"), outcome("b", None, project="/p/two")])
    assert "/p/one: a; /p/two: b" in str(caught.value)


@pytest.mark.parametrize(
    ("name", "short"),
    [
        ("tests.test_money.TestSplit.test_split_three_ways", "test_split_three_ways"),
        ("tests/test_m.py::TestK::test_x[1.5 - a]", "test_x[1.5 - a]"),
        ("tests.test_sub.TestSub.test_evens (i=1)", "test_evens (i=1)"),
        ("tests/test_c.py", "tests/test_c.py"),
        ("tests.test_i", "test_i"),
    ],
)
def test_short_test_names(name: str, short: str) -> None:
    assert short_test_name(name) == short
