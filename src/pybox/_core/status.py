"""How a run's status and cause are decided from evidence (pure).

A cause is only named when evidence supports it:
- timed out: pybox's own recorded deadline kill, or the in-box backstop timer
  *and* pybox's clock agreeing that the deadline had passed;
- out of memory: the kernel's OOM-kill counter or the engine's OOM flag;
  an exit code of 137 alone is never enough.
Otherwise the cause is stated as unknown, with why.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass

from pybox._core.receipt import Cause, Status


@dataclass(frozen=True)
class Evidence:
    sandbox_error: str | None
    cancelled: bool
    deadline_kill: bool
    timeout_s: float
    run_duration_s: float | None
    engine_exit_code: int | None
    engine_oom_killed: bool | None
    kernel_oom_kills: int | None
    backstop_claimed: bool | None
    reported_exit_code: int | None = None
    # A box kept for its next program (protocol 2): a deadline ends the program only.
    box_kept: bool = False


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def classify(evidence: Evidence) -> tuple[Status, Cause, int | None]:
    """The status, its cause, and the exit code to report (None if none)."""
    if evidence.sandbox_error is not None:
        return Status.SANDBOX_ERROR, Cause(evidence.sandbox_error, known=True), None
    if evidence.deadline_kill:
        ended = "the program (the box stays up)" if evidence.box_kept else "the box"
        return (
            Status.TIMED_OUT,
            Cause(
                f"pybox ended {ended} at its {evidence.timeout_s:g} s deadline",
                known=True,
                evidence=(
                    "pybox recorded its own kill at the deadline (observed_by_pybox.deadline_kill)",
                ),
            ),
            None,
        )
    if evidence.cancelled:
        return (
            Status.STOPPED,
            Cause(
                "the run was stopped on request", known=True, evidence=("pybox recorded the stop",)
            ),
            None,
        )

    code = evidence.engine_exit_code
    source = f"the engine reports exit code {code}"
    if code is None and evidence.reported_exit_code is not None:
        code = evidence.reported_exit_code
        if code < 0:  # the box reports a signal as a negative number, like os.waitstatus
            code = 128 - code
        source = f"the box reported exit code {code} (untrusted; the engine's view is unknown)"
    oom_evidence: list[str] = []
    if evidence.kernel_oom_kills:
        oom_evidence.append(
            f"the kernel's OOM-kill counter for the box's cgroup is {evidence.kernel_oom_kills}"
        )
    if evidence.engine_oom_killed:
        oom_evidence.append("the engine reports the box was OOM-killed")

    if code == 0:
        notes = (source, *oom_evidence)
        return Status.SUCCEEDED, Cause("the program exited with code 0", True, notes), 0

    if evidence.backstop_claimed:
        duration = evidence.run_duration_s
        if duration is not None and duration >= evidence.timeout_s:
            return (
                Status.TIMED_OUT,
                Cause(
                    "the in-box backstop timer ended the program after the "
                    f"{evidence.timeout_s:g} s deadline",
                    known=True,
                    evidence=(
                        "the box reported its backstop fired (untrusted)",
                        f"pybox measured {duration:.2f} s, past the deadline",
                    ),
                ),
                None,
            )

    if oom_evidence:
        return (
            Status.OUT_OF_MEMORY,
            Cause("the program ran out of memory", known=True, evidence=tuple(oom_evidence)),
            code,
        )

    if code is None:
        return (
            Status.SANDBOX_ERROR,
            Cause("the engine did not report how the box ended", known=False),
            None,
        )
    if code > 128:
        name = _signal_name(code - 128)
        return (
            Status.FAILED,
            Cause(
                f"the program ended by {name} (exit code {code}); no kernel or engine evidence "
                "of running out of memory and no deadline kill, so the cause is unknown",
                known=False,
                evidence=(source,),
            ),
            code,
        )
    return (
        Status.FAILED,
        Cause(
            f"the program exited with code {code}",
            known=True,
            evidence=(source,),
        ),
        code,
    )
