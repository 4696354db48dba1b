"""Limits and the operator policy: defaults filled, ceilings enforced, never clamped."""

from __future__ import annotations

import dataclasses
import math

import pytest

from pybox._core.errors import ConfigError, InvalidRequest, LimitExceeded, RequestRejected
from pybox._core.limits import (
    BUILTIN_CEILINGS,
    BUILTIN_DEFAULTS,
    FIELDS_BY_ATTR,
    FIELDS_BY_KEY,
    KIB,
    LIMIT_FIELDS,
    MIB,
    LimitField,
    LimitRequest,
    Limits,
    Policy,
    parse_user_value,
)
from pybox._core.repair import REPAIR_FIELDS

FIELD_IDS = [f.key for f in LIMIT_FIELDS]


def request_with(attr: str, value: object) -> LimitRequest:
    return LimitRequest(**{attr: value})  # type: ignore[arg-type]


# --- the field table ----------------------------------------------------------


def test_field_table_covers_every_limit_once() -> None:
    attrs = [f.attr for f in LIMIT_FIELDS]
    limit_attrs = [f.name for f in dataclasses.fields(Limits)]
    request_attrs = [f.name for f in dataclasses.fields(LimitRequest)]
    assert sorted(attrs) == sorted(limit_attrs) == sorted(request_attrs)
    assert len(set(attrs)) == len(attrs)
    assert len({f.key for f in LIMIT_FIELDS}) == len(LIMIT_FIELDS)
    assert set(FIELDS_BY_ATTR) == set(attrs)


def test_builtin_defaults_are_within_builtin_ceilings() -> None:
    for field in LIMIT_FIELDS:
        default = getattr(BUILTIN_DEFAULTS, field.attr)
        assert default <= getattr(BUILTIN_CEILINGS, field.attr), field.attr
        assert default >= field.to_base(field.minimum), field.attr


