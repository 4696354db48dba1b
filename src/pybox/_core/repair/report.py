"""What the loop did and why it stopped: the versioned report and its summary."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from pybox._core.display import escape_text
from pybox._core.receipt import Receipt
from pybox._core.receipt_summary import format_bytes
from pybox._core.repair.bounds import RepairLimits
from pybox._core.repair.goal import RepairGoal, sha256_hex
from pybox._core.repair.model import RepairModel

REPAIR_VERSION = 1


class StopReason(StrEnum):
    GOAL_MET = "goal_met"
    BUDGET_EXHAUSTED = "budget_exhausted"
    INVALID_PROPOSAL = "invalid_proposal"
    MODEL_ERROR = "model_error"
    CANCELLED = "cancelled"


@dataclass(frozen=True)
class RepairRun:
    """One run of a program in a box and what it meant for the goal."""

    receipt: Receipt
    goal_met: bool
    goal_detail: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "goal_met": self.goal_met,
            "goal_detail": self.goal_detail,
            "receipt": self.receipt.to_dict(),
        }

    def describe(self) -> str:
        receipt = self.receipt
        exit_text = "" if receipt.exit_code is None else f", exit {receipt.exit_code}"
        verdict = "goal met" if self.goal_met else f"goal not met: {self.goal_detail}"
        return f"{receipt.status.value}{exit_text} (run {receipt.run_id}); {verdict}"


@dataclass(frozen=True)
class RepairRound:
    number: int
    prompt_bytes: int
    model_calls: int
    rate_limit_waits_s: tuple[float, ...]
    reply_bytes: int
    reply_sha256: str | None
    proposal_sha256: str | None
    proposal_bytes: int | None
    invalid_reason: str | None
    run: RepairRun | None
    duration_s: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "round": self.number,
            "prompt_bytes": self.prompt_bytes,
            "model_calls": self.model_calls,
            "rate_limit_waits_s": list(self.rate_limit_waits_s),
            "reply_bytes": self.reply_bytes,
            "reply_sha256": self.reply_sha256,
            "proposal_sha256": self.proposal_sha256,
            "proposal_bytes": self.proposal_bytes,
            "invalid_reason": self.invalid_reason,
            "run": None if self.run is None else self.run.to_dict(),
            "duration_s": self.duration_s,
        }


@dataclass(frozen=True)
class RepairReport:
    """Everything the loop did and why it stopped. `to_dict()` is the versioned JSON."""

    stop_reason: StopReason
    stop_detail: str
    exhausted: str | None
    goal: RepairGoal
    model: RepairModel
    limits: RepairLimits
    run_limits: dict[str, float | int]
    original_name: str
    original_code: bytes
    baseline: RepairRun | None
    rounds: tuple[RepairRound, ...]
    duration_s: float
    fixed_code: bytes | None = None
    fixed_round: int | None = None
    written_to: str | None = None
    applied: bool = False
    pybox_repair_version: int = field(default=REPAIR_VERSION)

    @property
    def goal_met(self) -> bool:
        return self.stop_reason is StopReason.GOAL_MET

    @property
    def model_calls(self) -> int:
        return sum(r.model_calls for r in self.rounds)

    @property
    def reply_bytes(self) -> int:
        return sum(r.reply_bytes for r in self.rounds)

    @property
    def invalid_proposals(self) -> int:
        return sum(1 for r in self.rounds if r.invalid_reason is not None)

    def to_dict(self) -> dict[str, Any]:
        fixed = None
        if self.fixed_code is not None:
            fixed = {
                "round": self.fixed_round,
                "size_bytes": len(self.fixed_code),
                "sha256": sha256_hex(self.fixed_code),
            }
        return {
            "pybox_repair_version": self.pybox_repair_version,
            "stop_reason": self.stop_reason.value,
            "stop_detail": self.stop_detail,
            "exhausted": self.exhausted,
            "goal": self.goal.to_dict(),
            "model": self.model.to_dict(),
            "limits": self.limits.to_dict(),
            "run_limits": dict(self.run_limits),
            "original": {
                "name": self.original_name,
                "size_bytes": len(self.original_code),
                "sha256": sha256_hex(self.original_code),
            },
            "baseline": None if self.baseline is None else self.baseline.to_dict(),
            "rounds": [r.to_dict() for r in self.rounds],
            "used": {
                "rounds": len(self.rounds),
                "model_calls": self.model_calls,
                "reply_bytes": self.reply_bytes,
                "invalid_proposals": self.invalid_proposals,
                "largest_prompt_bytes": max((r.prompt_bytes for r in self.rounds), default=0),
                "duration_s": self.duration_s,
            },
            "fixed": fixed,
            "written_to": self.written_to,
            "applied": self.applied,
        }

    def summary_lines(self) -> list[str]:
        return summarize(self)


def summarize(report: RepairReport) -> list[str]:
    rounds = len(report.rounds)
    lines = [
        f"pybox repair: {report.stop_reason.value} after {rounds} "
        f"round{'' if rounds == 1 else 's'} ({report.model_calls} model "
        f"call{'' if report.model_calls == 1 else 's'}, {report.duration_s:.1f} s)",
        f"  why:      {report.stop_detail}",
        f"  goal:     {report.goal.describe()}",
        f"  model:    {report.model.describe()}",
    ]
    if report.baseline is not None:
        lines.append(f"  original: {report.original_name}: {report.baseline.describe()}")
    for item in report.rounds:
        head = f"  round {item.number}: prompt {format_bytes(item.prompt_bytes)}"
        if item.invalid_reason is not None:
            lines.append(f"{head}; invalid proposal: {item.invalid_reason}")
        elif item.proposal_sha256 is None:
            lines.append(f"{head}; no proposal")
        else:
            run = "not run" if item.run is None else item.run.describe()
            lines.append(
                f"{head}; proposal {item.proposal_sha256[:12]} "
                f"({format_bytes(item.proposal_bytes)}): {run}"
            )
    if report.fixed_code is not None:
        digest = sha256_hex(report.fixed_code)[:12]
        if report.applied:
            lines.append(f"  fixed:    {digest}, applied to the original file")
        elif report.written_to is not None:
            lines.append(f"  fixed:    {digest}, written to {report.written_to}")
        else:
            lines.append(f"  fixed:    {digest} (round {report.fixed_round})")
    # Stop details and invalid-proposal reasons may quote a model, a provider or a
    # program: nothing in them may act on a terminal.
    return [escape_text(line) for line in lines]
