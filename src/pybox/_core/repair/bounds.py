"""The repair loop's bounds: what a caller asks for, the operator's defaults and
ceilings, and the one table of fields that checks and resolves them."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from pybox._core.limits import (
    LimitField,
    apply_settings,
    check_defaults_within,
    resolve_fields,
)


@dataclass(frozen=True)
class RepairLimits:
    """The loop's effective bounds. Each box run has the normal box limits besides."""

    rounds: int
    total_s: float
    model_calls: int
    prompt_bytes: int
    reply_bytes: int
    proposal_bytes: int
    invalid_proposals: int

    def to_dict(self) -> dict[str, float | int]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class RepairBudget:
    """What a caller asks for; `None` means the operator's default. Only lower is allowed."""

    rounds: int | None = None
    total_s: float | None = None
    model_calls: int | None = None
    prompt_bytes: int | None = None
    reply_bytes: int | None = None
    proposal_bytes: int | None = None
    invalid_proposals: int | None = None


REPAIR_FIELDS: tuple[LimitField, ...] = (
    LimitField("rounds", "rounds", "repair rounds", "rounds", 1, True, 1, "round"),
    LimitField("total_s", "total_s", "total repair time", "s", 1, False, 1),
    LimitField("model_calls", "model_calls", "model calls", "calls", 1, True, 1, "call"),
    LimitField("prompt_bytes", "prompt_bytes", "prompt size", "bytes", 1, True, 1024, "byte"),
    LimitField(
        "reply_bytes", "reply_bytes", "model reply bytes in total", "bytes", 1, True, 64, "byte"
    ),
    LimitField("proposal_bytes", "proposal_bytes", "proposal size", "bytes", 1, True, 16, "byte"),
    LimitField(
        "invalid_proposals",
        "invalid_proposals",
        "invalid proposals",
        "proposals",
        1,
        True,
        1,
        "proposal",
    ),
)
REPAIR_FIELDS_BY_KEY: Mapping[str, LimitField] = {f.key: f for f in REPAIR_FIELDS}

REPAIR_DEFAULTS = RepairLimits(
    rounds=4,
    total_s=300.0,
    model_calls=8,
    prompt_bytes=64 * 1024,
    reply_bytes=512 * 1024,
    proposal_bytes=64 * 1024,
    invalid_proposals=2,
)
REPAIR_CEILINGS = RepairLimits(
    rounds=20,
    total_s=3600.0,
    model_calls=40,
    prompt_bytes=512 * 1024,
    reply_bytes=4 * 1024 * 1024,
    proposal_bytes=1024 * 1024,
    invalid_proposals=10,
)
REPAIR_SECTION = "repair."


@dataclass(frozen=True)
class RepairPolicy:
    """The operator's defaults and ceilings for the repair loop (`[repair.*]` in config)."""

    defaults: RepairLimits = REPAIR_DEFAULTS
    ceilings: RepairLimits = REPAIR_CEILINGS

    def __post_init__(self) -> None:
        check_defaults_within(REPAIR_FIELDS, self.defaults, self.ceilings, REPAIR_SECTION)

    def with_settings(
        self, defaults: Mapping[str, object], ceilings: Mapping[str, object], where: str
    ) -> RepairPolicy:
        new_defaults, new_ceilings = apply_settings(
            REPAIR_FIELDS, self.defaults, self.ceilings, defaults, ceilings, where
        )
        return RepairPolicy(RepairLimits(**new_defaults), RepairLimits(**new_ceilings))  # type: ignore[arg-type]

    def resolve(self, budget: RepairBudget) -> RepairLimits:
        values = resolve_fields(REPAIR_FIELDS, self.defaults, self.ceilings, budget, REPAIR_SECTION)
        return RepairLimits(**values)  # type: ignore[arg-type]

    def to_dict(self) -> dict[str, dict[str, float | int]]:
        return {"defaults": self.defaults.to_dict(), "ceilings": self.ceilings.to_dict()}
