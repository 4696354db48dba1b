"""The one limit table drives the CLI's flags, the API's keywords and the MCP schema."""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import typing

import jsonschema
import pytest

from pybox._core.errors import InvalidRequest
from pybox._core.limit_surfaces import (
    LIMIT_KEYWORDS,
    LIMIT_SYNONYMS,
    api_limits_doc,
    cli_limit_fields,
    limit_request_from_keywords,
    limits_json_schema,
)
from pybox._core.limits import (
    BUILTIN_CEILINGS,
    BUILTIN_DEFAULTS,
    KIB,
    LIMIT_FIELDS,
    MIB,
    LimitRequest,
    Policy,
)
from pybox._frontends import api
from pybox._frontends.cli import _exec, _repair
from pybox._frontends.cli._argparse_private import options_of
from pybox._frontends.cli._common import ArgumentParser

# -- the CLI --------------------------------------------------------------------------


def test_exec_flags_are_the_tables() -> None:
    assert {f.flag: (f.key, f.help) for f in LIMIT_FIELDS if f.flag} == _exec.LIMIT_FLAGS
    # Today's seven flags; the other three limits are the operator's on the command line.
    assert list(_exec.LIMIT_FLAGS) == [
        "--timeout",
        "--memory",
        "--cpus",
        "--pids",
        "--open-files",
        "--writable",
        "--output-limit",
    ]
    assert all(f.help for f in LIMIT_FIELDS)


def _parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(prog="pybox exec")
    _exec.add_limit_flags(parser)
    return parser


def test_every_flag_has_its_help_unit_and_default() -> None:
    text = " ".join(_parser().format_help().split())
    for field in cli_limit_fields():
        assert f"{field.flag} {field.unit.upper()} {field.help}" in text  # the unit is the metavar
    assert "--memory MIB memory limit in MiB (swap is never allowed) (default: 512 MiB, " in text


def test_flag_values_convert_to_base_units_through_the_table() -> None:
    args = _parser().parse_args(
        ["--timeout", "2.5", "--memory", "256", "--output-limit", "64", "--cpus", "0.5"]
    )
    assert _exec.limit_request(args) == LimitRequest(
        timeout_s=2.5, memory_bytes=256 * MIB, output_bytes=64 * KIB, cpus=0.5
    )


def test_repair_takes_the_same_limit_flags() -> None:
    parser = ArgumentParser(prog="pybox")
    commands = parser.add_subparsers()
    _repair.register(commands)
    repair = commands.choices["repair"]
    flags = set(options_of(repair))
    assert set(_exec.LIMIT_FLAGS) <= flags


# -- the API --------------------------------------------------------------------------


def test_the_api_typeddict_matches_the_table() -> None:
    """LimitOptions is written out for type checkers: same names, order and types."""
    hints = typing.get_type_hints(api.LimitOptions)
    assert list(hints) == [f.attr for f in LIMIT_FIELDS] == list(LIMIT_KEYWORDS)
    for field in LIMIT_FIELDS:
        expected = int | None if field.integral else float | None
        assert hints[field.attr] == expected, field.attr
    assert [f.name for f in dataclasses.fields(LimitRequest)] == list(LIMIT_KEYWORDS)


def test_client_run_shows_every_limit_with_its_unit() -> None:
    parameters = inspect.signature(api.Client.run).parameters
    for field in LIMIT_FIELDS:
        assert parameters[field.attr].kind is inspect.Parameter.KEYWORD_ONLY
        assert parameters[field.attr].default is None
    doc = inspect.getdoc(api.Client.run) or ""
    assert "memory_bytes: memory, in bytes (config: memory_mib, in MiB)" in doc
    assert "timeout_s: wall-clock time, in seconds" in doc
    assert api_limits_doc().count("\n") == len(LIMIT_FIELDS) - 1


def test_api_keywords_parse_through_the_table() -> None:
    request = limit_request_from_keywords({"memory_bytes": 64 * MIB, "input_bytes": None})
    assert request == LimitRequest(memory_bytes=64 * MIB)
    every = {f.attr: 1 for f in LIMIT_FIELDS}
    assert limit_request_from_keywords(every) == LimitRequest(**every)


def test_unknown_api_keywords_are_refused_with_the_known_ones() -> None:
    with pytest.raises(InvalidRequest, match=r"Unknown option.*memory_mb.*memory_bytes"):
        limit_request_from_keywords({"memory_mb": 64})


# -- the MCP schema -------------------------------------------------------------------


def test_the_schema_offers_every_limit_with_default_ceiling_and_minimum() -> None:
    policy = Policy().with_settings({"memory_mib": 256}, {"memory_mib": 1024}, "test")
    schema = limits_json_schema(policy.defaults, policy.ceilings)
    assert schema["type"] == "object" and schema["additionalProperties"] is False
    properties = schema["properties"]
    for field in LIMIT_FIELDS:
        entry = properties[field.key]
        assert entry["type"] == ("integer" if field.integral else "number")
        assert entry["minimum"] == field.minimum
        assert field.unit in entry["description"]
    assert properties["memory_mib"]["description"] == (
        "memory in MiB: default 256 MiB, at most 1024 MiB"
    )
    offered = {s.key for s in LIMIT_SYNONYMS if s.divisor is not None}
    refused = {s.key for s in LIMIT_SYNONYMS if s.divisor is None}
    assert offered <= set(properties) and not refused & set(properties)


def test_the_schema_accepts_what_pybox_takes_and_refuses_the_rest() -> None:
    schema = limits_json_schema(BUILTIN_DEFAULTS, BUILTIN_CEILINGS)
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    validator.validate({"memory_mib": 256, "timeout_s": 2.5, "timeout_ms": 1500})
    for bad in ({"memory_mib": "256"}, {"memory_mib": 1.5}, {"pids": 2}, {"memory_mb": 256}):
        with pytest.raises(jsonschema.ValidationError):
            validator.validate(bad)
