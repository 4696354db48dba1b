"""The one limit table (`LIMIT_FIELDS`) as each front end shows it (pure).

The CLI's flags are the fields with a `flag`; the Python API's keyword arguments
are the fields' attributes (base units: `memory_bytes`); the MCP tools take the
fields' keys (user units: `memory_mib`) under the schema `limits_json_schema`
gives. A new limit is one row in the table and appears on every surface.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pybox._core.display import noun
from pybox._core.errors import InvalidRequest
from pybox._core.limits import (
    FIELDS_BY_KEY,
    LIMIT_FIELDS,
    LIMIT_SYNONYMS,
    LimitField,
    LimitRequest,
    Limits,
)

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