def test_describe_uses_user_units() -> None:
    memory = FIELDS_BY_KEY["memory_mib"]
    assert memory.describe(512 * MIB) == "512 MiB"
    assert memory.describe(MIB + MIB // 2) == "1.5 MiB"
    assert FIELDS_BY_KEY["output_kib"].describe(64 * KIB) == "64 KiB"
    assert FIELDS_BY_KEY["timeout_s"].describe(2.5) == "2.5 s"
    assert FIELDS_BY_KEY["cpus"].describe(2.0) == "2 CPUs"


def test_to_base_keeps_integral_fields_integral() -> None:
    memory = FIELDS_BY_KEY["memory_mib"]
    value = memory.to_base(3)
    assert value == 3 * MIB
    assert isinstance(value, int)
    timeout = FIELDS_BY_KEY["timeout_s"].to_base(3)
    assert timeout == 3.0
    assert isinstance(timeout, float)


# --- Policy.resolve -----------------------------------------------------------


def test_resolve_empty_request_gives_the_defaults() -> None:
    assert Policy().resolve(LimitRequest()) == BUILTIN_DEFAULTS


def test_resolve_fills_only_the_missing_values_from_defaults() -> None:
    limits = Policy().resolve(LimitRequest(memory_bytes=256 * MIB, timeout_s=5))
    assert limits.memory_bytes == 256 * MIB
    assert limits.timeout_s == 5
    assert limits.cpus == BUILTIN_DEFAULTS.cpus
    assert limits.pids == BUILTIN_DEFAULTS.pids
    assert limits.input_bytes == BUILTIN_DEFAULTS.input_bytes


def test_resolve_uses_the_policy_defaults_not_the_builtin_ones() -> None:
    defaults = dataclasses.replace(BUILTIN_DEFAULTS, memory_bytes=100 * MIB, pids=64)
    limits = Policy(defaults=defaults).resolve(LimitRequest())
    assert limits.memory_bytes == 100 * MIB
    assert limits.pids == 64


@pytest.mark.parametrize("field", LIMIT_FIELDS, ids=FIELD_IDS)
def test_resolve_accepts_exactly_the_ceiling(field: LimitField) -> None:
    ceiling = getattr(BUILTIN_CEILINGS, field.attr)
    limits = Policy().resolve(request_with(field.attr, ceiling))
    assert getattr(limits, field.attr) == ceiling


@pytest.mark.parametrize("field", LIMIT_FIELDS, ids=FIELD_IDS)
def test_resolve_accepts_exactly_the_minimum(field: LimitField) -> None:
    minimum = field.to_base(field.minimum)
    limits = Policy().resolve(request_with(field.attr, minimum))
    assert getattr(limits, field.attr) == minimum


@pytest.mark.parametrize("field", LIMIT_FIELDS, ids=FIELD_IDS)
def test_resolve_refuses_above_every_ceiling(field: LimitField) -> None:
    ceiling = getattr(BUILTIN_CEILINGS, field.attr)
    asked = ceiling * 2 if field.integral else ceiling + 0.5
    with pytest.raises(LimitExceeded) as info:
        Policy().resolve(request_with(field.attr, asked))
    message = str(info.value)
    assert f"Requested {field.amount(asked)};" in message
    assert f"the maximum is {field.describe(ceiling)}" in message
    assert f"ceilings.{field.key}" in message


@pytest.mark.parametrize("field", [*LIMIT_FIELDS, *REPAIR_FIELDS], ids=lambda f: f.key)
def test_a_refusal_names_the_thing_once(field: LimitField) -> None:
    """Never "512 processes of processes" or "100 rounds of repair rounds"."""
    for asked in (field.to_base(field.minimum) + field.scale, field.scale):
        requested = field.amount(asked)
        words = requested.split()
        assert len(words) == len(set(words)), requested
        assert words[0] == f"{field.to_user(asked):g}"
        if field.to_user(asked) == 1 and field.unit_one:
            assert field.unit not in words, requested  # "1 process", "1 repair round"


def test_refusal_wording_for_counted_limits() -> None:
    with pytest.raises(LimitExceeded, match=r"^Requested 8192 processes; the maximum is 4096"):
        Policy().resolve(LimitRequest(pids=8192))
    with pytest.raises(LimitExceeded, match=r"^Requested 8192 open files; the maximum is 4096"):
        Policy().resolve(LimitRequest(open_files=8192))
    with pytest.raises(LimitExceeded, match=r"^Requested 8 CPUs; the maximum is 4 CPUs"):
        Policy().resolve(LimitRequest(cpus=8.0))
    with pytest.raises(ConfigError, match=r"^The default of 5000 processes is above its ceiling"):
        Policy().with_settings({"pids": 5000}, {}, "test")


def test_resolve_memory_message_names_value_and_ceiling_in_mib() -> None:
    with pytest.raises(LimitExceeded) as info:
        Policy().resolve(LimitRequest(memory_bytes=32768 * MIB))
    assert "Requested 32768 MiB of memory; the maximum is 8192 MiB" in str(info.value)
    assert "ceilings.memory_mib" in str(info.value)


def test_resolve_timeout_message_uses_seconds() -> None:
    with pytest.raises(LimitExceeded) as info:
        Policy().resolve(LimitRequest(timeout_s=7200.5))
    assert "Requested 7200.5 s of wall-clock time; the maximum is 3600 s" in str(info.value)


def test_resolve_never_clamps_just_above_the_ceiling() -> None:
    with pytest.raises(LimitExceeded):
        Policy().resolve(LimitRequest(memory_bytes=8192 * MIB + 1))
    with pytest.raises(LimitExceeded):
        Policy().resolve(LimitRequest(cpus=4.000001))


def test_resolve_enforces_the_policy_ceiling_not_the_builtin_one() -> None:
    policy = Policy().with_settings({}, {"memory_mib": 256}, "test")
    with pytest.raises(LimitExceeded) as info:
        policy.resolve(LimitRequest(memory_bytes=512 * MIB))
    assert "Requested 512 MiB of memory; the maximum is 256 MiB" in str(info.value)


def test_limit_exceeded_is_a_rejection_but_not_an_invalid_request() -> None:
    with pytest.raises(RequestRejected) as info:
        Policy().resolve(LimitRequest(pids=100_000))
    assert isinstance(info.value, LimitExceeded)
    assert not isinstance(info.value, InvalidRequest)


def test_resolve_below_minimum_is_invalid_and_names_the_minimum() -> None:
    with pytest.raises(InvalidRequest) as info:
        Policy().resolve(LimitRequest(memory_bytes=8 * MIB))
    assert "Requested 8 MiB of memory; the minimum is 16 MiB" in str(info.value)
    with pytest.raises(InvalidRequest) as info:
        Policy().resolve(LimitRequest(timeout_s=0.05))
    assert "the minimum is 0.1 s" in str(info.value)
    with pytest.raises(InvalidRequest):
        Policy().resolve(LimitRequest(pids=7))


@pytest.mark.parametrize("field", LIMIT_FIELDS, ids=FIELD_IDS)
def test_resolve_refuses_negative_values(field: LimitField) -> None:
    with pytest.raises(InvalidRequest):
        Policy().resolve(request_with(field.attr, -1))


def test_resolve_zero_is_allowed_where_the_minimum_is_zero() -> None:
    limits = Policy().resolve(LimitRequest(output_files=0, output_files_bytes=0))
    assert limits.output_files == 0
    assert limits.output_files_bytes == 0


@pytest.mark.parametrize("value", [True, False, "512", b"1", 1j, [1], {"a": 1}], ids=repr)
def test_resolve_refuses_non_numbers(value: object) -> None:
    with pytest.raises(InvalidRequest) as info:
        Policy().resolve(request_with("memory_bytes", value))
    assert "must be a number" in str(info.value)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf], ids=repr)
