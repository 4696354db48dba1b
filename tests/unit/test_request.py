"""Run requests are checked before anything is created."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import pytest

from pybox._core.errors import InvalidRequest
from pybox._core.limits import BUILTIN_DEFAULTS, MIB, Limits
from pybox._core.request import (
    MAX_ARGS,
    MAX_ARGS_BYTES,
    MAX_ENV,
    MAX_ENV_BYTES,
    MAX_INPUTS,
    MAX_NAME_BYTES,
    InputFile,
    RunRequest,
    check_input_name,
    check_request,
)

LIMITS = BUILTIN_DEFAULTS


def limits(**changes: Any) -> Limits:
    return dataclasses.replace(BUILTIN_DEFAULTS, **changes)


def request(**changes: Any) -> RunRequest:
    return dataclasses.replace(RunRequest(code=b"print('hi')\n"), **changes)


def test_a_plain_request_passes() -> None:
    check_request(request(), LIMITS)


def test_a_request_with_inputs_passes() -> None:
    inputs = (InputFile("data.csv", b"a,b\n"), InputFile("notes", b""), InputFile(".hidden", b"x"))
    check_request(request(inputs=inputs, code_name="my-prog_2.v1.py"), LIMITS)


# --- the code and its name ---------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["main.py", "a.py", "_x.py", "9lives.py", "a-b.c_d.py", "x" * 100 + ".py"],
)
def test_good_code_names(name: str) -> None:
    check_request(request(code_name=name), LIMITS)


@pytest.mark.parametrize(
    "name",
    [
        "",
        "main",
        "main.txt",
        "main.pyc",
        ".py",
        ".main.py",
        "-main.py",
        "dir/main.py",
        "../main.py",
        "/main.py",
        "a\\b.py",
        "ma in.py",
        "mäin.py",
        "main.py ",
        "\nmain.py",
        "ma\x00in.py",
        "x" * 101 + ".py",
    ],
)
def test_bad_code_names_are_refused(name: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        check_request(request(code_name=name), LIMITS)
    assert repr(name) in str(info.value)
    assert "main.py" in str(info.value)  # the example of a good name


def test_code_name_with_a_trailing_newline_is_refused() -> None:
    with pytest.raises(InvalidRequest):
        check_request(request(code_name="main.py\n"), LIMITS)


def test_code_name_that_is_not_a_string_is_refused() -> None:
    with pytest.raises(InvalidRequest):
        check_request(request(code_name=123), LIMITS)


@pytest.mark.parametrize("code", ["print(1)", bytearray(b"print(1)"), None, memoryview(b"x")])
def test_code_must_be_bytes(code: object) -> None:
    with pytest.raises(InvalidRequest) as info:
        check_request(request(code=code), LIMITS)
    assert type(code).__name__ in str(info.value)


def test_empty_code_is_allowed() -> None:
    check_request(request(code=b""), LIMITS)


# --- the image name -------------------------------------------------------------------


@pytest.mark.parametrize("image", ["", "Stdlib", "std lib", "../x", "-x", 5, None])
def test_bad_image_names_are_refused(image: object) -> None:
    with pytest.raises(InvalidRequest) as info:
        check_request(request(image=image), LIMITS)
    assert "Image name" in str(info.value)


def test_image_name_with_a_trailing_newline_is_refused() -> None:
    with pytest.raises(InvalidRequest):
        check_request(request(image="stdlib\n"), LIMITS)


# --- input names -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["a", "data.csv", "...", ".hidden", "with space", "naïve☃", "x" * MAX_NAME_BYTES]
)
def test_good_input_names(name: str) -> None:
    assert check_input_name(name) == name


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("", "empty or a dot entry"),
        (".", "empty or a dot entry"),
        ("..", "empty or a dot entry"),
        ("a/b", "path separator"),
        ("/etc", "path separator"),
        ("../x", "path separator"),
        ("a\\b", "path separator"),
        ("a\x00b", "control characters"),
        ("a\nb", "control characters"),
        ("tab\t", "control characters"),
        ("del\x7f", "control characters"),
        ("esc\x1b[31m", "control characters"),
        ("c1\x85", "control characters"),
        ("ok\u202etxt.exe", "bidirectional or invisible format characters"),
        ("\u061cx", "bidirectional or invisible format characters"),
        ("bom\ufeff", "bidirectional or invisible format characters"),
        ("x" * (MAX_NAME_BYTES + 1), f"longer than {MAX_NAME_BYTES} bytes"),
        ("é" * 128, f"longer than {MAX_NAME_BYTES} bytes"),  # 256 bytes in UTF-8
    ],
)
def test_bad_input_names(name: str, problem: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        check_input_name(name)
    assert problem in str(info.value)
    assert repr(name) in str(info.value)


@pytest.mark.parametrize("name", [None, 1, b"bytes", ["a"]])
def test_input_name_must_be_a_string(name: object) -> None:
    with pytest.raises(InvalidRequest) as info:
        check_input_name(name)
    assert type(name).__name__ in str(info.value)


def test_bad_input_name_in_a_request_is_refused() -> None:
    with pytest.raises(InvalidRequest) as info:
        check_request(request(inputs=(InputFile("ok", b""), InputFile("../etc", b""))), LIMITS)
    assert "'../etc'" in str(info.value)


def test_input_data_must_be_bytes() -> None:
    with pytest.raises(InvalidRequest) as info:
        check_request(request(inputs=(InputFile("a.txt", "text"),)), LIMITS)  # type: ignore[arg-type]
    assert "'a.txt'" in str(info.value)
    assert "str" in str(info.value)


def test_duplicate_input_names_are_refused() -> None:
    inputs = (InputFile("a.txt", b"1"), InputFile("b.txt", b"2"), InputFile("a.txt", b"3"))
    with pytest.raises(InvalidRequest) as info:
        check_request(request(inputs=inputs), LIMITS)
    assert "'a.txt' is given twice" in str(info.value)


def test_names_differing_only_in_case_are_distinct() -> None:
    check_request(request(inputs=(InputFile("A", b""), InputFile("a", b""))), LIMITS)


def test_too_many_inputs() -> None:
    inputs = tuple(InputFile(f"f{i}", b"") for i in range(MAX_INPUTS + 1))
    with pytest.raises(InvalidRequest) as info:
        check_request(request(inputs=inputs), LIMITS)
    assert f"{MAX_INPUTS + 1} input files" in str(info.value)
    check_request(request(inputs=inputs[:MAX_INPUTS]), LIMITS)


# --- sizes -----------------------------------------------------------------------------


def test_total_size_exactly_at_input_bytes_passes() -> None:
    lim = limits(input_bytes=1000, writable_bytes=2000)
    check_request(request(code=b"c" * 400, inputs=(InputFile("a", b"a" * 600),)), lim)


def test_total_size_over_input_bytes_is_refused() -> None:
    lim = limits(input_bytes=1000, writable_bytes=10_000)
    with pytest.raises(InvalidRequest) as info:
        check_request(request(code=b"c" * 400, inputs=(InputFile("a", b"a" * 601),)), lim)
    message = str(info.value)
    assert "1001 bytes" in message
    assert "the maximum is 1000 bytes" in message
    assert "input_mib" in message


def test_code_alone_counts_toward_input_bytes() -> None:
    with pytest.raises(InvalidRequest):
        check_request(request(code=b"x" * 101), limits(input_bytes=100))


def test_total_over_half_the_writable_space_is_refused() -> None:
    lim = limits(input_bytes=10 * MIB, writable_bytes=1000)
    check_request(request(code=b"c" * 500), lim)
    with pytest.raises(InvalidRequest) as info:
        check_request(request(code=b"c" * 250, inputs=(InputFile("a", b"a" * 251),)), lim)
    message = str(info.value)
    assert "501 bytes" in message
    assert "half" in message
    assert "1000 bytes" in message
    assert "writable_mib" in message


def test_half_of_an_odd_writable_space_rounds_down() -> None:
    lim = limits(input_bytes=10 * MIB, writable_bytes=1001)
    check_request(request(code=b"c" * 500), lim)
    with pytest.raises(InvalidRequest):
        check_request(request(code=b"c" * 501), lim)


def test_bad_request_changes_nothing() -> None:
    original = request(inputs=(InputFile("a", b"1"), InputFile("a", b"2")))
    snapshot = dataclasses.replace(original)
    with pytest.raises(InvalidRequest):
        check_request(original, LIMITS)
    assert original == snapshot


# --- the program's arguments, environment variables and stdin -------------------------


def test_arguments_env_and_stdin_pass() -> None:
    check_request(
        request(
            argv=("a", "b c", "", "--flag"), env=(("GREETING", "hi\tthere\n"),), stdin_bytes=b"x"
        ),
        LIMITS,
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ("a b", "must be a sequence"),
        (("a\0b",), "NUL"),
        ((1,), "must be strings"),
        (("x",) * (MAX_ARGS + 1), f"the most is {MAX_ARGS}"),
        (("x" * MAX_ARGS_BYTES,), "Pass large data as an input file"),
    ],
    ids=["string", "nul", "not-str", "too-many", "too-big"],
)
def test_bad_arguments_are_refused(argv: object, message: str) -> None:
    with pytest.raises(InvalidRequest, match=message):
        check_request(request(argv=argv), LIMITS)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ((("1ABC", "x"),), "not usable"),
        ((("A-B", "x"),), "not usable"),
        ((("A=B", "x"),), "not usable"),
        ((("", "x"),), "not usable"),
        ((("A" * 129, "x"),), "not usable"),
        ((("A", "x\0y"),), "without NUL"),
        ((("A", 1),), "without NUL"),
        ((("A", "1"), ("A", "2")), "given twice"),
        ((("PYBOX_OUTPUT_DIR", "/"),), "pybox's own"),
        ((("A", "x" * MAX_ENV_BYTES),), "Pass large data"),
        (tuple((f"V{i}", "x") for i in range(MAX_ENV + 1)), f"the most is {MAX_ENV}"),
        (("A=1",), "must be a \\(name, value\\) pair"),
    ],
    ids=repr,
)
def test_bad_environment_variables_are_refused(env: object, message: str) -> None:
    with pytest.raises(InvalidRequest, match=message):
        check_request(request(env=env), LIMITS)


@pytest.mark.parametrize(
    "name",
    [
        "GITHUB_TOKEN",
        "api_key",
        "DB_PASSWORD",
        "MY_SECRET",
        "AWS_REGION",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "HTTP_AUTHORIZATION",
        "SSH_AUTH_SOCK",
        "DATABASE_URL",
        "SENTRY_DSN",
        "DB_PASS",
        "CI_JOB_JWT",
        "MYSQL_PWD",
        "APP_DSN",
        "GITLAB_PAT",
        "ADO_PAT",
    ],
)
def test_credential_shaped_names_need_the_operator(name: str) -> None:
    with pytest.raises(InvalidRequest, match=r"looks like a credential.*allow_credential_env"):
        check_request(request(env=((name, "x"),)), LIMITS)
    check_request(request(env=((name, "x"),)), LIMITS, allow_credential_env=True)


@pytest.mark.parametrize(
    "name",
    [
        "GREETING", "MODE", "LANG", "PYTHONHASHSEED", "N_ROWS",
        "PWD", "OLDPWD", "BYPASS", "PASSTHROUGH", "COMPASS", "PATH_EXTRA", "PATTERN",
    ],
)  # fmt: skip
def test_ordinary_names_pass(name: str) -> None:
    check_request(request(env=((name, "x"),)), LIMITS)


@pytest.mark.parametrize(
    "value",
    [
        "redis://:hunter2@cache:6379/0",
        "https://__token__:pypi-AgEIcHlwaS5vcmc@index.example/simple",
        "postgres://app:hunter2@db/app?sslmode=require",
        "see https://ghp_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa@git.example/x.git",
    ],
)
def test_a_url_with_a_password_or_token_needs_the_operator_whatever_its_name(value: str) -> None:
    with pytest.raises(InvalidRequest, match=r"CACHE_URL looks like a credential: its value") as c:
        check_request(request(env=(("CACHE_URL", value),)), LIMITS)
    assert value not in str(c.value) and "hunter2" not in str(c.value)
    check_request(request(env=(("CACHE_URL", value),)), LIMITS, allow_credential_env=True)


@pytest.mark.parametrize(
    "value",
    ["redis://cache:6379/0", "ssh://git@git.example/x.git", "https://a.example/x@y", "a:b@c"],
)
def test_urls_without_credentials_pass(value: str) -> None:
    check_request(request(env=(("CACHE_URL", value),)), LIMITS)


def test_the_url_check_is_linear_in_the_value() -> None:
    from pybox._core.request import value_has_url_credentials

    # A backtracking pattern took minutes on a 128 KiB value of letters.
    started = time.monotonic()
    for value in ("x" * 120_000, "a:" * 60_000, "://" * 40_000, "a://" + "b" * 120_000):
        assert value_has_url_credentials(value) is False
    assert time.monotonic() - started < 2.0


def test_stdin_must_be_bytes_and_counts_as_input() -> None:
    with pytest.raises(InvalidRequest, match="stdin must be bytes"):
        check_request(request(stdin_bytes="text"), LIMITS)
    with pytest.raises(InvalidRequest, match="code, inputs and stdin are"):
        check_request(request(stdin_bytes=b"x" * (2 * MIB)), limits(input_bytes=2 * MIB))


def test_an_input_cannot_take_the_programs_name() -> None:
    with pytest.raises(InvalidRequest, match="the program's own name"):
        check_request(request(code_name="job.py", inputs=(InputFile("job.py", b""),)), LIMITS)
