"""The operator's settings for sandboxes (`[sandboxes]` in the config file; pure).

A client cannot change them. Each sandbox's box ends itself after `idle_ttl_s`
without an operation or `max_lifetime_s` after its creation, and the sweep
removes it; at most `max_sandboxes` are live per state directory.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from pybox._core.errors import ConfigError

# key: (unit, lowest, highest, whole number). The box's own idle wait is capped
# below a week (the bootstrap's payload wait).
SANDBOX_KEYS: dict[str, tuple[str, float, float, bool]] = {
    "idle_ttl_s": ("seconds", 10, 6 * 86400, False),
    "max_lifetime_s": ("seconds", 60, 30 * 86400, False),
    "max_sandboxes": ("sandboxes", 1, 1000, True),
}


@dataclass(frozen=True)
class SandboxSettings:
    idle_ttl_s: float = 1800.0  # destroyed after this long without an operation
    max_lifetime_s: float = 8 * 3600.0  # destroyed this long after its creation
    max_sandboxes: int = 8  # live sandboxes per state directory
    lock_wait_s: float = 120.0  # how long an operation waits for another to finish
    sweep_grace_s: float = 120.0  # an unrecorded sandbox box older than this is removed

    def to_dict(self) -> dict[str, float | int]:
        return {key: getattr(self, key) for key in SANDBOX_KEYS}

    def with_settings(self, values: Mapping[str, object], source: str) -> SandboxSettings:
        """Apply `[sandboxes]` settings; a bad value is a clear config error."""
        changes: dict[str, float | int] = {}
        for key, raw in values.items():
            if key not in SANDBOX_KEYS:
                raise ConfigError(
                    f"{source}: unknown sandboxes setting {key!r}. Known: "
                    f"{', '.join(SANDBOX_KEYS)}."
                )
            unit, low, high, whole = SANDBOX_KEYS[key]
            number = (
                float(raw) if isinstance(raw, int | float) and not isinstance(raw, bool) else None
            )
            if number is None or not low <= number <= high or (whole and number != int(number)):
                kind = "a whole number" if whole else "a number"
                raise ConfigError(
                    f"{source}: sandboxes {key} must be {kind} of {unit} from {low:g} to "
                    f"{high:g}, not {raw!r}."
                )
            changes[key] = int(number) if whole else number
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]