@pytest.mark.parametrize("attr", ["timeout_s", "memory_bytes", "cpus"])
def test_resolve_refuses_non_finite_numbers(attr: str, value: float) -> None:
    with pytest.raises(InvalidRequest) as info:
        Policy().resolve(request_with(attr, value))
    assert "finite" in str(info.value)


def test_resolve_refuses_fractional_values_for_integral_fields() -> None:
    with pytest.raises(InvalidRequest) as info:
        Policy().resolve(LimitRequest(pids=64.5))  # type: ignore[arg-type]
    assert "whole number" in str(info.value)
    with pytest.raises(InvalidRequest):
        Policy().resolve(LimitRequest(memory_bytes=float(64 * MIB) + 0.5))  # type: ignore[arg-type]


def test_resolve_accepts_integer_valued_floats_for_integral_fields_as_ints() -> None:
    limits = Policy().resolve(LimitRequest(memory_bytes=float(64 * MIB), pids=64.0))  # type: ignore[arg-type]
    assert limits.memory_bytes == 64 * MIB
    assert isinstance(limits.memory_bytes, int)
    assert isinstance(limits.pids, int)


def test_resolve_accepts_ints_for_float_fields() -> None:
    limits = Policy().resolve(LimitRequest(timeout_s=10, cpus=2))
    assert limits.timeout_s == 10.0
    assert limits.cpus == 2.0


def test_policy_refuses_defaults_above_ceilings() -> None:
    defaults = dataclasses.replace(BUILTIN_DEFAULTS, memory_bytes=16384 * MIB)
    with pytest.raises(ConfigError) as info:
        Policy(defaults=defaults)
    message = str(info.value)
    assert "16384 MiB" in message
    assert "8192 MiB" in message
    assert "defaults.memory_mib" in message


def test_policy_to_dict_has_both_layers() -> None:
    data = Policy().to_dict()
    assert data["defaults"]["memory_bytes"] == 512 * MIB
    assert data["ceilings"]["memory_bytes"] == 8192 * MIB


# --- Policy.with_settings -----------------------------------------------------


def test_with_settings_takes_user_units() -> None:
    policy = Policy().with_settings(
        {"memory_mib": 256, "timeout_s": 2.5, "output_kib": 16},
        {"memory_mib": 1024, "writable_mib": 128},
        "test",
    )
    assert policy.defaults.memory_bytes == 256 * MIB
    assert policy.defaults.timeout_s == 2.5
    assert policy.defaults.output_bytes == 16 * KIB
    assert policy.ceilings.memory_bytes == 1024 * MIB
    assert policy.ceilings.writable_bytes == 128 * MIB


def test_with_settings_does_not_modify_the_original_policy() -> None:
    original = Policy()
    original.with_settings({"pids": 10}, {"pids": 20}, "test")
    assert original.defaults == BUILTIN_DEFAULTS
    assert original.ceilings == BUILTIN_CEILINGS


def test_with_settings_lowering_a_ceiling_lowers_a_default_not_set_explicitly() -> None:
    policy = Policy().with_settings({}, {"memory_mib": 256}, "test")
    assert policy.ceilings.memory_bytes == 256 * MIB
    assert policy.defaults.memory_bytes == 256 * MIB


def test_with_settings_lowering_a_ceiling_keeps_a_lower_default() -> None:
    policy = Policy().with_settings({}, {"memory_mib": 1024}, "test")
    assert policy.defaults.memory_bytes == BUILTIN_DEFAULTS.memory_bytes


def test_with_settings_raising_a_ceiling_leaves_the_default() -> None:
    policy = Policy().with_settings({}, {"timeout_s": 7200}, "test")
    assert policy.ceilings.timeout_s == 7200
    assert policy.defaults.timeout_s == BUILTIN_DEFAULTS.timeout_s


def test_with_settings_explicit_default_below_lowered_ceiling_is_kept() -> None:
    policy = Policy().with_settings({"memory_mib": 100}, {"memory_mib": 256}, "test")
    assert policy.defaults.memory_bytes == 100 * MIB


def test_with_settings_explicit_default_above_ceiling_is_a_config_error() -> None:
    with pytest.raises(ConfigError) as info:
        Policy().with_settings({"memory_mib": 512}, {"memory_mib": 256}, "test")
    assert "512 MiB" in str(info.value)
    assert "256 MiB" in str(info.value)


