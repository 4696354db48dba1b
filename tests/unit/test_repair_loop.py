"""The repair loop with scripted fake models and the fake engine (no real engine)."""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from pybox._adapters.model_providers import ModelProvider
from pybox._adapters.state import StateStore
from pybox._core.errors import (
    ConfigError,
    InvalidRequest,
    LimitExceeded,
    ModelError,
    ModelRateLimited,
)
from pybox._core.limits import LimitRequest
from pybox._core.repair import (
    Prompt,
    RepairBudget,
    RepairGoal,
    RepairLimits,
    RepairModel,
    RepairPolicy,
    RepairReport,
    StopReason,
)
from pybox._features.repair.loop import RepairJob, RepairLoop
from pybox._orchestration.session import Session
from tests.fake_model import scripted
from tests.unit.conftest import make_session
from tests.unit.fake_engine import FakeEngine, Script

BROKEN = b"print('hello'\n"
BAD = "```python\nprint('still broken'\n```"
FIXED = "```python\nprint('hello')  # FIXED\n```"
FIXED_CODE = b"print('hello')  # FIXED\n"
TRACEBACK = b"  File \"main.py\", line 1\nSyntaxError: '(' was never closed\n"


def scripted_model(tmp_path: Path, replies: list[str]) -> tuple[RepairModel, Path]:
    """A model command that answers `replies` in order and keeps every prompt it got."""
    folder = tmp_path / "model"
    return RepairModel.command(scripted(folder, replies)), folder


def calls_made(folder: Path) -> int:
    counter = folder / "calls"
    return int(counter.read_text()) if counter.exists() else 0


def fixed_when_marked(payload: bytes) -> Script:
    """The fake box succeeds only for code carrying the FIXED marker."""
    if b"FIXED" in payload:
        return Script(stdout=b"hello\n")
    return Script(stderr=TRACEBACK, exit_code=1)


@pytest.fixture
def engine() -> FakeEngine:
    engine = FakeEngine()
    engine.script_for = fixed_when_marked
    return engine


def job(model: RepairModel, **budget: float) -> RepairJob:
    return RepairJob(
        code=BROKEN,
        goal=RepairGoal.exit0(),
        model=model,
        budget=RepairBudget(**budget),  # type: ignore[arg-type]
        run_limits=LimitRequest(timeout_s=0.5),
    )


def repair(
    session: Session, repair_job: RepairJob, provider: ModelProvider | None = None
) -> RepairReport:
    return RepairLoop(session, repair_job, dict(os.environ), provider=provider).run()


def test_stops_at_the_first_proposal_that_meets_the_goal(
    session: Session, engine: FakeEngine, tmp_path: Path
) -> None:
    model, folder = scripted_model(tmp_path, [BAD, FIXED, FIXED.replace("FIXED", "FIXED again")])
    report = repair(session, job(model))
    assert report.stop_reason is StopReason.GOAL_MET
    assert report.fixed_code == FIXED_CODE and report.fixed_round == 2
    assert [r.number for r in report.rounds] == [1, 2]
    assert calls_made(folder) == 2  # never asked a third time
    assert report.baseline is not None and not report.baseline.goal_met
    assert [r.run.goal_met for r in report.rounds if r.run] == [False, True]
    # The original and every proposal ran in its own box, each removed.
    assert len(engine.names("create")) == 3 and not engine.containers
    # The first prompt carries the original's evidence; the second the last proposal's.
    first = (folder / "prompt-1.txt").read_text()
    assert "print('hello'\n" in first and "was never closed" in first
    assert "print('still broken'" in (folder / "prompt-2.txt").read_text()
    data = report.to_dict()
    assert data["stop_reason"] == "goal_met" and data["used"]["model_calls"] == 2
    assert data["rounds"][1]["proposal_sha256"] == report.rounds[1].proposal_sha256


