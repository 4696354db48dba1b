"""What the store keeps of a request or an audit detail: never a secret value.

Environment variables keep their names only; the code keeps its size and
sha256; stdin keeps its size; any other bytes (file contents) keep their size.
Applied by whoever builds a record and again by the store itself (defence in
depth), so it must be idempotent: redacting a redacted request changes nothing.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

# Keys whose value is a program's environment: only the names are kept.
ENV_KEYS = frozenset({"env", "environment", "environ"})
# Keys whose value is what the program reads on stdin: only the size is kept.
STDIN_KEYS = frozenset({"stdin", "stdin_bytes"})
CODE_KEYS = frozenset({"code"})
# How deep a request may nest before the rest is dropped (requests are shallow).
MAX_DEPTH = 8


def redact_request(request: Mapping[str, Any]) -> dict[str, Any]:
    """A JSON-able copy of `request` that holds no secret value (see the module)."""
    return _mapping(request, 0)


def redact_details(details: Mapping[str, Any]) -> dict[str, Any]:
    """An audit entry's details, under the same rules as a request."""
    return _mapping(details, 0)


def env_names(env: Any) -> list[str]:
    """The names of an environment given as a mapping, (name, value) pairs, or
    NAME=VALUE strings; values are dropped, whatever their form."""
    if isinstance(env, Mapping):
        return sorted(str(name) for name in env)
    names: list[str] = []
    if isinstance(env, list | tuple):
        for item in env:
            if isinstance(item, list | tuple) and item:
                names.append(str(item[0]))
            elif isinstance(item, str):
                names.append(item.partition("=")[0])
    return names


def _mapping(data: Mapping[str, Any], depth: int) -> dict[str, Any]:
    kept: dict[str, Any] = {}
    for raw_key, value in data.items():
        key = str(raw_key)
        lowered = key.lower()
        if lowered in ENV_KEYS:
            kept[key] = env_names(value)
        elif lowered in STDIN_KEYS:
            if isinstance(value, bytes | str):
                kept["stdin_size_bytes"] = len(_bytes(value))
        elif lowered in CODE_KEYS and isinstance(value, bytes | str):
            data_bytes = _bytes(value)
            kept["code_size_bytes"] = len(data_bytes)
            kept["code_sha256"] = hashlib.sha256(data_bytes).hexdigest()
        else:
            kept[key] = _value(value, depth + 1)
    return kept


def _value(value: Any, depth: int) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        # File contents and the like: their size, never the bytes.
        return {"size_bytes": len(bytes(value))}
    if depth > MAX_DEPTH:
        return {"dropped": "nested too deep"}
    if isinstance(value, Mapping):
        return _mapping(value, depth)
    if isinstance(value, list | tuple | set | frozenset):
        items = sorted(value, key=str) if isinstance(value, set | frozenset) else value
        return [_value(item, depth + 1) for item in items]
    # An object the store cannot show as JSON: its type, never its repr (which may hold data).
    return {"dropped": type(value).__name__}


def _bytes(value: bytes | str) -> bytes:
    return value.encode("utf-8", "surrogateescape") if isinstance(value, str) else value
