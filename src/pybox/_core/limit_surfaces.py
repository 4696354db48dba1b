"""The one limit table (`LIMIT_FIELDS`) as each front end shows it (pure).

The CLI's flags are the fields with a `flag`; the Python API's keyword arguments
are the fields' attributes (base units: `memory_bytes`); the MCP tools take the
fields' keys (user units: `memory_mib`) under the schema `limits_json_schema`
gives. A new limit is one row in the table and appears on every surface. Keys
agents bring from other sandboxes are read here too (`LIMIT_SYNONYMS`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pybox._core.display import noun
from pybox._core.errors import InvalidRequest
from pybox._core.limits import (
    FIELDS_BY_KEY,
    LIMIT_FIELDS,
    MIB,
    LimitField,
    LimitRequest,
    Limits,
)

# -- limit keys agents send that are not pybox's --------------------------------------
#
# Agents trained on other sandboxes send keys such as `timeout` or `memory_mb`.
# A key whose unit is exact is accepted and converted (`timeout_ms`); a key
# whose unit is missing or ambiguous (MB is 10^6 bytes or 2^20 depending on who
# wrote it; `timeout` is seconds in one API and milliseconds in the next) is
# refused with the right key named, because a guessed unit would be a silently
# changed limit.


@dataclass(frozen=True)
class LimitSynonym:
    """A limit key pybox does not use, and what it means in pybox's terms."""

    key: str
    canonical: str  # the pybox key (user units) it stands for
    divisor: int | None  # canonical value = value / divisor; None: refused, unit unclear
    note: str  # the unit it is read in, or why it is refused


LIMIT_SYNONYMS: tuple[LimitSynonym, ...] = (
    LimitSynonym("timeout_seconds", "timeout_s", 1, "seconds"),
    LimitSynonym("timeout_ms", "timeout_s", 1000, "milliseconds"),
    LimitSynonym("memory_bytes", "memory_mib", MIB, "bytes, a whole number of MiB"),
    LimitSynonym("timeout", "timeout_s", None, "its unit (seconds or milliseconds) is not said"),
    LimitSynonym("memory", "memory_mib", None, "its unit is not said"),
    LimitSynonym(
        "memory_mb", "memory_mib", None, "MB is 1,000,000 bytes to some and 1,048,576 to others"
    ),
    LimitSynonym("memory_gb", "memory_mib", None, "GB is ambiguous and too coarse"),
    LimitSynonym("mem_limit", "memory_mib", None, "its unit is not said"),
    LimitSynonym("cpu", "cpus", None, "pybox's key is cpus (a number of CPUs, such as 0.5)"),
    LimitSynonym("nano_cpus", "cpus", None, "pybox counts whole or fractional CPUs"),
    LimitSynonym("max_processes", "pids", None, "pybox's key is pids (processes)"),
)

SYNONYMS_BY_KEY: Mapping[str, LimitSynonym] = {s.key: s for s in LIMIT_SYNONYMS}


def canonical_limit_keys(raw: Mapping[str, object], where: str) -> dict[str, object]:
    """`raw` with accepted synonyms turned into pybox's keys and units.

    Raises InvalidRequest for a refused synonym (naming the right key), for a
    synonym given beside its pybox key (or two synonyms of one key), and for an
    accepted synonym whose value does not convert exactly. Unknown keys and
    the values' checks are left to the caller.
    """
    given_by: dict[str, str] = {}  # canonical key -> the key that set it
    result: dict[str, object] = {}
    for key, given in raw.items():
        synonym = SYNONYMS_BY_KEY.get(key)
        value = given
        if synonym is None:
            canonical = key
        else:
            target = FIELDS_BY_KEY[synonym.canonical]
            if synonym.divisor is None:
                raise InvalidRequest(
                    f"{where}: {key!r} is not a pybox limit ({synonym.note}). Use "
                    f"{synonym.canonical!r}, in {target.unit}."
                )
            canonical = synonym.canonical
            value = _convert_synonym(synonym, target, given, where)
        if canonical in given_by:
            raise InvalidRequest(
                f"{where}: {given_by[canonical]!r} and {key!r} both set {canonical}; give "
                f"only {canonical!r}."
            )
        given_by[canonical] = key
        result[canonical] = value
    return result


