"""Tool arguments checked against the tool's own input schema.

One schema per tool serves twice: `tools/list` shows it to the client, and
`check_arguments` holds every call to it, so what a model is told and what the
server accepts cannot drift apart. Only the parts of JSON Schema that pybox's
tools use are understood (types, required, properties, additionalProperties,
propertyNames, items, enum, pattern, minimum/maximum, maxItems/maxProperties);
a schema using anything else is a bug caught by the unit tests.

A failed check is an `ArgumentError` naming the argument's path (`files[0].name`,
`env['A']`) and what it must be, so the model can fix its call. A property a
declaration checks with a function of its own (`checks`) is handed to that
function instead: the limits, whose keys from other sandboxes and minimums have
messages of their own.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from pybox._core.display import noun
from pybox._frontends.mcp._protocol import ArgumentError, JSONObject

# (where, value) -> the value the handler gets; raises ArgumentError (or a
# PyboxError for a value pybox refuses, reported as an isError result).
PropertyCheck = Callable[[str, Any], Any]

KINDS: Mapping[str, tuple[type | tuple[type, ...], str]] = {
    "string": (str, "a string"),
    "number": ((int, float), "a number"),
    "integer": ((int, float), "a whole number"),
    "boolean": (bool, "a boolean"),
    "object": (dict, "an object"),
    "array": (list, "an array"),
    "null": (type(None), "null"),
}
UNDERSTOOD = frozenset(
    {
        "type",
        "description",
        "title",
        "required",
        "properties",
        "additionalProperties",
        "propertyNames",
        "items",
        "enum",
        "pattern",
        "minimum",
        "maximum",
        "maxItems",
        "maxProperties",
    }
)


def input_schema(required: list[str], properties: JSONObject) -> JSONObject:
    """A tool's input: an object that names what it needs and accepts nothing else."""
    return {
        "type": "object",
        "additionalProperties": False,
        "required": required,
        "properties": properties,
    }


def output_schema(required: list[str], **properties: JSONObject) -> JSONObject:
    """A tool's structured result: open to fields added later, so clients that pinned
    an older shape keep working."""
    return {"type": "object", "required": required, "properties": properties}


def check_arguments(
    where: str,
    schema: JSONObject,
    arguments: JSONObject,
    checks: Mapping[str, PropertyCheck] | None = None,
) -> JSONObject:
    """`arguments` as the handler gets them: checked against `schema`, with each
    property in `checks` replaced by what its function returned."""
    _check(where, "", schema, arguments, checks or {})
    checked = dict(arguments)
    for name, check in (checks or {}).items():
        if name in checked:
            checked[name] = check(where, checked[name])
    return checked


def _at(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _join(words: list[str]) -> str:
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


def _number(value: float) -> str:
    return f"{value:g}"


def _check(
    where: str,
    path: str,
    schema: JSONObject,
    value: Any,
    skip: Mapping[str, PropertyCheck] | None = None,
) -> None:
    unknown_keywords = set(schema) - UNDERSTOOD
    assert not unknown_keywords, f"schema keywords not checked: {sorted(unknown_keywords)}"
    kind = schema.get("type")
    if kind is not None:
        _check_type(where, path, kind, value)
    if "enum" in schema and value not in schema["enum"]:
        allowed = " or ".join(repr(choice) for choice in schema["enum"])
        raise ArgumentError(f"{where}: {path} must be {allowed}, not {value!r}.")
    pattern = schema.get("pattern")
    if isinstance(value, str) and pattern is not None and re.search(pattern, value) is None:
        why = f" ({schema['description']})" if "description" in schema else ""
        raise ArgumentError(f"{where}: {path} does not match {pattern}{why}.")
    if isinstance(value, int | float) and not isinstance(value, bool):
        _check_bounds(where, path, schema, value)
    if isinstance(value, list):
        _check_array(where, path, schema, value)
    if isinstance(value, dict):
        _check_object(where, path, schema, value, skip or {})


def _check_type(where: str, path: str, kind: str | list[str], value: Any) -> None:
    kinds = [kind] if isinstance(kind, str) else list(kind)
    for name in kinds:
        python, _ = KINDS[name]
        if isinstance(value, bool) and name != "boolean":
            continue  # a boolean is not a number here, as in JSON
        if isinstance(value, python):
            if name == "integer" and isinstance(value, float) and not value.is_integer():
                continue
            return
    what = " or ".join(KINDS[name][1] for name in kinds)
    given = "a boolean" if isinstance(value, bool) else type(value).__name__
    raise ArgumentError(f"{where}: {path} must be {what}, not {given}.")


def _check_bounds(where: str, path: str, schema: JSONObject, value: float) -> None:
    low: Any = schema.get("minimum")
    high: Any = schema.get("maximum")
    if (low is None or value >= low) and (high is None or value <= high):
        return
    if low is None:
        bound = f"at most {_number(high)}"
    elif high is None:
        bound = f"at least {_number(low)}"
    else:
        bound = f"between {_number(low)} and {_number(high)}"
    raise ArgumentError(f"{where}: {path} must be {bound}, not {_number(value)}.")


def _check_array(where: str, path: str, schema: JSONObject, value: list[Any]) -> None:
    most = schema.get("maxItems")
    if most is not None and len(value) > most:
        raise ArgumentError(f"{where}: {path} has {len(value)} entries; the most is {most}.")
    items = schema.get("items")
    if items is not None:
        for index, item in enumerate(value):
            _check(where, f"{path}[{index}]", items, item)


def _check_object(
    where: str,
    path: str,
    schema: JSONObject,
    value: JSONObject,
    skip: Mapping[str, PropertyCheck],
) -> None:
    properties: JSONObject = schema.get("properties", {})
    extra = schema.get("additionalProperties", True)
    place = f"{where}: {path}" if path else where
    if extra is False:
        unknown = sorted(set(value) - set(properties))
        if unknown:
            raise ArgumentError(
                f"{place}: unknown {noun(len(unknown), 'argument')} "
                f"{', '.join(map(repr, unknown))}. "
                f"Known: {', '.join(properties)}."
            )
    required: list[str] = schema.get("required", [])
    missing = [name for name in required if name not in value]
    if missing and not path:
        name = missing[0]
        about = properties.get(name, {}).get("description")
        raise ArgumentError(
            f"{where}: the argument {name!r} is missing." + (f" {name}: {about}" if about else "")
        )
    if missing:
        raise ArgumentError(
            f"{place} needs {_join(required)}; {_join([repr(m) for m in missing])} "
            f"{'is' if len(missing) == 1 else 'are'} missing."
        )
    most = schema.get("maxProperties")
    if most is not None and len(value) > most:
        raise ArgumentError(f"{place} has {len(value)} entries; the most is {most}.")
    names = schema.get("propertyNames")
    for key in value:
        if names is not None:
            pattern = names.get("pattern")
            if pattern is not None and re.search(pattern, key) is None:
                raise ArgumentError(f"{place} name {key!r} is not usable: it must match {pattern}.")
    for name, subschema in properties.items():
        if name in value and name not in skip:
            _check(where, _at(path, name), subschema, value[name])
    if isinstance(extra, dict):
        for key, item in value.items():
            if key not in properties:
                _check(where, f"{path}[{key!r}]", extra, item)
