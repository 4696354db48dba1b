"""The arguments of the tools that start a run (run_python, start_run).

`run_input_schema` is what `tools/list` shows and what calls are checked
against (see `_schema`); `limit_request` checks the `limits` object itself,
because agents bring limit keys from other sandboxes (see `LIMIT_SYNONYMS`) and
a value below a minimum is pybox's refusal, not a malformed call; and
`run_request` turns checked arguments into the `RunRequest` the session
prepares.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from pybox._core.display import noun
from pybox._core.errors import ConfigError, InvalidRequest
from pybox._core.limit_surfaces import canonical_limit_keys, limits_json_schema
from pybox._core.limits import (
    FIELDS_BY_KEY,
    LIMIT_FIELDS,
    LimitRequest,
    Limits,
    parse_user_value,
)
from pybox._core.posture import INPUT_DIR, OUTPUT_DIR, WORK_DIR
from pybox._core.request import ENV_NAME_RE, MAX_INPUTS, InputFile, RunRequest
from pybox._frontends.mcp._protocol import ArgumentError, JSONObject

MAX_ENV_VARS = 256
NO_NUL = r"^[^\x00]*$"


def limit_request(where: str, raw: Any) -> LimitRequest:
    """The `limits` argument in base units. A malformed object is an ArgumentError;
    a value below its minimum is InvalidRequest (an isError result)."""
    if not isinstance(raw, dict):
        given = "a boolean" if isinstance(raw, bool) else type(raw).__name__
        raise ArgumentError(f"{where}: limits must be an object, not {given}.")
    try:
        # Keys agents bring from other sandboxes: converted when their unit is exact,
        # refused with pybox's key named when it is not (see LIMIT_SYNONYMS).
        canonical = canonical_limit_keys(raw, f"{where}: limits")
    except InvalidRequest as exc:
        raise ArgumentError(str(exc)) from None
    known = tuple(f.key for f in LIMIT_FIELDS)
    unknown = sorted(set(canonical) - set(known))
    if unknown:
        raise ArgumentError(
            f"{where}: limits: unknown {noun(len(unknown), 'argument')} "
            f"{', '.join(map(repr, unknown))}. "
            f"Known: {', '.join(known)}."
        )
    values: dict[str, float | int] = {}
    for key, value in canonical.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            given = "a boolean" if isinstance(value, bool) else type(value).__name__
            raise ArgumentError(f"{where}: limits.{key} must be a number, not {given}.")
        try:
            values[FIELDS_BY_KEY[key].attr] = parse_user_value(key, value, f"limits.{key}")
        except ConfigError as exc:
            # Below a minimum or not whole: the agent reads why and asks again.
            raise InvalidRequest(str(exc)) from None
    return LimitRequest(**values)  # type: ignore[arg-type]


def _input_file(where: str, index: int, item: JSONObject) -> InputFile:
    content: str = item["content"]
    if item.get("encoding", "utf-8") == "utf-8":
        return InputFile(item["name"], content.encode("utf-8", "surrogatepass"))
    try:
        return InputFile(item["name"], base64.b64decode(content, validate=True))
    except (binascii.Error, ValueError) as exc:
        raise ArgumentError(
            f"{where}: files[{index}].content is not valid base64 ({exc})."
        ) from None


def run_request(where: str, args: JSONObject) -> RunRequest:
    """The run request from arguments `check_arguments` passed (limits already a
    LimitRequest). ArgumentError for content that does not decode."""
    files = tuple(_input_file(where, i, item) for i, item in enumerate(args.get("files", [])))
    return RunRequest(
        code=args["code"].encode("utf-8", "surrogatepass"),
        inputs=files,
        limits=args.get("limits", LimitRequest()),
        image=args.get("image", "stdlib"),
        collect_outputs=args.get("return_files", False),
        env=tuple(args.get("env", {}).items()),
    )


def run_input_schema(defaults: Limits, ceilings: Limits, images: list[str]) -> JSONObject:
    return {
        "type": "object",
        "additionalProperties": False,
        "required": ["code"],
        "properties": {
            "code": {
                "type": "string",
                "description": f"The Python program (saved as {WORK_DIR}/main.py, run with "
                "the image's python3).",
            },
            "files": {
                "type": "array",
                "maxItems": MAX_INPUTS,
                "description": f"Files the program can read, read-only, in {INPUT_DIR} "
                "($PYBOX_INPUT_DIR) and next to the program by their plain names: "
                "open('data.csv') reads one, and a .py file imports (import helper).",
                "items": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["name", "content"],
                    "properties": {
                        "name": {"type": "string", "description": "a plain file name"},
                        "content": {"type": "string"},
                        "encoding": {"type": "string", "enum": ["utf-8", "base64"]},
                    },
                },
            },
            "image": {
                "type": "string",
                "description": f"The image to run in; one of: {', '.join(images) or 'none'}. "
                "Default stdlib.",
            },
            "limits": limits_json_schema(defaults, ceilings),
            "env": {
                "type": "object",
                "maxProperties": MAX_ENV_VARS,
                "propertyNames": {"pattern": f"^{ENV_NAME_RE.pattern}$"},
                "additionalProperties": {
                    "type": "string",
                    "pattern": NO_NUL,
                    "description": "a value without NUL characters",
                },
                "description": "Environment variables for the program (NAME: VALUE). "
                "Names that look like credentials are refused: the box is for "
                "untrusted code.",
            },
            "return_files": {
                "type": "boolean",
                "description": f"Return the files the program leaves in {OUTPUT_DIR} "
                "($PYBOX_OUTPUT_DIR) as resources. Default false.",
            },
        },
    }


RUN_CHECKS = {"limits": limit_request}
