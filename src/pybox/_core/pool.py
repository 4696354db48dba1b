"""The warm pool's operator settings (a value; the pool itself is orchestration)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pybox._core.errors import ConfigError
from pybox._core.limits import MIB

# setting key -> (attribute, unit in messages, smallest allowed, largest allowed)
POOL_KEYS: dict[str, tuple[str, str, float, float]] = {
    "boxes_per_profile": ("boxes_per_profile", "boxes", 0, 16),
    "max_boxes_per_profile": ("max_boxes_per_profile", "boxes", 0, 64),
    "idle_s": ("idle_s", "seconds", 1, 86400),
    "memory_budget_mib": ("memory_budget_bytes", "MiB", 0, 1 << 20),
    "concurrent_starts": ("concurrent_starts", "boxes", 1, 16),
}
_WHOLE = ("boxes_per_profile", "max_boxes_per_profile", "concurrent_starts")


@dataclass(frozen=True)
class PoolSettings:
    """How many single-use boxes wait per profile, for how long, within what memory.

    Each profile keeps `boxes_per_profile` waiting, and more while runs find
    none ready, up to `max_boxes_per_profile` (never below `boxes_per_profile`).
    `memory_budget_bytes` bounds the sum of the waiting boxes' memory limits.
    `concurrent_starts` boxes are started at once: a start is mostly waiting on
    the engine, so starts overlap well (docs/performance.md, "Starts at once").
    """

    boxes_per_profile: int = 2
    idle_s: float = 300.0
    memory_budget_bytes: int = 2048 * MIB
    max_boxes_per_profile: int = 8
    concurrent_starts: int = 4

    def with_settings(self, values: Mapping[str, object], source: str) -> PoolSettings:
        """Apply `[pool]` settings (user units); a bad value is a clear config error."""
        changes: dict[str, float | int] = {}
        for key, raw in values.items():
            if key not in POOL_KEYS:
                raise ConfigError(
                    f"{source}: unknown pool setting {key!r}. Known: {', '.join(POOL_KEYS)}."
                )
            attr, unit, low, high = POOL_KEYS[key]
            try:
                number = float(str(raw)) if not isinstance(raw, bool) else float("nan")
            except ValueError:
                number = float("nan")
            if not low <= number <= high:
                raise ConfigError(
                    f"{source}: pool {key} must be a number of {unit} from {low:g} to "
                    f"{high:g}, not {raw!r}."
                )
            if key == "memory_budget_mib":
                changes[attr] = int(number * MIB)
            elif key in _WHOLE:
                if number != int(number):
                    raise ConfigError(f"{source}: pool {key} must be a whole number, not {raw!r}.")
                changes[attr] = int(number)
            else:
                changes[attr] = number
        return PoolSettings(**{**self.__dict__, **changes})
