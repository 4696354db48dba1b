"""Limits, and the operator policy that bounds them (pure values, no I/O).

The operator sets defaults and ceilings; a request may only ask for less.
Asking for more is rejected with the value and the ceiling named, never clamped.

Internally every limit is held in base units (`*_bytes`, `*_s`). People and
configuration files use friendlier units (`memory_mib`); `LIMIT_FIELDS` is the
single table that maps one onto the other.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass

from pybox._core.errors import ConfigError, InvalidRequest, LimitExceeded

KIB = 1024
MIB = 1024 * 1024


@dataclass(frozen=True)
class Limits:
    """Effective limits of one box, in base units."""

    timeout_s: float
    memory_bytes: int
    cpus: float
    pids: int
    open_files: int
    writable_bytes: int
    output_bytes: int
    output_files: int
    output_files_bytes: int
    input_bytes: int

    def to_dict(self) -> dict[str, float | int]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class LimitRequest:
    """What a client asked for, in base units; `None` means "the default"."""

    timeout_s: float | None = None
    memory_bytes: int | None = None
    cpus: float | None = None
    pids: int | None = None
    open_files: int | None = None
    writable_bytes: int | None = None
    output_bytes: int | None = None
    output_files: int | None = None
    output_files_bytes: int | None = None
    input_bytes: int | None = None


@dataclass(frozen=True)
class LimitField:
    """How one limit is named, shown and bounded for people."""

    attr: str
    key: str
    what: str
    unit: str
    scale: int
    integral: bool
    minimum: float
    unit_one: str = ""  # the unit's singular, where it differs
    # The `pybox exec`/`repair` flag that sets it ("" when only the operator's
    # configuration does on the command line), and what it sets, for --help.
    flag: str = ""
    help: str = ""

    @property
    def base_unit(self) -> str:
        """The unit of the base value (`memory_bytes` is in bytes, not MiB)."""
        return "bytes" if self.attr.endswith("_bytes") else self.unit

    def to_user(self, base_value: float) -> float:
        return base_value / self.scale

    def to_base(self, user_value: float) -> float | int:
        value = user_value * self.scale
        return int(value) if self.integral else float(value)

    def describe(self, base_value: float) -> str:
        user = self.to_user(base_value)
        shown = f"{user:g}" if not float(user).is_integer() else f"{int(user)}"
        unit = self.unit_one if user == 1 and self.unit_one else self.unit
        return f"{shown} {unit}".rstrip()

    def amount(self, base_value: float) -> str:
        """How much of this limit, naming the thing once: "32768 MiB of memory",
        "512 processes", "5000 open files", "100 repair rounds" (never "of processes")."""
        words = self.what.split()
        if self.unit not in words and self.unit_one not in words:
            return f"{self.describe(base_value)} of {self.what}"
        if self.what in (self.unit, self.unit_one):  # "processes", "CPU": the unit says it
            return self.describe(base_value)
        shown, unit = self.describe(base_value).split(" ", 1)
        return f"{shown} {' '.join(unit if w in (self.unit, self.unit_one) else w for w in words)}"


LIMIT_FIELDS: tuple[LimitField, ...] = (
    LimitField(
        "timeout_s", "timeout_s", "wall-clock time", "s", 1, False, 0.1,
        flag="--timeout", help="wall-clock limit in seconds",
    ),
    LimitField(
        "memory_bytes", "memory_mib", "memory", "MiB", MIB, True, 16,
        flag="--memory", help="memory limit in MiB (swap is never allowed)",
    ),
    LimitField(
        "cpus", "cpus", "CPU", "CPUs", 1, False, 0.01, "CPU",
        flag="--cpus", help="CPU limit, in CPUs (for example 0.5)",
    ),
    LimitField(
        "pids", "pids", "processes", "processes", 1, True, 8, "process",
        flag="--pids", help="most processes and threads at once",
    ),
    LimitField(
        "open_files", "open_files", "open files", "files", 1, True, 32, "file",
        flag="--open-files", help="most open files per process",
    ),
    LimitField(
        "writable_bytes", "writable_mib", "writable space per tmpfs", "MiB", MIB, True, 1,
        flag="--writable", help="size of each writable tmpfs in MiB",
    ),
    LimitField(
        "output_bytes", "output_kib", "output per stream", "KiB", KIB, True, 1,
        flag="--output-limit", help="output kept per stream in KiB (head and tail)",
    ),
    LimitField(
        "output_files", "output_files", "returned files", "files", 1, True, 0, "file",
        help="most files the program may return",
    ),
    LimitField(
        "output_files_bytes", "output_files_mib", "returned file bytes", "MiB", MIB, True, 0,
        help="returned file bytes in total, in MiB",
    ),
    LimitField(
        "input_bytes", "input_mib", "code and input bytes", "MiB", MIB, True, 1,
        help="code, input files and stdin in MiB",
    ),
)  # fmt: skip

FIELDS_BY_KEY: Mapping[str, LimitField] = {f.key: f for f in LIMIT_FIELDS}
FIELDS_BY_ATTR: Mapping[str, LimitField] = {f.attr: f for f in LIMIT_FIELDS}

BUILTIN_DEFAULTS = Limits(
    timeout_s=30.0,
    memory_bytes=512 * MIB,
    cpus=1.0,
    pids=128,
    open_files=256,
    writable_bytes=64 * MIB,
    output_bytes=1024 * KIB,
    output_files=100,
    output_files_bytes=64 * MIB,
    input_bytes=32 * MIB,
)

BUILTIN_CEILINGS = Limits(
    timeout_s=3600.0,
    memory_bytes=8192 * MIB,
    cpus=4.0,
    pids=4096,
    open_files=4096,
    writable_bytes=1024 * MIB,
    output_bytes=64 * 1024 * KIB,
    output_files=10_000,
    output_files_bytes=1024 * MIB,
    input_bytes=512 * MIB,
)


def _check_number(field: LimitField, value: object, where: str) -> float:
    """Return `value` as a finite number, or say exactly why it is not one."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidRequest(
            f"{where}: {field.key} must be a number, not {type(value).__name__} ({value!r})."
        )
    if not math.isfinite(value):
        raise InvalidRequest(f"{where}: {field.key} must be a finite number, not {value!r}.")
    return float(value)


