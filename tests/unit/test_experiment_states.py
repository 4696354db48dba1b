"""The experiment state machine: the whole table pinned, cell by cell."""

from __future__ import annotations

import pytest

from pybox._core.errors import IllegalTransition, StateError
from pybox._features.experiments.states import (
    ExperimentState,
    allowed_from,
    can_run,
    check_transition,
)

S = ExperimentState
ALL = tuple(ExperimentState)
RESTING = {S.READY, S.COMPLETED, S.FAILED, S.TIMED_OUT, S.CANCELLED}

# Every allowed (from, to) pair; every other pair of the 8 x 8 is refused.
ALLOWED = {
    (S.CREATING, S.READY),
    (S.CREATING, S.FAILED),
    (S.CREATING, S.DESTROYED),
    (S.RUNNING, S.COMPLETED),
    (S.RUNNING, S.FAILED),
    (S.RUNNING, S.TIMED_OUT),
    (S.RUNNING, S.CANCELLED),
    (S.RUNNING, S.DESTROYED),
    *((rest, S.RUNNING) for rest in RESTING),
    *((rest, S.DESTROYED) for rest in RESTING),
}


def test_the_states_and_their_values() -> None:
    assert [s.value for s in ALL] == [
        "creating",
        "ready",
        "running",
        "completed",
        "failed",
        "timed_out",
        "cancelled",
        "destroyed",
    ]
    assert S("timed_out") is S.TIMED_OUT
    assert isinstance(S.READY, str) and f"{S.READY}" == "ready"  # stored as its value


@pytest.mark.parametrize("current", ALL)
@pytest.mark.parametrize("new", ALL)
def test_the_whole_table(current: ExperimentState, new: ExperimentState) -> None:
    if (current, new) in ALLOWED:
        assert check_transition(current, new) is new
        assert check_transition(current.value, new.value) is new
    else:
        with pytest.raises(IllegalTransition) as caught:
            check_transition(current, new)
        assert caught.value.current == current.value
        assert caught.value.requested == new.value
        assert caught.value.allowed == tuple(s.value for s in ALL if (current, s) in ALLOWED)
        message = str(caught.value)
        assert repr(current.value) in message and repr(new.value) in message
        assert "Next step" in message


def test_allowed_from_matches_the_table() -> None:
    for current in ALL:
        assert set(allowed_from(current)) == {new for c, new in ALLOWED if c is current}


def test_destroyed_is_final_and_says_so() -> None:
    assert allowed_from(S.DESTROYED) == ()
    with pytest.raises(IllegalTransition, match="final") as caught:
        check_transition(S.DESTROYED, S.DESTROYED)
    assert "create a new experiment" in str(caught.value)
    assert isinstance(caught.value, StateError)


def test_the_message_names_the_allowed_states() -> None:
    with pytest.raises(IllegalTransition) as caught:
        check_transition(S.RUNNING, S.READY)
    assert "completed, failed, timed_out, cancelled, destroyed" in str(caught.value)
    assert "cancel" in str(caught.value)


def test_can_run_only_in_resting_states() -> None:
    assert {s for s in ALL if can_run(s)} == RESTING
    assert can_run("completed") and not can_run("running")


def test_an_unknown_state_is_refused() -> None:
    with pytest.raises(IllegalTransition, match="not an experiment state"):
        check_transition("paused", S.READY)
    with pytest.raises(IllegalTransition, match="not an experiment state"):
        can_run("paused")
