"""The bounded repair loop: a model proposes code; every proposal runs in a fresh box.

Before anything runs, every bound is resolved against the operator's ceilings
and the first prompt is checked to fit. Then: the original program runs once
(its evidence feeds the first prompt), and each round asks the model for one
complete program, runs it with `Session.run` like any other code, and checks
the goal. The model's only power is the text it sends back.

The calls to the model are in `model_calls`, the loop's two stops in
`stops`, and where a fixed program goes in `fixed_files`.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from pybox._adapters.model_providers import ModelProvider, open_provider
from pybox._boxes.record import RunInterrupted, RunOutcome
from pybox._core.display import plural
from pybox._core.errors import InvalidRequest, RequestRejected
from pybox._core.limits import LimitRequest
from pybox._core.repair import (
    TESTS_RUNNER_NAME,
    GoalKind,
    InvalidProposal,
    RepairBudget,
    RepairGoal,
    RepairLimits,
    RepairModel,
    RepairReport,
    RepairRound,
    RepairRun,
    RunEvidence,
    StopReason,
    build_prompt,
    extract_proposal,
    runner_for_tests,
    sha256_hex,
)
from pybox._core.request import CODE_NAME_RE, InputFile, RunRequest
from pybox._features.repair.model_calls import ModelCalls
from pybox._features.repair.stops import Stop, StopWithRun
from pybox._orchestration.session import Session

Progress = Callable[[str], None]


@dataclass(frozen=True)
class RepairJob:
    """What to repair and how: the caller's whole request, checked by `RepairLoop`."""

    code: bytes
    goal: RepairGoal
    model: RepairModel
    code_name: str = "main.py"
    budget: RepairBudget = field(default_factory=RepairBudget)
    run_limits: LimitRequest = field(default_factory=LimitRequest)
    image: str = "stdlib"