def parse_user_value(
    key: str, raw: object, where: str, fields: Mapping[str, LimitField] = FIELDS_BY_KEY
) -> float | int:
    """Turn a user-unit value (TOML number, env or flag string) into base units."""
    field = fields.get(key)
    if field is None:
        known = ", ".join(sorted(fields))
        raise ConfigError(f"{where}: unknown limit {key!r}. Known limits: {known}.")
    if isinstance(raw, str):
        try:
            raw = float(raw) if any(c in raw for c in ".eE") else int(raw)
        except ValueError:
            raise ConfigError(
                f"{where}: {key} must be a number in {field.unit}, not {raw!r}."
            ) from None
    try:
        number = _check_number(field, raw, where)
    except InvalidRequest as exc:
        raise ConfigError(str(exc)) from None
    if field.integral and not number.is_integer():
        raise ConfigError(f"{where}: {key} must be a whole number of {field.unit}, not {raw!r}.")
    if number < field.minimum:
        raise ConfigError(
            f"{where}: {key} = {raw!r} is below the minimum of {field.minimum:g} {field.unit}."
        )
    return field.to_base(number)


# Generic over a table of fields, so other bounded things (the repair loop) share
# the same rules and messages. `section` prefixes the configuration keys named
# in messages ("" for box limits, "repair." for the repair loop's bounds).


def check_defaults_within(
    fields: tuple[LimitField, ...], defaults: object, ceilings: object, section: str = ""
) -> None:
    for field in fields:
        default = getattr(defaults, field.attr)
        ceiling = getattr(ceilings, field.attr)
        if default > ceiling:
            raise ConfigError(
                f"The default of {field.amount(default)} is above its ceiling of "
                f"{field.describe(ceiling)}. Lower {section}defaults.{field.key} or "
                f"raise {section}ceilings.{field.key} in the operator configuration."
            )


