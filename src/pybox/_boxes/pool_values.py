"""The warm pool's values: what makes two runs share a kind of box, each kind's
state, and what the pool reports (`pybox._boxes.pool` is the machinery)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from pybox._boxes.box import Box
from pybox._core.images import ImageRecord
from pybox._core.limits import Limits
from pybox._core.runtimes import RUNC_CHOICE, RuntimeChoice


class Held(Protocol):
    def release(self) -> None: ...


class SlotGate(Protocol):
    """Admission as the pool sees it (it sits above the pool)."""

    def try_hold(self, what: str) -> Held | None:
        """A slot free now while no run waits, else None."""
        ...

    def wanted(self) -> bool:
        """Whether a run waits for a slot, in any process."""
        ...


@dataclass(frozen=True)
class PoolKey:
    """What makes two runs able to use the same kind of waiting box."""

    image_name: str
    image_id: str
    recipe_hash: str
    limits: Limits
    code_name: str
    image: ImageRecord = field(compare=False)
    # The lane is part of the box: a gVisor run never takes a runc box.
    runtime: RuntimeChoice = RUNC_CHOICE

    @classmethod
    def of(
        cls,
        image: ImageRecord,
        limits: Limits,
        code_name: str,
        runtime: RuntimeChoice = RUNC_CHOICE,
    ) -> PoolKey:
        return cls(image.name, image.image_id, image.recipe_hash, limits, code_name, image, runtime)


@dataclass
class ProfileState:
    """One profile's boxes and its demand (the pool's lock guards it)."""

    key: PoolKey
    last_asked: float
    waiting: list[Box] = field(default_factory=list)
    starting: int = 0
    failures: int = 0
    retry_at: float = 0.0
    last_error: str | None = None
    hold_until: float = 0.0
    in_use: int = 0
    misses: int = 0
    target: int = 0  # how many boxes to keep waiting (grows with misses)
    last_miss: float = float("-inf")
    last_resize: float = 0.0


@dataclass(frozen=True)
class PoolStats:
    profiles: int
    waiting: int
    starting: int
    taken: int
    missed: int
    started: int
    failed: int
    last_error: str | None


@dataclass(frozen=True)
class ProfileStats:
    """One profile's boxes: what it is for, how many wait, how many are starting."""

    key: PoolKey
    waiting: int
    starting: int
    in_use: int
    target: int
    misses: int
