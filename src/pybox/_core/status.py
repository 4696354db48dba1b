"""How a run's status and cause are decided from evidence (pure).

A cause is only named when evidence supports it:
- timed out: pybox's own recorded deadline kill, or the in-box backstop timer
  *and* pybox's clock agreeing that the deadline had passed;
- out of memory: the kernel's OOM-kill counter or the engine's OOM flag;
  an exit code of 137 alone is never enough;
- the program's own exit status stands once the box reported it, even when the
  box was killed afterwards (while returning files): that later end is noted.
Otherwise the cause is stated as unknown, with why.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass

from pybox._core.boxquote import BoxQuote
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
    # Where the box's own words are in `sandbox_error`, if there.
    sandbox_error_quote: BoxQuote | None = None


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


# Exit codes a box ends with that are not the program's: the bootstrap giving up on
# pybox (124) or failing (125). Above 128: the box was killed (128 + the signal).
_BOOTSTRAP_ENDINGS = (124, 125)


def _end_after_the_report(evidence: Evidence) -> tuple[int, str, str] | None:
    """The program's exit code when the box reported it and then ended otherwise.

    After its exit report a box only returns files. Killed then (out of memory
    while it lists them, or removed by pybox when they take too long) or given
    up by its bootstrap, its engine-observed exit code describes that end, not
    the program's: the program's own status stands, from the box's report
    (untrusted, as everything a box reports), and the lifecycle lists what was
    lost under `unknown`. Any other disagreement is left to the engine's code.
    """
    reported, engine = evidence.reported_exit_code, evidence.engine_exit_code
    if reported is None or engine is None or evidence.backstop_claimed:
        return None
    if reported < 0:  # a signal, as os.waitstatus gives it
        reported = 128 - reported
    ended_otherwise = engine > 128 or engine in _BOOTSTRAP_ENDINGS or evidence.engine_oom_killed
    if engine == reported or not ended_otherwise:
        return None
    oom = " and an OOM kill" if evidence.engine_oom_killed or evidence.kernel_oom_kills else ""
    return (
        reported,
        f"the box reported exit code {reported} (untrusted)",
        f"after that report the box ended otherwise: the engine reports exit code {engine}"
        f"{oom}, which is not the program's (see unknown for what was lost)",
    )


def classify(evidence: Evidence) -> tuple[Status, Cause, int | None]:
    """The status, its cause, and the exit code to report (None if none)."""
    if evidence.sandbox_error is not None:
        cause = Cause(evidence.sandbox_error, known=True, quote=evidence.sandbox_error_quote)
        return Status.SANDBOX_ERROR, cause, None
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
    later: tuple[str, ...] = ()  # how the box ended after the program, when not with it
    after = _end_after_the_report(evidence)
    if after is not None:
        code, source, ending = after
        later = (ending,)
    elif code is None and evidence.reported_exit_code is not None:
        code = evidence.reported_exit_code
        if code < 0:  # the box reports a signal as a negative number, like os.waitstatus
            code = 128 - code
        source = f"the box reported exit code {code} (untrusted; the engine's view is unknown)"
    oom_evidence: list[str] = []
    if after is None and evidence.kernel_oom_kills:
        oom_evidence.append(
            f"the kernel's OOM-kill counter for the box's cgroup is {evidence.kernel_oom_kills}"
        )
    if after is None and evidence.engine_oom_killed:
        oom_evidence.append("the engine reports the box was OOM-killed")

    if code == 0:
        notes = (source, *oom_evidence, *later)
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
                evidence=(source, *later),
            ),
            code,
        )
    return (
        Status.FAILED,
        Cause(
            f"the program exited with code {code}",
            known=True,
            evidence=(source, *later),
        ),
        code,
    )