def test_an_original_that_already_meets_the_goal_asks_no_model(
    session: Session, tmp_path: Path
) -> None:
    model, folder = scripted_model(tmp_path, [FIXED])
    report = repair(session, RepairJob(code=b"# FIXED\n", goal=RepairGoal.exit0(), model=model))
    assert report.stop_reason is StopReason.GOAL_MET
    assert report.rounds == () and report.fixed_code is None
    assert calls_made(folder) == 0


def test_the_rounds_budget_stops_the_loop(session: Session, tmp_path: Path) -> None:
    model, folder = scripted_model(tmp_path, [BAD, BAD, BAD, FIXED])
    report = repair(session, job(model, rounds=2))
    assert report.stop_reason is StopReason.BUDGET_EXHAUSTED
    assert report.exhausted == "rounds"
    assert len(report.rounds) == 2 and calls_made(folder) == 2
    assert report.fixed_code is None


def test_the_time_budget_ends_a_slow_model(session: Session, tmp_path: Path) -> None:
    model, folder = scripted_model(tmp_path, [FIXED])
    (folder / "sleep-1").write_text("30")
    started = time.monotonic()
    report = repair(session, job(model, total_s=2))
    assert time.monotonic() - started < 5
    assert report.stop_reason is StopReason.BUDGET_EXHAUSTED
    assert report.exhausted == "total_s"
    assert "did not answer in time" in report.stop_detail
    # The slow command was ended, not left behind.
    with pytest.raises(ProcessLookupError):
        os.kill(int((folder / "pid-1").read_text()), 0)


def test_the_reply_bytes_budget_stops_a_long_reply(session: Session, tmp_path: Path) -> None:
    long_reply = "```python\n" + "# padding\n" * 500 + "print(1)\n```"
    model, _ = scripted_model(tmp_path, [long_reply])
    report = repair(session, job(model, reply_bytes=2000))
    assert report.stop_reason is StopReason.BUDGET_EXHAUSTED
    assert report.exhausted == "reply_bytes"
    assert "2000 bytes" in report.stop_detail


def test_invalid_proposals_are_recorded_counted_and_stop_the_loop(
    session: Session, engine: FakeEngine, tmp_path: Path
) -> None:
    model, folder = scripted_model(tmp_path, ["Add a parenthesis.", "```python\nprint(1)\n", FIXED])
    report = repair(session, job(model, invalid_proposals=2))
    assert report.stop_reason is StopReason.INVALID_PROPOSAL
    assert report.exhausted == "invalid_proposals"
    assert report.invalid_proposals == 2
    reasons = [r.invalid_reason for r in report.rounds]
    assert reasons[0] is not None and "no ```python code block" in reasons[0]
    assert reasons[1] is not None and "not closed" in reasons[1]
    assert all(r.run is None and r.proposal_sha256 is None for r in report.rounds)
    assert len(engine.names("create")) == 1  # only the original ran
    # The model is told why its reply was not used.
    assert "Your previous reply was not used" in (folder / "prompt-2.txt").read_text()
    assert report.to_dict()["used"]["invalid_proposals"] == 2


def test_an_invalid_proposal_then_a_fix(session: Session, tmp_path: Path) -> None:
    oversized = "```python\n" + "x = 1\n" * 100 + "```"
    model, _ = scripted_model(tmp_path, [oversized, FIXED])
    report = repair(session, job(model, proposal_bytes=500))
    assert report.stop_reason is StopReason.GOAL_MET
    assert report.invalid_proposals == 1
    reason = report.rounds[0].invalid_reason
    assert reason is not None and "refused" in reason and "600 bytes" in reason


def test_the_model_never_sees_more_than_the_prompt_bound(
    session: Session, engine: FakeEngine, tmp_path: Path
) -> None:
    engine.script_for = lambda payload: Script(
        stdout=b"o" * 100_000, stderr=TRACEBACK * 5000, exit_code=1
    )
    model, folder = scripted_model(tmp_path, [BAD, BAD, BAD])
    report = repair(session, job(model, prompt_bytes=4096, rounds=3))
    assert len(report.rounds) == 3
    for item in report.rounds:
        seen = (folder / f"prompt-{item.number}.txt").read_bytes()
        assert len(seen) == item.prompt_bytes <= 4096
        assert b"the middle is left out" in seen
    assert report.to_dict()["used"]["largest_prompt_bytes"] <= 4096


