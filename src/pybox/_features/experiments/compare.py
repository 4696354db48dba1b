"""Comparing experiments on one project: which fix to keep, and why (pure).

Experiments are ranked by, in order: whether their tests ran and could be
read (those whose tests did not rank below those whose tests did), fewest
failing tests (failed + errors), most passed tests, exit code 0, smallest
change (lines, then files), and last, only to break a tie, the shortest
duration. The first is recommended unless the top two tie on every criterion
before duration: they are then indistinguishable and none is recommended.
Every reason is a sentence an agent can quote.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pybox._core.errors import InvalidRequest
from pybox._features.experiments.testing.summary import TestSummary

MIN_COMPARED = 2
MAX_COMPARED = 10
# How many failing test names a reason quotes before "and N more".
NAMES_QUOTED = 3


@dataclass(frozen=True)
class ExperimentOutcome:
    """What one experiment came to, as the comparison needs it."""

    experiment_id: str
    project: str
    tests: TestSummary | None  # None: no tests were run
    exit_code: int | None  # of the last command; None if it did not finish
    files_changed: int
    lines_changed: int
    duration_s: float | None
    state: str


@dataclass(frozen=True)
class RankedExperiment:
    experiment_id: str
    rank: int  # 1 is best
    score_reasons: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "experiment_id": self.experiment_id,
            "rank": self.rank,
            "score_reasons": list(self.score_reasons),
        }


@dataclass(frozen=True)
class Comparison:
    ranking: tuple[RankedExperiment, ...]
    recommended: str | None
    indistinguishable: bool
    reasons: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "ranking": [ranked.to_dict() for ranked in self.ranking],
            "recommended": self.recommended,
            "indistinguishable": self.indistinguishable,
            "reasons": list(self.reasons),
        }


@dataclass(frozen=True)
class _Criterion:
    name: str  # as a reason says it: "fewest failing tests"
    key: Callable[[ExperimentOutcome], float]
    show: Callable[[ExperimentOutcome], str]


def _lines(count: int) -> str:
    return f"{count} line{'' if count == 1 else 's'} changed"


def _files(outcome: ExperimentOutcome) -> str:
    count = outcome.files_changed
    return f"{count} file{'' if count == 1 else 's'}"


def _tested(outcome: ExperimentOutcome) -> bool:
    return outcome.tests is not None and outcome.tests.parsed


def _failing(outcome: ExperimentOutcome) -> int:
    return outcome.tests.failing_count if outcome.tests and _tested(outcome) else 0


def _passed(outcome: ExperimentOutcome) -> int:
    return outcome.tests.passed if outcome.tests and _tested(outcome) else 0


CRITERIA = (
    _Criterion(
        "tests that ran and could be read",
        lambda o: 0 if _tested(o) else 1,
        lambda o: "its tests ran" if _tested(o) else "its tests were not run or not parsed",
    ),
    _Criterion("fewest failing tests", _failing, lambda o: f"{_failing(o)} failing"),
    _Criterion("most passed tests", lambda o: -_passed(o), lambda o: f"{_passed(o)} passed"),
    _Criterion(
        "exit code 0",
        lambda o: 0 if o.exit_code == 0 else 1,
        lambda o: f"exit code {o.exit_code}" if o.exit_code is not None else "no exit code",
    ),
    _Criterion("smallest change", lambda o: o.lines_changed, lambda o: _lines(o.lines_changed)),
    _Criterion("fewest files changed", lambda o: o.files_changed, _files),
)
TIE_BREAKER = _Criterion(
    "shortest duration",
    lambda o: o.duration_s if o.duration_s is not None else math.inf,
    lambda o: f"{o.duration_s:.2f} s" if o.duration_s is not None else "no duration",
)


def compare(outcomes: Sequence[ExperimentOutcome]) -> Comparison:
    """Rank 2 to 10 experiments on one project; recommend one or say why not."""
    _check(outcomes)
    ordered = sorted(outcomes, key=_full_key)
    ranking = tuple(
        RankedExperiment(o.experiment_id, rank, _score_reasons(o))
        for rank, o in enumerate(ordered, start=1)
    )
    first, second = ordered[0], ordered[1]
    reasons = [_test_line(ordered)]
    untested = [o.experiment_id for o in ordered if not _tested(o)]
    if untested and len(untested) < len(ordered):
        reasons.append(
            f"{_names(untested)}: tests were not run or could not be parsed, so "
            f"{'it ranks' if len(untested) == 1 else 'they rank'} below the experiments "
            "whose tests were."
        )
    elif untested:
        reasons.append(
            "No experiment's tests were run and parsed: they are ranked by exit code and "
            "size of change only."
        )
    decisive = next((c for c in CRITERIA if c.key(first) != c.key(second)), None)
    if decisive is None:
        tie = ", ".join(c.name for c in CRITERIA[1:])
        reasons.append(
            f"{first.experiment_id} and {second.experiment_id} are indistinguishable: they tie "
            f"on {tie} ({_score(first)}). Next step: compare their diffs, or run more tests."
        )
        if TIE_BREAKER.key(first) != TIE_BREAKER.key(second):
            reasons.append(
                f"{first.experiment_id} is listed first only because it took less time "
                f"({TIE_BREAKER.show(first)} against {TIE_BREAKER.show(second)}), a tie-breaker "
                "that says nothing of the fix."
            )
        return Comparison(ranking, None, True, tuple(reasons))
    reasons.append(
        f"{first.experiment_id} is recommended: {decisive.name} "
        f"({decisive.show(first)} against {decisive.show(second)} for {second.experiment_id})."
    )
    return Comparison(ranking, first.experiment_id, False, tuple(reasons))


def _check(outcomes: Sequence[ExperimentOutcome]) -> None:
    ids = [o.experiment_id for o in outcomes]
    if not MIN_COMPARED <= len(ids) <= MAX_COMPARED:
        raise InvalidRequest(
            f"Comparing experiments needs {MIN_COMPARED} to {MAX_COMPARED} ids; got "
            f"{len(ids)} ({', '.join(ids) or 'none'}). Next step: pass between "
            f"{MIN_COMPARED} and {MAX_COMPARED} experiment ids."
        )
    repeated = sorted({i for i in ids if ids.count(i) > 1})
    if repeated:
        raise InvalidRequest(
            f"Each experiment may be compared once; {', '.join(repeated)} is given more than "
            "once. Next step: pass each id once."
        )
    projects: dict[str, list[str]] = {}
    for outcome in outcomes:
        projects.setdefault(outcome.project, []).append(outcome.experiment_id)
    if len(projects) > 1:
        listed = "; ".join(f"{p}: {', '.join(i)}" for p, i in projects.items())
        raise InvalidRequest(
            f"Only experiments on the same project can be compared; these are on "
            f"{len(projects)} projects ({listed}). Next step: compare the experiments of one "
            "project at a time."
        )


def _full_key(outcome: ExperimentOutcome) -> tuple[float, ...]:
    return (*(c.key(outcome) for c in CRITERIA), TIE_BREAKER.key(outcome))


def _score(outcome: ExperimentOutcome) -> str:
    return ", ".join(c.show(outcome) for c in CRITERIA[1:])


def _score_reasons(outcome: ExperimentOutcome) -> tuple[str, ...]:
    tests = outcome.tests
    if tests is None:
        first = "its tests were not run, so it ranks below experiments whose tests were"
    elif not tests.parsed:
        first = (
            f"its test output could not be parsed ({tests.note}), so it ranks below "
            "experiments whose tests were"
        )
    else:
        total = tests.passed + tests.failed + tests.errors + tests.skipped
        first = f"{tests.failing_count} failing of {total} tests ({tests.passed} passed"
        first += f", {tests.skipped} skipped)" if tests.skipped else ")"
        if tests.failing:
            first += f": {_quoted(tests)}"
    return (
        first,
        CRITERIA[3].show(outcome) + f" (state {outcome.state})",
        f"{_lines(outcome.lines_changed)} in {_files(outcome)}",
        f"duration {TIE_BREAKER.show(outcome)} (a tie-breaker only)",
    )


def _test_line(ordered: Sequence[ExperimentOutcome]) -> str:
    parts = []
    for o in ordered:
        if o.tests is None:
            parts.append(f"{o.experiment_id}: tests not run")
        elif not o.tests.parsed:
            parts.append(f"{o.experiment_id}: test output not parsed (exit code {o.exit_code})")
        elif o.tests.failing_count == 0:
            total = o.tests.passed + o.tests.failed + o.tests.errors + o.tests.skipped
            parts.append(f"{o.experiment_id}: 0 failing of {total}")
        else:
            parts.append(f"{o.experiment_id}: {o.tests.failing_count} failing ({_quoted(o.tests)})")
    return "; ".join(parts) + "."


def _quoted(tests: TestSummary) -> str:
    names = [short_test_name(name) for name in tests.failing[:NAMES_QUOTED]]
    more = tests.failing_count - len(names)
    return ", ".join(names) + (f" and {more} more" if more > 0 else "")


def short_test_name(name: str) -> str:
    """A test's own name without its file, module or class:
    tests/t.py::TestA::test_x[a.b] -> test_x[a.b]; pkg.mod.TestA.test_x (i=1) -> test_x (i=1);
    a file that failed to load (tests/t.py) keeps its path."""
    head, space, suffix = name.partition(" (")
    core, bracket, params = head.partition("[")
    if "::" in core:
        short = core.rsplit("::", 1)[-1]
    elif "/" in core or core.endswith(".py"):
        short = core  # a file that failed to load: its path is its name
    else:
        short = core.rsplit(".", 1)[-1]
    return f"{short}{bracket}{params}{space}{suffix}"


def _names(ids: Sequence[str]) -> str:
    return ", ".join(ids)