def test_with_settings_explicit_default_above_existing_ceiling_is_a_config_error() -> None:
    with pytest.raises(ConfigError) as info:
        Policy().with_settings({"cpus": 8}, {}, "test")
    assert "8 CPUs" in str(info.value)
    assert "4 CPUs" in str(info.value)


def test_with_settings_unknown_default_key_is_a_config_error() -> None:
    with pytest.raises(ConfigError) as info:
        Policy().with_settings({"memory_gib": 1}, {}, "file.toml")
    assert "memory_gib" in str(info.value)
    assert "memory_mib" in str(info.value)  # the known keys are listed


def test_with_settings_unknown_ceiling_key_is_a_config_error() -> None:
    with pytest.raises(ConfigError):
        Policy().with_settings({}, {"memory_bytes": 1}, "file.toml")


def test_with_settings_bad_value_names_where_it_came_from() -> None:
    with pytest.raises(ConfigError) as info:
        Policy().with_settings({"pids": "many"}, {}, "/etc/pybox.toml")
    assert str(info.value).startswith("/etc/pybox.toml:")
    assert "pids" in str(info.value)


def test_with_settings_accepts_strings_from_the_environment() -> None:
    policy = Policy().with_settings({"cpus": "0.5"}, {"pids": "512"}, "environment")
    assert policy.defaults.cpus == 0.5
    assert policy.ceilings.pids == 512


# --- parse_user_value ---------------------------------------------------------


def test_parse_int_string_into_base_units() -> None:
    value = parse_user_value("memory_mib", "256", "env")
    assert value == 256 * MIB
    assert isinstance(value, int)


def test_parse_float_string() -> None:
    assert parse_user_value("timeout_s", "2.5", "env") == 2.5
    assert parse_user_value("cpus", "1e0", "env") == 1.0


def test_parse_exponent_string_for_integral_field() -> None:
    assert parse_user_value("memory_mib", "1E3", "env") == 1000 * MIB


def test_parse_plain_numbers() -> None:
    assert parse_user_value("pids", 64, "file") == 64
    assert parse_user_value("timeout_s", 10, "file") == 10.0
    assert isinstance(parse_user_value("timeout_s", 10, "file"), float)
    assert parse_user_value("memory_mib", 64.0, "file") == 64 * MIB


def test_parse_whitespace_around_string_is_tolerated() -> None:
    assert parse_user_value("pids", " 64 ", "env") == 64


@pytest.mark.parametrize("raw", ["", "abc", "12abc", "0x10", "inf", "nan", "1.2.3"])
def test_parse_non_number_strings_are_config_errors(raw: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_user_value("pids", raw, "PYBOX_MAX_PIDS")
    assert "PYBOX_MAX_PIDS" in str(info.value)


def test_parse_infinite_float_string_is_a_config_error() -> None:
    with pytest.raises(ConfigError) as info:
        parse_user_value("timeout_s", "1e999", "env")
    assert "finite" in str(info.value)


@pytest.mark.parametrize("raw", [True, None, [1], {"x": 1}], ids=repr)
def test_parse_non_number_values_are_config_errors(raw: object) -> None:
    with pytest.raises(ConfigError) as info:
        parse_user_value("memory_mib", raw, "file.toml")
    assert "must be a number" in str(info.value)


@pytest.mark.parametrize("raw", [math.nan, math.inf])
def test_parse_non_finite_floats_are_config_errors(raw: float) -> None:
    with pytest.raises(ConfigError):
        parse_user_value("timeout_s", raw, "file.toml")


def test_parse_fraction_for_integral_field_is_a_config_error() -> None:
    with pytest.raises(ConfigError) as info:
        parse_user_value("memory_mib", "1.5", "env")
    assert "whole number of MiB" in str(info.value)
    with pytest.raises(ConfigError):
        parse_user_value("pids", 9.5, "file")


def test_parse_below_minimum_is_a_config_error() -> None:
    with pytest.raises(ConfigError) as info:
        parse_user_value("memory_mib", 8, "file.toml")
    assert "below the minimum of 16 MiB" in str(info.value)
    with pytest.raises(ConfigError):
        parse_user_value("output_files", "-1", "env")


def test_parse_zero_is_fine_where_the_minimum_is_zero() -> None:
    assert parse_user_value("output_files", "0", "env") == 0


def test_parse_unknown_key_lists_the_known_ones() -> None:
    with pytest.raises(ConfigError) as info:
        parse_user_value("memory", 1, "file.toml")
    message = str(info.value)
    assert "'memory'" in message
    for key in FIELDS_BY_KEY:
        assert key in message