def apply_settings(
    fields: tuple[LimitField, ...],
    defaults: object,
    ceilings: object,
    new_defaults: Mapping[str, object],
    new_ceilings: Mapping[str, object],
    where: str,
) -> tuple[dict[str, float | int], dict[str, float | int]]:
    """Merged (defaults, ceilings) by attribute, with user-unit settings applied.

    A lowered ceiling also lowers a default that was not set explicitly, so an
    operator can write just `ceilings.memory_mib = 256`.
    """
    by_key = {f.key: f for f in fields}

    def parsed(settings: Mapping[str, object]) -> dict[str, float | int]:
        values = {k: parse_user_value(k, v, where, by_key) for k, v in settings.items()}
        return {by_key[k].attr: v for k, v in values.items()}

    set_defaults, set_ceilings = parsed(new_defaults), parsed(new_ceilings)
    merged_ceilings = {f.attr: set_ceilings.get(f.attr, getattr(ceilings, f.attr)) for f in fields}
    merged_defaults: dict[str, float | int] = {}
    for f in fields:
        if f.attr in set_defaults:
            merged_defaults[f.attr] = set_defaults[f.attr]
        elif f.attr in set_ceilings:
            merged_defaults[f.attr] = min(getattr(defaults, f.attr), set_ceilings[f.attr])
        else:
            merged_defaults[f.attr] = getattr(defaults, f.attr)
    return merged_defaults, merged_ceilings


def resolve_fields(
    fields: tuple[LimitField, ...],
    defaults: object,
    ceilings: object,
    request: object,
    section: str = "",
) -> dict[str, float | int]:
    """Effective values for `request`: defaults filled in, ceilings enforced."""
    values: dict[str, float | int] = {}
    for field in fields:
        asked = getattr(request, field.attr)
        if asked is None:
            values[field.attr] = getattr(defaults, field.attr)
            continue
        number = _check_number(field, asked, "Request")
        if field.integral and not number.is_integer():
            raise InvalidRequest(f"Request: {field.attr} must be a whole number, not {asked!r}.")
        minimum_base = field.to_base(field.minimum)
        if number < minimum_base:
            raise InvalidRequest(
                f"Requested {field.amount(number)}; the minimum is {field.describe(minimum_base)}."
            )
        ceiling = getattr(ceilings, field.attr)
        if number > ceiling:
            raise LimitExceeded(
                f"Requested {field.amount(number)}; the maximum is "
                f"{field.describe(ceiling)}. Ask for at most {field.describe(ceiling)}, "
                f"or have the operator raise {section}ceilings.{field.key}."
            )
        values[field.attr] = int(number) if field.integral else number
    return values


@dataclass(frozen=True)
class Policy:
    """The operator's defaults and ceilings. Defaults never exceed ceilings."""

    defaults: Limits = BUILTIN_DEFAULTS
    ceilings: Limits = BUILTIN_CEILINGS
    # Environment variables with credential-shaped names (TOKEN, SECRET, AWS_...)
    # reach the untrusted program only when the operator says so.
    allow_credential_env: bool = False

    def __post_init__(self) -> None:
        check_defaults_within(LIMIT_FIELDS, self.defaults, self.ceilings)

    def with_settings(
        self,
        defaults: Mapping[str, object],
        ceilings: Mapping[str, object],
        where: str,
    ) -> Policy:
        """A new policy with user-unit settings (from a file, env or flags) applied."""
        new_defaults, new_ceilings = apply_settings(
            LIMIT_FIELDS, self.defaults, self.ceilings, defaults, ceilings, where
        )
        return Policy(
            defaults=Limits(**new_defaults),  # type: ignore[arg-type]
            ceilings=Limits(**new_ceilings),  # type: ignore[arg-type]
            allow_credential_env=self.allow_credential_env,
        )

    def resolve(self, request: LimitRequest) -> Limits:
        """Effective limits for `request`: defaults filled in, ceilings enforced."""
        return Limits(**resolve_fields(LIMIT_FIELDS, self.defaults, self.ceilings, request))  # type: ignore[arg-type]

    def to_dict(self) -> dict[str, dict[str, float | int]]:
        return {"defaults": self.defaults.to_dict(), "ceilings": self.ceilings.to_dict()}