class RepairLoop(ModelCalls):
    """One repair, checked on construction (nothing runs), run once with `run()`."""

    def __init__(
        self,
        session: Session,
        job: RepairJob,
        environ: Mapping[str, str],
        *,
        provider: ModelProvider | None = None,
    ) -> None:
        if not isinstance(job.code, bytes):
            raise InvalidRequest(f"The code must be bytes, not {type(job.code).__name__}.")
        self.session = session
        self.job = job
        self.limits: RepairLimits = session.repair_policy.resolve(job.budget)
        self.run_limits = session.resolve(self._request(job.code, "0" * 16))
        if self.run_limits.timeout_s > self.limits.total_s:
            raise InvalidRequest(
                f"Each run may take {self.run_limits.timeout_s:g} s but the whole repair only "
                f"{self.limits.total_s:g} s. Lower the run timeout (--timeout, timeout_s) or raise "
                "the total time (--max-seconds, total_s)."
            )
        first = build_prompt(
            job.goal, job.code, job.code_name, None, None, 1, self.limits.rounds, 1 << 62
        )
        assert first is not None
        if first.size_bytes > self.limits.prompt_bytes:
            raise InvalidRequest(
                f"The goal and the program make a prompt of {first.size_bytes} bytes; the most "
                f"allowed is {self.limits.prompt_bytes} bytes (prompt_bytes). Raise the prompt "
                "bound (up to the operator's ceiling) or repair a smaller program."
            )
        self.provider = provider or open_provider(job.model, environ)
        self.rounds: list[RepairRound] = []
        self.model_calls = 0
        self.reply_bytes = 0
        self.invalid = 0

    # -- requests and goals ---------------------------------------------------------

    def _request(self, code: bytes, nonce: str) -> RunRequest:
        goal = self.job.goal
        if goal.kind is GoalKind.TESTS:
            assert goal.tests_code is not None and goal.tests_name is not None
            return RunRequest(
                code=runner_for_tests(goal, nonce),
                code_name=TESTS_RUNNER_NAME,
                inputs=(
                    InputFile(f"{goal.module_name}.py", code),
                    InputFile(goal.tests_name, goal.tests_code),
                ),
                limits=self.job.run_limits,
                image=self.job.image,
            )
        name = self.job.code_name if CODE_NAME_RE.fullmatch(self.job.code_name) else "main.py"
        return RunRequest(
            code=code, code_name=name, limits=self.job.run_limits, image=self.job.image
        )

    def _run(self, code: bytes, cancel: threading.Event) -> tuple[RepairRun, RunEvidence]:
        nonce = secrets.token_hex(16)
        try:
            prepared = self.session.prepare(self._request(code, nonce))
            outcome = self.session.run(prepared, cancel=cancel)
        except RunInterrupted as stop:
            outcome = stop.outcome
            cancel.set()
        run, evidence = self._judge(outcome, nonce)
        if cancel.is_set():
            raise StopWithRun(run)
        return run, evidence

    def _judge(self, outcome: RunOutcome, nonce: str) -> tuple[RepairRun, RunEvidence]:
        receipt = outcome.receipt
        program = receipt.reported_by_program
        check = self.job.goal.check(
            receipt.status, receipt.exit_code, outcome.stdout, program.stdout.truncated, nonce
        )
        evidence = RunEvidence(
            status=receipt.status.value,
            exit_code=receipt.exit_code,
            cause=receipt.cause.summary,
            goal_detail=check.detail,
            stdout=outcome.stdout,
            stderr=outcome.stderr,
            stdout_total_bytes=program.stdout.bytes_total,
            stderr_total_bytes=program.stderr.bytes_total,
        )
        return RepairRun(receipt, check.met, check.detail), evidence

    # -- the loop -------------------------------------------------------------------

    def run(
        self, cancel: threading.Event | None = None, progress: Progress | None = None
    ) -> RepairReport:
        cancel = cancel or threading.Event()
        say = progress or (lambda message: None)
        started = time.monotonic()
        self.deadline = started + self.limits.total_s
        baseline: RepairRun | None = None
        fixed: tuple[bytes, int] | None = None
        try:
            try:
                say(f"running the original {self.job.code_name} in a fresh box")
                baseline, evidence = self._run(self.job.code, cancel)
                say(f"original: {baseline.describe()}")
                if baseline.goal_met:
                    raise Stop(StopReason.GOAL_MET, "the original program already meets the goal")
                fixed = self._rounds(evidence, cancel, say)
                raise Stop(StopReason.GOAL_MET, f"the proposal of round {fixed[1]} meets the goal")
            except StopWithRun as stopped:
                if baseline is None:
                    baseline = stopped.run
                raise Stop(StopReason.CANCELLED, "the repair was cancelled") from None
            except KeyboardInterrupt:
                raise Stop(StopReason.CANCELLED, "the repair was interrupted") from None
        except Stop as stop:
            return RepairReport(
                stop_reason=stop.reason,
                stop_detail=stop.detail,
                exhausted=stop.exhausted,
                goal=self.job.goal,
                model=self.job.model,
                limits=self.limits,
                run_limits=self.run_limits.to_dict(),
                original_name=self.job.code_name,
                original_code=self.job.code,
                baseline=baseline,
                rounds=tuple(self.rounds),
                duration_s=round(time.monotonic() - started, 3),
                fixed_code=None if fixed is None else fixed[0],
                fixed_round=None if fixed is None else fixed[1],
            )
        raise AssertionError("the loop always ends with a stop")  # pragma: no cover

    def _rounds(
        self, evidence: RunEvidence, cancel: threading.Event, say: Progress
    ) -> tuple[bytes, int]:
        """Round after round until a proposal meets the goal (returned) or a stop."""
        limits = self.limits
        code = self.job.code
        note: str | None = None
        for number in range(1, limits.rounds + 1):
            round_started = time.monotonic()
            prompt = build_prompt(
                self.job.goal,
                code,
                self.job.code_name,
                evidence,
                note,
                number,
                limits.rounds,
                limits.prompt_bytes,
            )
            if prompt is None:
                raise Stop(
                    StopReason.BUDGET_EXHAUSTED,
                    f"the current program no longer fits the prompt bound of "
                    f"{limits.prompt_bytes} bytes",
                    "prompt_bytes",
                )
            say(f"round {number}: asking the model (prompt {prompt.size_bytes} bytes)")
            reply, calls, waits = self._ask(prompt, cancel, number)
            reply_data = reply.encode("utf-8", "surrogatepass")
            proposal = extract_proposal(reply, limits.proposal_bytes)
            base = {
                "number": number,
                "prompt_bytes": prompt.size_bytes,
                "model_calls": calls,
                "rate_limit_waits_s": waits,
                "reply_bytes": len(reply_data),
                "reply_sha256": sha256_hex(reply_data),
            }
            if isinstance(proposal, InvalidProposal):
                self.invalid += 1
                self.rounds.append(
                    RepairRound(
                        **base,  # type: ignore[arg-type]
                        proposal_sha256=None,
                        proposal_bytes=None,
                        invalid_reason=proposal.reason,
                        run=None,
                        duration_s=round(time.monotonic() - round_started, 3),
                    )
                )
                say(f"round {number}: invalid proposal: {proposal.reason}")
                if self.invalid >= limits.invalid_proposals:
                    raise Stop(
                        StopReason.INVALID_PROPOSAL,
                        f"{plural(self.invalid, 'invalid proposal')}, the most allowed "
                        f"(invalid_proposals); the last: {proposal.reason}",
                        "invalid_proposals",
                    )
                note = (
                    f"Your previous reply was not used: {proposal.reason}. "
                    "Send exactly one complete program in one ```python block."
                )
                continue
            note = None
            left = self._left_s()
            if left < self.run_limits.timeout_s:
                self._record(base, proposal.sha256, len(proposal.code), None, round_started)
                raise Stop(
                    StopReason.BUDGET_EXHAUSTED,
                    f"{max(left, 0):.1f} s of the {limits.total_s:g} s are left, less than one "
                    f"run may take ({self.run_limits.timeout_s:g} s); the proposal was not run",
                    "total_s",
                )
            say(f"round {number}: running proposal {proposal.sha256[:12]} in a fresh box")
            try:
                run, evidence = self._run(proposal.code, cancel)
            except RequestRejected as exc:
                # The proposal cannot run as asked (its size): the model's fault, not the caller's.
                self.invalid += 1
                self._record(
                    base, proposal.sha256, len(proposal.code), None, round_started, str(exc)
                )
                if self.invalid >= limits.invalid_proposals:
                    raise Stop(StopReason.INVALID_PROPOSAL, str(exc), "invalid_proposals") from None
                note = f"Your previous program could not be run: {exc}"
                continue
            except StopWithRun as stopped:
                self._record(base, proposal.sha256, len(proposal.code), stopped.run, round_started)
                raise
            self._record(base, proposal.sha256, len(proposal.code), run, round_started)
            say(f"round {number}: {run.describe()}")
            if run.goal_met:
                return proposal.code, number
            code = proposal.code
        raise Stop(
            StopReason.BUDGET_EXHAUSTED,
            f"all {plural(limits.rounds, 'round')} used without meeting the goal",
            "rounds",
        )

    def _record(
        self,
        base: dict[str, object],
        sha256: str,
        size: int,
        run: RepairRun | None,
        round_started: float,
        invalid_reason: str | None = None,
    ) -> None:
        self.rounds.append(
            RepairRound(
                **base,  # type: ignore[arg-type]
                proposal_sha256=sha256,
                proposal_bytes=size,
                invalid_reason=invalid_reason,
                run=run,
                duration_s=round(time.monotonic() - round_started, 3),
            )
        )
