"""A status and its cause are named only when the evidence supports them."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from pybox._core.receipt import Cause, Status
from pybox._core.status import Evidence, classify


def evidence(**changes: Any) -> Evidence:
    """A plain run: the engine saw exit code 0, nothing else happened."""
    base = Evidence(
        sandbox_error=None,
        cancelled=False,
        deadline_kill=False,
        timeout_s=10.0,
        run_duration_s=1.0,
        engine_exit_code=0,
        engine_oom_killed=False,
        kernel_oom_kills=0,
        backstop_claimed=False,
    )
    return dataclasses.replace(base, **changes)


# --- precedence -----------------------------------------------------------------


def test_sandbox_error_wins_over_everything() -> None:
    status, cause, code = classify(
        evidence(
            sandbox_error="the posture did not match",
            cancelled=True,
            deadline_kill=True,
            engine_exit_code=137,
            engine_oom_killed=True,
            kernel_oom_kills=3,
            backstop_claimed=True,
            run_duration_s=99.0,
        )
    )
    assert status is Status.SANDBOX_ERROR
    assert cause == Cause("the posture did not match", known=True)
    assert code is None


def test_deadline_kill_is_timed_out_without_an_exit_code() -> None:
    status, cause, code = classify(
        evidence(deadline_kill=True, engine_exit_code=137, timeout_s=2.5, run_duration_s=2.6)
    )
    assert status is Status.TIMED_OUT
    assert code is None
    assert cause.known
    assert "2.5 s deadline" in cause.summary
    assert any("deadline_kill" in item for item in cause.evidence)


def test_deadline_kill_wins_over_oom_evidence_and_cancel() -> None:
    status, _, code = classify(
        evidence(
            deadline_kill=True,
            cancelled=True,
            engine_oom_killed=True,
            kernel_oom_kills=1,
            engine_exit_code=137,
        )
    )
    assert status is Status.TIMED_OUT
    assert code is None


def test_cancelled_is_stopped() -> None:
    status, cause, code = classify(evidence(cancelled=True, engine_exit_code=137))
    assert status is Status.STOPPED
    assert cause.known
    assert "stopped on request" in cause.summary
    assert code is None


def test_cancelled_wins_over_a_clean_exit_and_oom() -> None:
    status, _, _ = classify(evidence(cancelled=True, engine_exit_code=0, kernel_oom_kills=2))
    assert status is Status.STOPPED


# --- success --------------------------------------------------------------------


def test_exit_zero_succeeds() -> None:
    status, cause, code = classify(evidence())
    assert status is Status.SUCCEEDED
    assert code == 0
    assert cause.known
    assert cause.evidence == ("the engine reports exit code 0",)


def test_exit_zero_succeeds_even_with_oom_evidence_which_is_noted() -> None:
    status, cause, code = classify(evidence(kernel_oom_kills=2, engine_oom_killed=True))
    assert status is Status.SUCCEEDED
    assert code == 0
    assert len(cause.evidence) == 3
    assert any("OOM-kill counter" in item and "2" in item for item in cause.evidence)
    assert any("engine reports the box was OOM-killed" in item for item in cause.evidence)


def test_exit_zero_succeeds_even_if_the_backstop_claims_it_fired() -> None:
    status, _, code = classify(evidence(backstop_claimed=True, run_duration_s=50.0))
    assert status is Status.SUCCEEDED
    assert code == 0


# --- out of memory ----------------------------------------------------------------


def test_exit_137_without_oom_evidence_is_failed_with_unknown_cause() -> None:
    status, cause, code = classify(evidence(engine_exit_code=137))
    assert status is Status.FAILED
    assert code == 137
    assert cause.known is False
    assert "SIGKILL" in cause.summary
    assert "unknown" in cause.summary
    assert cause.evidence == ("the engine reports exit code 137",)


@pytest.mark.parametrize(
    ("oom_killed", "oom_kills"), [(None, None), (False, 0), (None, 0), (False, None)]
)
def test_exit_137_with_negative_or_missing_oom_evidence_is_never_oom(
    oom_killed: bool | None, oom_kills: int | None
) -> None:
    status, cause, _ = classify(
        evidence(engine_exit_code=137, engine_oom_killed=oom_killed, kernel_oom_kills=oom_kills)
    )
    assert status is Status.FAILED
    assert not cause.known


def test_kernel_oom_kill_count_is_oom() -> None:
    status, cause, code = classify(evidence(engine_exit_code=137, kernel_oom_kills=1))
    assert status is Status.OUT_OF_MEMORY
    assert code == 137
    assert cause.known
    assert cause.evidence == ("the kernel's OOM-kill counter for the box's cgroup is 1",)


def test_engine_oom_flag_is_oom() -> None:
    status, cause, code = classify(
        evidence(engine_exit_code=137, engine_oom_killed=True, kernel_oom_kills=None)
    )
    assert status is Status.OUT_OF_MEMORY
    assert code == 137
    assert cause.evidence == ("the engine reports the box was OOM-killed",)


def test_both_oom_sources_are_listed() -> None:
    _, cause, _ = classify(evidence(engine_exit_code=1, engine_oom_killed=True, kernel_oom_kills=4))
    assert len(cause.evidence) == 2


def test_oom_evidence_with_an_ordinary_exit_code_is_still_oom() -> None:
    # A program whose child was OOM-killed may itself exit 1.
    status, _, code = classify(evidence(engine_exit_code=1, kernel_oom_kills=1))
    assert status is Status.OUT_OF_MEMORY
    assert code == 1


def test_oom_evidence_without_an_exit_code_is_oom_with_no_code() -> None:
    status, _, code = classify(evidence(engine_exit_code=None, kernel_oom_kills=1))
    assert status is Status.OUT_OF_MEMORY
    assert code is None


# --- the in-box backstop --------------------------------------------------------------


def test_backstop_counts_when_pybox_measured_past_the_deadline() -> None:
    status, cause, code = classify(
        evidence(engine_exit_code=124, backstop_claimed=True, timeout_s=5.0, run_duration_s=5.0)
    )
    assert status is Status.TIMED_OUT
    assert code is None
    assert cause.known
    assert "5 s deadline" in cause.summary
    assert any("untrusted" in item for item in cause.evidence)
    assert any("5.00 s" in item for item in cause.evidence)


def test_backstop_claim_before_the_deadline_is_not_believed() -> None:
    status, cause, code = classify(
        evidence(engine_exit_code=124, backstop_claimed=True, timeout_s=5.0, run_duration_s=4.99)
    )
    assert status is Status.FAILED
    assert code == 124
    assert cause.summary == "the program exited with code 124"


def test_backstop_claim_without_a_measured_duration_is_not_believed() -> None:
    status, _, code = classify(
        evidence(engine_exit_code=124, backstop_claimed=True, run_duration_s=None)
    )
    assert status is Status.FAILED
    assert code == 124


def test_early_backstop_claim_with_oom_evidence_is_oom() -> None:
    status, _, _ = classify(
        evidence(
            engine_exit_code=137,
            backstop_claimed=True,
            run_duration_s=1.0,
            timeout_s=10.0,
            kernel_oom_kills=1,
        )
    )
    assert status is Status.OUT_OF_MEMORY


def test_believed_backstop_wins_over_oom_evidence() -> None:
    status, _, _ = classify(
        evidence(
            engine_exit_code=137, backstop_claimed=True, run_duration_s=11.0, kernel_oom_kills=1
        )
    )
    assert status is Status.TIMED_OUT


def test_past_deadline_without_a_backstop_claim_is_not_a_timeout() -> None:
    status, _, _ = classify(evidence(engine_exit_code=124, run_duration_s=100.0))
    assert status is Status.FAILED


# --- failures and unknowns --------------------------------------------------------------


@pytest.mark.parametrize("exit_code", [1, 2, 127, 128])
def test_ordinary_non_zero_exit_is_failed_with_known_cause(exit_code: int) -> None:
    status, cause, code = classify(evidence(engine_exit_code=exit_code))
    assert status is Status.FAILED
    assert code == exit_code
    assert cause.known
    assert cause.summary == f"the program exited with code {exit_code}"
    assert cause.evidence == (f"the engine reports exit code {exit_code}",)


@pytest.mark.parametrize(
    ("exit_code", "name"), [(139, "SIGSEGV"), (134, "SIGABRT"), (143, "SIGTERM"), (129, "SIGHUP")]
)
def test_signal_exit_names_the_signal_and_the_cause_is_unknown(exit_code: int, name: str) -> None:
    status, cause, code = classify(evidence(engine_exit_code=exit_code))
    assert status is Status.FAILED
    assert code == exit_code
    assert not cause.known
    assert f"ended by {name} (exit code {exit_code})" in cause.summary


def test_exit_code_above_any_signal_number_is_described_by_number() -> None:
    status, cause, code = classify(evidence(engine_exit_code=255))
    assert status is Status.FAILED
    assert code == 255
    assert "ended by signal 127" in cause.summary
    assert not cause.known


def test_no_exit_code_at_all_is_a_sandbox_error_with_unknown_cause() -> None:
    status, cause, code = classify(evidence(engine_exit_code=None, reported_exit_code=None))
    assert status is Status.SANDBOX_ERROR
    assert code is None
    assert not cause.known
    assert "did not report" in cause.summary


# --- the box's own (untrusted) exit report ------------------------------------------------


def test_engine_exit_code_wins_over_the_box_report() -> None:
    status, cause, code = classify(evidence(engine_exit_code=3, reported_exit_code=0))
    assert status is Status.FAILED
    assert code == 3
    assert cause.evidence == ("the engine reports exit code 3",)


def test_box_report_is_used_when_the_engine_has_none_and_marked_untrusted() -> None:
    status, cause, code = classify(evidence(engine_exit_code=None, reported_exit_code=2))
    assert status is Status.FAILED
    assert code == 2
    assert cause.evidence == (
        "the box reported exit code 2 (untrusted; the engine's view is unknown)",
    )


def test_box_reported_zero_succeeds() -> None:
    status, cause, code = classify(evidence(engine_exit_code=None, reported_exit_code=0))
    assert status is Status.SUCCEEDED
    assert code == 0
    assert "untrusted" in cause.evidence[0]


def test_box_reported_signal_becomes_128_plus_signal_and_is_never_oom() -> None:
    status, cause, code = classify(evidence(engine_exit_code=None, reported_exit_code=-9))
    assert status is Status.FAILED
    assert code == 137
    assert not cause.known
    assert "SIGKILL" in cause.summary
    assert "exit code 137" in cause.evidence[0]


def test_box_reported_signal_with_kernel_oom_evidence_is_oom() -> None:
    status, _, code = classify(
        evidence(engine_exit_code=None, reported_exit_code=-9, kernel_oom_kills=1)
    )
    assert status is Status.OUT_OF_MEMORY
    assert code == 137


# --- an end after the box's exit report is not the program's (issue 12) ------------------


@pytest.mark.parametrize(
    ("engine_code", "oom", "reported", "status"),
    [
        (137, True, 5, Status.FAILED),  # out of memory while listing the returned files
        (137, True, 0, Status.SUCCEEDED),
        (137, False, 5, Status.FAILED),  # removed by pybox when the files took too long
        (124, False, 5, Status.FAILED),  # the bootstrap gave up on a frozen pybox
        (125, False, 0, Status.SUCCEEDED),
        (137, False, -15, Status.FAILED),  # its own SIGTERM, then killed
    ],
)
def test_a_box_ended_after_its_exit_report_keeps_the_programs_status(
    engine_code: int, oom: bool, reported: int, status: Status
) -> None:
    found, cause, code = classify(
        evidence(
            engine_exit_code=engine_code,
            engine_oom_killed=oom,
            kernel_oom_kills=1 if oom else 0,
            reported_exit_code=reported,
        )
    )
    own = 128 - reported if reported < 0 else reported
    assert (found, code) == (status, own)
    assert cause.evidence[0] == f"the box reported exit code {own} (untrusted)"
    assert f"the engine reports exit code {engine_code}" in cause.evidence[-1]
    assert "not the program's" in cause.evidence[-1]
    assert ("an OOM kill" in cause.evidence[-1]) is oom


def test_the_same_end_in_the_report_and_the_engine_is_judged_as_before() -> None:
    status, _, code = classify(
        evidence(engine_exit_code=137, engine_oom_killed=True, reported_exit_code=-9)
    )
    assert (status, code) == (Status.OUT_OF_MEMORY, 137)
