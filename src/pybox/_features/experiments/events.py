"""Observability: one JSON line per experiment operation, on the stream the caller
gives (stderr: under MCP stdio, stdout is the protocol, and it is refused here).

Every field, the fixed ones included, passes through `scrub_fields`, the one
place where credential-shaped keys lose their values, so no call site can leak
a secret by forgetting. A key is credential-shaped by the same rule that refuses
credential-shaped environment variable names (`pybox._core.request.
CREDENTIAL_NAME_RE`: token, secret, password, passwd, key, credential, auth,
cookie, private, dsn, ..., case-insensitive); name a field so it does not match
(`skipped_sensitive`, not `skipped_secrets`) when its value is no secret.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from enum import Enum
from typing import Any, TextIO

from pybox._core.errors import InvalidRequest
from pybox._core.request import CREDENTIAL_NAME_RE

EVENT = "pybox.experiment"
SCRUBBED = "[scrubbed]"
# How deep fields may nest before the rest is shown as a placeholder.
MAX_DEPTH = 8
_FIXED = ("event", "operation", "ts")


def is_credential_key(key: str) -> bool:
    """Whether a field named `key` may hold a credential (its value is then scrubbed)."""
    return CREDENTIAL_NAME_RE.search(key) is not None


def scrub_fields(fields: Mapping[str, Any]) -> dict[str, Any]:
    """A JSON-able copy of `fields` in which every value under a credential-shaped key,
    in nested mappings, lists and value objects too, is "[scrubbed]"; dataclasses and
    objects with `to_dict()` become mappings, other values JSON cannot hold strings
    (bytes their size, never their content)."""
    return _mapping(fields, 0)


def emit_event(
    stream: TextIO,
    operation: str,
    *,
    experiment_id: str | None,
    job_id: str | None,
    status: str,
    duration_s: float | None,
    **fields: Any,
) -> dict[str, Any]:
    """Write one JSON line for `operation` to `stream` and flush; returns what was written.

    A write that fails (a closed or broken stderr) is dropped: observability never
    fails the operation it describes."""
    if _is_stdout(stream):
        raise InvalidRequest(
            f"Experiment events go to stderr, never stdout (asked to write {operation!r} "
            "events to stdout, which is the MCP protocol under stdio). Next step: pass "
            "sys.stderr or a log file."
        )
    clashing = sorted(set(fields) & set(_FIXED))
    if clashing:
        raise InvalidRequest(
            f"Event fields {', '.join(clashing)} are set by emit_event itself. Next step: "
            "name the field otherwise."
        )
    stamp = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    event = scrub_fields(
        {
            "event": EVENT,
            "operation": operation,
            "ts": stamp,
            "experiment_id": experiment_id,
            "job_id": job_id,
            "status": status,
            "duration_s": duration_s,
            **fields,
        }
    )
    line = json.dumps(event, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    try:
        stream.write(line + "\n")
        stream.flush()
    except (OSError, ValueError):
        pass
    return event


def _is_stdout(stream: TextIO) -> bool:
    # Not `sys.stdout`: the MCP stdio server points it at stderr while it owns fd 1's
    # protocol stream; what must never be written to is the process's real stdout.
    if stream is sys.__stdout__:
        return True
    try:
        return stream.fileno() == 1
    except (OSError, ValueError, AttributeError):
        return False  # not a file descriptor at all (a StringIO, a test's buffer)


def _mapping(data: Mapping[Any, Any], depth: int) -> dict[str, Any]:
    kept: dict[str, Any] = {}
    for raw_key, value in data.items():
        key = raw_key.value if isinstance(raw_key, Enum) else str(raw_key)
        kept[key] = SCRUBBED if is_credential_key(key) else _value(value, depth + 1)
    return kept


def _value(value: Any, depth: int) -> Any:
    if isinstance(value, Enum):
        value = value.value
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return f"<{len(bytes(value))} bytes>"
    if depth > MAX_DEPTH:
        return "<nested too deep>"
    if isinstance(value, Mapping):
        return _mapping(value, depth)
    if isinstance(value, list | tuple):
        return [_value(item, depth + 1) for item in value]
    if isinstance(value, set | frozenset):
        return [_value(item, depth + 1) for item in sorted(value, key=str)]
    # A value object is scrubbed by its fields, never stringified whole (its repr
    # would carry a credential-shaped field's value past the scrub).
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _mapping({f.name: getattr(value, f.name) for f in dataclasses.fields(value)}, depth)
    to_dict = getattr(value, "to_dict", None)
    if callable(to_dict):
        shown = to_dict()
        if isinstance(shown, Mapping):
            return _mapping(shown, depth)
    return str(value)
