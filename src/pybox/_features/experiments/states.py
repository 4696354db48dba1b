"""The experiment state machine (pure).

An experiment is `creating` until its box is ready, then `ready`. Each command
moves it to `running` and then to the state that describes how that command
ended: `completed`, `failed`, `timed_out` or `cancelled`. Those four, like
`ready`, are resting states: the next command may start from any of them.
Any state but `destroyed` may go to `destroyed` (recorded only once the engine
confirmed the box gone); `destroyed` is final. An illegal transition is an
error, never a silently corrupted record.
"""

from __future__ import annotations

from enum import StrEnum
from types import MappingProxyType

from pybox._core.errors import IllegalTransition


class ExperimentState(StrEnum):
    CREATING = "creating"
    READY = "ready"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    CANCELLED = "cancelled"
    DESTROYED = "destroyed"


S = ExperimentState
# The states from which a command may start: the box exists and nothing runs in it.
RESTING: frozenset[ExperimentState] = frozenset(
    {S.READY, S.COMPLETED, S.FAILED, S.TIMED_OUT, S.CANCELLED}
)
# How a command may end.
COMMAND_ENDS: frozenset[ExperimentState] = frozenset(
    {S.COMPLETED, S.FAILED, S.TIMED_OUT, S.CANCELLED}
)

TRANSITIONS: MappingProxyType[ExperimentState, frozenset[ExperimentState]] = MappingProxyType(
    {
        S.CREATING: frozenset({S.READY, S.FAILED, S.DESTROYED}),
        S.RUNNING: COMMAND_ENDS | {S.DESTROYED},
        S.DESTROYED: frozenset(),
        **{state: frozenset({S.RUNNING, S.DESTROYED}) for state in RESTING},
    }
)


def allowed_from(current: ExperimentState | str) -> tuple[ExperimentState, ...]:
    """The states `current` may move to, in declaration order."""
    state = _state(current)
    return tuple(s for s in ExperimentState if s in TRANSITIONS[state])


def check_transition(current: ExperimentState | str, new: ExperimentState | str) -> ExperimentState:
    """`new` as an `ExperimentState` when `current -> new` is allowed; else
    `IllegalTransition` naming both states and the allowed ones."""
    state, target = _state(current), _state(new)
    if target in TRANSITIONS[state]:
        return target
    allowed = allowed_from(state)
    names = ", ".join(s.value for s in allowed) or "none: it is final"
    step = (
        "create a new experiment"
        if state is S.DESTROYED
        else "wait for the running command to end, or cancel it"
        if state is S.RUNNING
        else "wait until the experiment is ready"
        if state is S.CREATING
        else "re-read the experiment's state and retry"
    )
    raise IllegalTransition(
        f"An experiment cannot go from {state.value!r} to {target.value!r}; from "
        f"{state.value!r} it may go to: {names}. Next step: {step}.",
        current=state.value,
        requested=target.value,
        allowed=tuple(s.value for s in allowed),
    )


def can_run(state: ExperimentState | str) -> bool:
    """Whether a command may start in an experiment in `state`."""
    return _state(state) in RESTING


def _state(value: ExperimentState | str) -> ExperimentState:
    if isinstance(value, ExperimentState):
        return value
    try:
        return ExperimentState(value)
    except ValueError:
        known = ", ".join(s.value for s in ExperimentState)
        raise IllegalTransition(
            f"{value!r} is not an experiment state (known: {known}). Next step: use one "
            "of the known states; a stored record with another value is damaged.",
            current=str(value),
            requested=str(value),
            allowed=(),
        ) from None