def test_a_program_too_large_for_the_prompt_bound_is_refused_before_anything(
    session: Session, engine: FakeEngine, tmp_path: Path
) -> None:
    model, folder = scripted_model(tmp_path, [FIXED])
    big = RepairJob(
        code=b"x = 1\n" * 1000,
        goal=RepairGoal.exit0(),
        model=model,
        budget=RepairBudget(prompt_bytes=2048),
    )
    with pytest.raises(InvalidRequest, match="the most allowed is 2048 bytes"):
        RepairLoop(session, big, dict(os.environ))
    assert calls_made(folder) == 0 and engine.calls == []


def test_bounds_above_the_operators_ceilings_are_refused(
    engine: FakeEngine, state: StateStore, tmp_path: Path
) -> None:
    ceilings = RepairLimits(3, 600.0, 10, 65536, 65536, 65536, 3)
    session = make_session(engine, state)
    session.repair_policy = RepairPolicy(defaults=ceilings, ceilings=ceilings)
    model, folder = scripted_model(tmp_path, [FIXED])
    with pytest.raises(LimitExceeded, match=r"Requested 4 repair rounds; the maximum is 3 rounds"):
        RepairLoop(session, job(model, rounds=4), dict(os.environ))
    with pytest.raises(LimitExceeded, match="the maximum is 8192 MiB"):
        RepairLoop(
            session,
            RepairJob(
                BROKEN, RepairGoal.exit0(), model, run_limits=LimitRequest(memory_bytes=1 << 40)
            ),
            dict(os.environ),
        )
    assert calls_made(folder) == 0 and engine.calls == []


def test_a_failing_model_command_is_a_model_error(session: Session, tmp_path: Path) -> None:
    model, folder = scripted_model(tmp_path, [])
    (folder / "fail-1").write_text("quota exceeded for this month\n")
    report = repair(session, job(model))
    assert report.stop_reason is StopReason.MODEL_ERROR
    assert "exit status 1: quota exceeded for this month" in report.stop_detail
    assert report.rounds[0].model_calls == 1


def test_a_missing_model_command_is_refused_before_any_box_runs(session: Session) -> None:
    model = RepairModel.command("/nonexistent/llm -m x")
    with pytest.raises(ConfigError, match="'/nonexistent/llm' was not found"):
        repair(session, job(model))
    assert not session.engine.list_containers({})  # no box was made for it


class StubProvider:
    """Answers from a list of replies or exceptions; for the loop's own rules."""

    def __init__(self, answers: list[str | Exception], on_ask: Callable[[], None] | None = None):
        self.answers = answers
        self.on_ask = on_ask
        self.prompts: list[Prompt] = []

    def ask(
        self,
        prompt: Prompt,
        *,
        timeout_s: float,
        max_reply_bytes: int,
        cancel: threading.Event | None = None,
    ) -> str:
        self.prompts.append(prompt)
        if self.on_ask is not None:
            self.on_ask()
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def test_rate_limits_are_waited_out_and_counted(session: Session) -> None:
    provider = StubProvider([ModelRateLimited("slow down", retry_after_s=0.05), FIXED])
    model = RepairModel.openai("m")
    report = repair(session, job(model), provider=provider)
    assert report.stop_reason is StopReason.GOAL_MET
    assert report.rounds[0].model_calls == 2
    assert report.rounds[0].rate_limit_waits_s == (0.05,)


def test_the_model_calls_budget_stops_retries(session: Session) -> None:
    provider = StubProvider([ModelRateLimited("slow down", retry_after_s=0.01)] * 5)
    report = repair(session, job(RepairModel.openai("m"), model_calls=3), provider=provider)
    assert report.stop_reason is StopReason.BUDGET_EXHAUSTED
    assert report.exhausted == "model_calls"
    assert report.rounds[0].model_calls == 3 and len(provider.prompts) == 3


