"""Admission control's operator settings and their defaults (values; the slots
themselves are orchestration: pybox._orchestration.admission).

At most `max_running` boxes exist at once for one state directory, across every
pybox process of its user; up to `max_waiting` more runs wait, each at most
`wait_s`, for one of them; anything beyond is refused as busy.

The default for `max_running` keeps the boxes' memory limits, at the operator's
default memory, within the machine's memory, and at most 4 boxes per CPU
(a box's start and removal take CPU of their own, so more boxes than that only
queue inside the engine), and at most 64: floor(memory / default memory),
4 x CPUs and 64, whichever is smallest, and at least 1.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pybox._core.errors import ConfigError

AUTO_MAX_RUNNING = 64  # the default never goes above this, however big the machine
RUNNING_PER_CPU = 4
DEFAULT_MAX_WAITING = 32  # a waiting run costs a thread and a lock file, not a box
DEFAULT_WAIT_S = 60.0

# setting key -> (unit in messages, smallest allowed, largest allowed, whole number)
ADMISSION_KEYS: dict[str, tuple[str, float, float, bool]] = {
    "max_running_boxes": ("boxes", 1, 1024, True),
    "max_waiting_runs": ("runs", 0, 4096, True),
    "admission_wait_s": ("seconds", 0, 86400, False),
}


@dataclass(frozen=True)
class AdmissionSettings:
    """The numbers admission works with: boxes at once, runs waiting, seconds a run waits."""

    max_running: int
    max_waiting: int
    wait_s: float


def default_max_running(
    machine_memory_bytes: int | None, cpus: int | None, default_memory_bytes: int
) -> int:
    """floor(memory / default memory), 4 x CPUs, 64: the smallest, at least 1.
    A fact the machine does not tell leaves its bound out."""
    bounds = [AUTO_MAX_RUNNING]
    if machine_memory_bytes and default_memory_bytes > 0:
        bounds.append(machine_memory_bytes // default_memory_bytes)
    if cpus:
        bounds.append(RUNNING_PER_CPU * cpus)
    return max(1, min(bounds))


@dataclass(frozen=True)
class AdmissionConfig:
    """The operator's admission settings; `max_running_boxes` None means "from the
    machine" (see the module's docstring), settled once the engine is known."""

    max_running_boxes: int | None = None
    max_waiting_runs: int = DEFAULT_MAX_WAITING
    admission_wait_s: float = DEFAULT_WAIT_S

    def with_settings(self, values: Mapping[str, object], source: str) -> AdmissionConfig:
        """Apply settings (from the file's top level or the environment); a bad value
        is a clear config error naming the setting, the value and the range."""
        changes: dict[str, float | int] = {}
        for key, raw in values.items():
            if key not in ADMISSION_KEYS:
                raise ConfigError(
                    f"{source}: unknown admission setting {key!r}. Known: "
                    f"{', '.join(ADMISSION_KEYS)}."
                )
            unit, low, high, whole = ADMISSION_KEYS[key]
            try:
                number = float("nan") if isinstance(raw, bool) else float(str(raw))
            except ValueError:
                number = float("nan")
            if not low <= number <= high or (whole and number != int(number)):
                kind = "a whole number" if whole else "a number"
                raise ConfigError(
                    f"{source}: {key} must be {kind} of {unit} from {low:g} to {high:g}, "
                    f"not {raw!r}."
                )
            changes[key] = int(number) if whole else number
        return AdmissionConfig(**{**self.__dict__, **changes})

    def settle(
        self, *, machine_memory_bytes: int | None, cpus: int | None, default_memory_bytes: int
    ) -> AdmissionSettings:
        running = self.max_running_boxes
        if running is None:
            running = default_max_running(machine_memory_bytes, cpus, default_memory_bytes)
        return AdmissionSettings(
            max_running=running,
            max_waiting=self.max_waiting_runs,
            wait_s=self.admission_wait_s,
        )

    def to_dict(self) -> dict[str, float | int | None]:
        return dict(self.__dict__)
