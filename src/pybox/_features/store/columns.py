"""Rows of the store's tables to values and back (no sqlite3: plain tuples)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from pybox._core.errors import StateError
from pybox._features.store.rows import SANDBOX_STATES, AuditEntry, RunRow, SandboxRow

# Column lists, in the order the converters below read them.
SANDBOX_COLUMNS = ", ".join(f.name for f in dataclasses.fields(SandboxRow))
RUN_COLUMNS = ", ".join(f.name for f in dataclasses.fields(RunRow))
AUDIT_COLUMNS = ", ".join(f.name for f in dataclasses.fields(AuditEntry))
_SANDBOX_FIELDS = tuple(f.name for f in dataclasses.fields(SandboxRow))


def check_state(state: str) -> None:
    if state not in SANDBOX_STATES:
        raise StateError(
            f"{state!r} is not a sandbox state; the states are {', '.join(SANDBOX_STATES)}."
        )


def to_json(value: Any, what: str) -> str:
    """Compact ASCII JSON, keys in their given order (a receipt reads as it was made)."""
    try:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise StateError(f"Cannot store {what}: it is not plain JSON ({exc}).") from exc


def from_json(text: str | None, what: str) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise StateError(
            f"{what} in pybox's store is not JSON ({exc}). `pybox audit verify` checks the "
            "audit log; the record itself cannot be read."
        ) from exc


def sandbox_values(row: SandboxRow, reason: str) -> tuple[Any, ...]:
    """The INSERT values of a sandbox, in SANDBOX_COLUMNS order (its reason: `reason`)."""
    converted = {f.name: getattr(row, f.name) for f in dataclasses.fields(SandboxRow)}
    converted["limits"] = to_json(dict(row.limits), "the sandbox's limits")
    converted["libraries"] = to_json(list(row.libraries), "the sandbox's libraries")
    converted["reason"] = reason
    return tuple(converted.values())


def sandbox_row(row: tuple[Any, ...]) -> SandboxRow:
    values = dict(zip(_SANDBOX_FIELDS, row, strict=True))
    what = f"Sandbox {values['sandbox_id']}'s record"
    values["limits"] = from_json(values["limits"], what)
    values["libraries"] = tuple(from_json(values["libraries"], what))
    return SandboxRow(**values)


def run_row(row: tuple[Any, ...]) -> RunRow:
    run_id, kind, sandbox_id, owner, started_at, finished_at, status, request, receipt = row
    what = f"Run {run_id}'s record"
    return RunRow(
        run_id,
        kind,
        sandbox_id,
        owner,
        started_at,
        finished_at,
        status,
        from_json(request, what),
        from_json(receipt, what),
    )


def audit_entry(row: tuple[Any, ...]) -> AuditEntry:
    seq, at, operation, subject, details, prev_hash, digest = row
    try:
        parsed = json.loads(details)
    except (TypeError, ValueError):
        parsed = None
    if not isinstance(parsed, dict):
        # Kept as found: it cannot hash to the entry's hash, so the chain names it.
        parsed = {"unreadable_details": str(details)}
    return AuditEntry(seq, at, operation, subject, parsed, prev_hash, digest)