def test_a_rate_limit_longer_than_the_time_left_stops_the_loop(session: Session) -> None:
    provider = StubProvider([ModelRateLimited("slow down", retry_after_s=3600)])
    started = time.monotonic()
    report = repair(session, job(RepairModel.openai("m")), provider=provider)
    assert time.monotonic() - started < 5
    assert report.stop_reason is StopReason.BUDGET_EXHAUSTED and report.exhausted == "total_s"


def test_other_model_errors_stop_the_loop(session: Session) -> None:
    provider = StubProvider([ModelError("HTTP 500: overloaded")])
    report = repair(session, job(RepairModel.openai("m")), provider=provider)
    assert report.stop_reason is StopReason.MODEL_ERROR
    assert report.stop_detail == "HTTP 500: overloaded"


def test_cancelling_stops_the_loop(session: Session) -> None:
    cancel = threading.Event()
    provider = StubProvider([BAD, FIXED], on_ask=cancel.set)
    loop = RepairLoop(session, job(RepairModel.openai("m")), {}, provider=provider)
    report = loop.run(cancel)
    assert report.stop_reason is StopReason.CANCELLED
    assert len(provider.prompts) == 1


def test_a_tests_goal_runs_the_tests_against_the_proposal(
    session: Session, engine: FakeEngine, tmp_path: Path
) -> None:
    seen: list[bytes] = []

    def runner(payload: bytes) -> Script:
        seen.append(payload)
        nonce = re.search(rb"pybox-tests ([0-9a-f]+) ran", payload)
        assert nonce is not None
        if b"FIXED" not in payload:
            return Script(stderr=b"FAIL: test_add\n", exit_code=1)
        return Script(stdout=b"pybox-tests " + nonce.group(1) + b" ran=2 failures=0 errors=0\n")

    engine.script_for = runner
    model, _ = scripted_model(tmp_path, [FIXED])
    goal = RepairGoal.tests("import calc\n", tests_name="test_calc.py", module_name="calc")
    report = repair(
        session, RepairJob(code=b"def add(a, b): return a - b\n", goal=goal, model=model)
    )
    assert report.stop_reason is StopReason.GOAL_MET
    assert report.rounds[0].run is not None
    assert report.rounds[0].run.goal_detail == "all 2 tests passed"
    # The proposal and the tests go in as input files; the runner is the program.
    inputs = report.rounds[0].run.receipt.configured.inputs
    assert [i.name for i in inputs] == ["calc.py", "test_calc.py"]
    assert inputs[0].sha256 == report.rounds[0].proposal_sha256
    assert report.rounds[0].run.receipt.configured.code.name == "pybox_run_tests.py"


def test_ctrl_c_while_the_model_thinks_keeps_the_report(session: Session) -> None:
    def interrupt() -> None:
        raise KeyboardInterrupt

    provider = StubProvider([FIXED], on_ask=interrupt)
    report = repair(session, job(RepairModel.openai("m")), provider=provider)
    assert report.stop_reason is StopReason.CANCELLED
    assert report.model_calls == 1 and report.rounds[0].reply_sha256 is None
    assert report.baseline is not None


def test_ctrl_c_during_a_run_keeps_its_receipt(
    session: Session, engine: FakeEngine, tmp_path: Path
) -> None:
    model, _ = scripted_model(tmp_path, [BAD, FIXED])
    interrupted: list[bool] = []

    def interrupt_the_second_box() -> None:
        if len(engine.names("create")) == 2 and not interrupted:
            interrupted.append(True)
            raise KeyboardInterrupt

    engine.on_read = interrupt_the_second_box
    report = repair(session, job(model))
    assert report.stop_reason is StopReason.CANCELLED
    (only,) = report.rounds
    assert only.run is not None and only.run.receipt.status.value == "stopped"
    assert not engine.containers