def _convert_synonym(
    synonym: LimitSynonym, target: LimitField, value: object, where: str
) -> object:
    assert synonym.divisor is not None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return value  # the caller's number check names the problem
    converted = value / synonym.divisor
    if target.integral:
        if not float(converted).is_integer():
            raise InvalidRequest(
                f"{where}: {synonym.key} = {value!r} is not a whole number of {target.unit}; "
                f"give {synonym.canonical!r} in {target.unit} instead."
            )
        return int(converted)
    return converted


# The API's keyword arguments for limits, in the table's order.
LIMIT_KEYWORDS: tuple[str, ...] = tuple(f.attr for f in LIMIT_FIELDS)


def cli_limit_fields() -> tuple[LimitField, ...]:
    """The limits `pybox exec` (and `repair`) take as flags, in the table's order."""
    return tuple(f for f in LIMIT_FIELDS if f.flag)


def limit_request_from_keywords(options: Mapping[str, object]) -> LimitRequest:
    """A LimitRequest from the API's keyword arguments (base units; None: the default).

    Only the table's attributes are accepted; the values are checked when the
    request is resolved against the operator's policy (`Policy.resolve`).
    """
    unknown = sorted(set(options) - set(LIMIT_KEYWORDS))
    if unknown:
        raise InvalidRequest(
            f"Unknown {noun(len(unknown), 'option')} {', '.join(unknown)}. Per-run limits are: "
            f"{', '.join(LIMIT_KEYWORDS)}."
        )
    return LimitRequest(**options)  # type: ignore[arg-type]


def api_limits_doc(indent: str = "") -> str:
    """The API's limit keywords, one line each, with their units (for docstrings):
    "memory_bytes: memory, in bytes (config: memory_mib, in MiB)"."""
    lines = []
    for f in LIMIT_FIELDS:
        unit = "seconds" if f.base_unit == "s" else f.base_unit
        counted = unit in f.what.split() or f.what == f.unit_one  # "open files", "CPU"
        line = f"{indent}{f.attr}: {f.what}" + ("" if counted else f", in {unit}")
        if f.key != f.attr:
            line += f" (config: {f.key}, in {f.unit})"
        lines.append(line)
    return "\n".join(lines)


def limits_json_schema(defaults: Limits, ceilings: Limits) -> dict[str, Any]:
    """The JSON schema of a tool's `limits` object: each key in user units with the
    operator's default and ceiling; accepted synonyms (`timeout_ms`) offered too."""
    properties: dict[str, Any] = {}
    for f in LIMIT_FIELDS:
        default = f.describe(getattr(defaults, f.attr))
        ceiling = f.describe(getattr(ceilings, f.attr))
        properties[f.key] = {
            "type": "integer" if f.integral else "number",
            "minimum": f.minimum,
            "description": f"{f.what} in {f.unit}: default {default}, at most {ceiling}",
        }
    for synonym in LIMIT_SYNONYMS:
        if synonym.divisor is None:
            continue  # refused keys are not offered; a call with one is told the right key
        target = FIELDS_BY_KEY[synonym.canonical]
        properties[synonym.key] = {
            "type": "integer" if synonym.divisor > 1 else "number",
            "description": f"{synonym.canonical} given in {synonym.note}; prefer "
            f"{synonym.canonical} ({target.unit})",
        }
    return {
        "type": "object",
        "additionalProperties": False,
        "properties": properties,
        "description": "Ask for less than the defaults, or more up to the ceilings. "
        "Asking above a ceiling is refused (never lowered silently).",
    }
