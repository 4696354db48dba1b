"""What every judge of `pybox verify` records: facts, unmet criteria, results.

What the program printed came from inside the box and is untrusted; a judge
names the source of every fact it records. The checks every case shares are
here too: the posture read back before start, and the box gone afterwards
(the only I/O of a judge: asking the engine whether a box still exists). The
judges themselves are in `limit_judges` (the caps) and `escape_judges` (the
ways out of the box).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from importlib.resources import files
from typing import Any, Literal

from pybox._core.receipt import Receipt
from pybox._engine import Engine

# -- result values -------------------------------------------------------------------


# Who established a fact. Only `program` is from inside the box, and untrusted.
Source = Literal["program", "engine", "kernel", "host", "pybox"]


@dataclass(frozen=True)
class Fact:
    """One piece of evidence and who established it."""

    source: Source
    text: str


@dataclass(frozen=True)
class CaseResult:
    name: str
    attempted: str
    criterion: str
    passed: bool
    facts: tuple[Fact, ...]
    failures: tuple[str, ...]
    run_ids: tuple[str, ...]
    duration_s: float


@dataclass(frozen=True)
class SuiteResult:
    cases: tuple[CaseResult, ...]
    left_behind: tuple[str, ...]
    duration_s: float

    @property
    def passed(self) -> bool:
        return all(case.passed for case in self.cases) and not self.left_behind


class Verdict:
    """Collects the evidence and the unmet parts of one case's criterion."""

    def __init__(self) -> None:
        self.facts: list[Fact] = []
        self.failures: list[str] = []
        self.run_ids: list[str] = []

    def saw(self, source: Source, text: str) -> None:
        self.facts.append(Fact(source, text))

    def check(self, ok: bool, failure: str) -> bool:
        if not ok:
            self.failures.append(failure)
        return ok


def case_source(name: str) -> bytes:
    """The hostile program of a case, exactly as shipped."""
    return files("pybox._features.verify").joinpath("cases", f"{name}.py").read_bytes()


def program_report(stdout: bytes, stderr: bytes, verdict: Verdict) -> dict[str, Any]:
    """The JSON object the program printed last (untrusted), or {} with a failure."""
    lines = stdout.strip().splitlines()
    try:
        value = json.loads(lines[-1]) if lines else None
    except ValueError:
        value = None
    if not isinstance(value, dict):
        tail = stderr.decode("utf-8", "replace").strip()[-300:]
        verdict.check(False, f"the program's report is missing or unreadable (stderr: {tail!r})")
        return {}
    return value


def judge_posture_read_back(receipt: Receipt, verdict: Verdict) -> None:
    engine = receipt.observed_by_engine
    if verdict.check(engine.posture_verified, "the box's posture was not verified before start"):
        verdict.saw(
            "engine",
            f"posture read back before start: {engine.posture_fields_checked} fields as asked",
        )


def judge_gone(
    verdict: Verdict,
    engine: Engine,
    container_id: str | None,
    removal_confirmed: bool,
    cgroup_exists: Callable[[str], bool],
    *,
    say: bool = True,
) -> None:
    """The box is gone: pybox confirmed it, the engine says so now, its cgroup is gone."""
    verdict.check(removal_confirmed, "pybox did not confirm the box removed")
    if container_id is None:
        return
    still_there = engine.inspect_container(container_id) is not None
    verdict.check(not still_there, f"the engine still has the box {container_id[:12]}")
    cgroup_left = cgroup_exists(container_id)
    verdict.check(not cgroup_left, f"the box's cgroup still exists ({container_id[:12]})")
    if say and not still_there and not cgroup_left and removal_confirmed:
        verdict.saw("engine", "box removed: no such container; its cgroup is gone")
