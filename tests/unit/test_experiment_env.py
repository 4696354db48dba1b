"""Environment variables that cross into an experiment: named only, never credentials,
and a name alone takes a value from pybox's own process only where the front end says."""

from __future__ import annotations

import pytest

from pybox._core.errors import ConfigError, EnvRefused, RequestRejected
from pybox._core.host_env import NOTHING_FROM_HOST, HostEnvPolicy, check_forward_names
from pybox._features.experiments.env_policy import resolve_env

HOST = {"CI": "true", "GITHUB_TOKEN": "ghp_supersecret", "HOME": "/home/me", "EMPTY": ""}
OWN = HostEnvPolicy.callers_own()  # the CLI's and the API's: the user's own environment


def test_a_name_forwards_the_host_value_and_a_literal_is_injected() -> None:
    env = resolve_env(["CI", "NODE_ENV=test", "EMPTY", "X=a=b"], HOST, from_host=OWN)
    assert env.names == ("CI", "NODE_ENV", "EMPTY", "X")
    assert dict(env.values) == {"CI": "true", "NODE_ENV": "test", "EMPTY": "", "X": "a=b"}
    assert env.pairs()[1] == ("NODE_ENV", "test")
    assert resolve_env(None, HOST).names == () == resolve_env([], HOST).names


def test_values_never_appear_in_a_repr() -> None:
    env = resolve_env(["CI", "MY_VAR=hunter2"], HOST, from_host=OWN)
    assert "hunter2" not in repr(env) and "true" not in repr(env) and "MY_VAR" in repr(env)


@pytest.mark.parametrize(
    ("specs", "message"),
    [
        ("CI", "must be a list"),
        ([3], "must be a string"),
        (["MISSING"], "MISSING is not set where pybox runs"),
        (["1BAD=x"], "name '1BAD' is not usable"),
        (["=secret"], "name '' is not usable"),
        (["CI", "CI=again"], "CI is named twice"),
        (["PATH=/evil"], "PATH is one pybox sets"),
        (["HOME"], "HOME is one pybox sets"),
        (["LD_PRELOAD=/x.so"], "LD_PRELOAD is one pybox sets"),
        (["PYTHONPATH=/x"], "PYTHONPATH"),
        (["PYBOX_WORK_DIR=/"], "PYBOX_WORK_DIR"),
        (["OMP_NUM_THREADS=64"], "OMP_NUM_THREADS"),
        (["GITHUB_TOKEN"], "looks like a credential"),
        (["AWS_REGION=eu"], "looks like a credential"),
        (["OPENAI_API_KEY=sk"], "looks like a credential"),
        (["DB_PASSWORD=pw"], "looks like a credential"),
        (["DATABASE_URL=postgres://u:p@h/d"], "looks like a credential"),
        (["SENTRY_DSN=https://k@h/1"], "looks like a credential"),
        (["BAD=nul\0byte"], "NUL"),
        ([f"V{i}=x" for i in range(201)], "the most is 200"),
        (["BIG=" + "x" * 200_000], "more than 131072 bytes"),
    ],
)
def test_refusals_name_the_variable_and_never_the_value(specs: object, message: str) -> None:
    with pytest.raises(EnvRefused, match=message) as caught:
        resolve_env(specs, HOST, from_host=OWN)
    assert isinstance(caught.value, RequestRejected)
    for secret in ("ghp_supersecret", "/evil", "u:p@h", "hunter", "secret'"):
        assert secret not in str(caught.value)


def test_the_operator_may_allow_credential_names_but_never_pybox_s_own() -> None:
    env = resolve_env(["GITHUB_TOKEN"], HOST, from_host=OWN, allow_credential_names=True)
    assert env.values["GITHUB_TOKEN"] == "ghp_supersecret"
    with pytest.raises(EnvRefused, match="PATH"):
        resolve_env(["PATH=/x"], HOST, allow_credential_names=True)


# --- whose environment a name alone reads (issue 29, finding 1) ---------------------

SERVER = {"MYSQL_PWD": "s3rver-pw", "REDIS_HOST": "cache.internal", "CI": "true"}
LISTED = HostEnvPolicy.operator_listed(["REDIS_HOST"])  # an MCP server's


@pytest.mark.parametrize("name", ["MYSQL_PWD", "CI", "NOT_SET_ANYWHERE"])
def test_an_mcp_server_takes_no_name_its_operator_did_not_list(name: str) -> None:
    with pytest.raises(EnvRefused) as caught:
        resolve_env([name], SERVER, from_host=LISTED)
    message = str(caught.value)
    assert f'forward_env = ["{name}"]' in message and f"--forward-env {name}" in message
    assert f"{name}=value" in message
    assert "s3rver-pw" not in message and "true" not in message
    # Set or not on the server, the same words: an agent cannot probe the environment.
    assert message == LISTED.refusal(name)


def test_a_listed_name_forwards_and_a_value_from_the_agent_stays_allowed() -> None:
    env = resolve_env(["REDIS_HOST", "MYSQL_HOST=db", "CI=false"], SERVER, from_host=LISTED)
    assert dict(env.values) == {"REDIS_HOST": "cache.internal", "MYSQL_HOST": "db", "CI": "false"}


def test_a_listed_credential_still_needs_allow_credential_env() -> None:
    listed = HostEnvPolicy.operator_listed(["MYSQL_PWD"])
    with pytest.raises(EnvRefused, match="MYSQL_PWD looks like a credential"):
        resolve_env(["MYSQL_PWD"], SERVER, from_host=listed)
    env = resolve_env(["MYSQL_PWD"], SERVER, from_host=listed, allow_credential_names=True)
    assert env.values["MYSQL_PWD"] == "s3rver-pw"


def test_by_default_nothing_comes_from_the_process_and_the_callers_own_is_everything() -> None:
    assert HostEnvPolicy() == NOTHING_FROM_HOST and not NOTHING_FROM_HOST.allows("CI")
    with pytest.raises(EnvRefused, match="forward_env"):
        resolve_env(["CI"], SERVER)
    assert resolve_env(["CI=1"], SERVER).values["CI"] == "1"
    assert resolve_env(["CI"], SERVER, from_host=OWN).values["CI"] == "true"


def test_the_operator_list_holds_variable_names_only() -> None:
    assert check_forward_names(["CI", "REDIS_HOST"], "f") == ("CI", "REDIS_HOST")
    for bad in ("CI", ["1X"], ["A=B"], [3]):
        with pytest.raises(ConfigError, match="forward_env"):
            check_forward_names(bad, "f")


# --- credential-like names and values (issue 29, low) -------------------------------


@pytest.mark.parametrize(
    "spec",
    [
        "DB_PASS=pw",
        "SMTP_PASS=pw",
        "CI_JOB_JWT=eyJhbGciOi",
        "MYSQL_PWD=pw",
        "PWD_FILE=pw",
        "SENTRY_DSN=https://k@h/1",
        "APP_DSN=x",
        "GH_PAT=x",
        "HTTP_BEARER=x",
        "STORAGE_CONNECTION_STRING=x",
    ],
)
def test_credential_like_names_are_refused(spec: str) -> None:
    name = spec.partition("=")[0]
    with pytest.raises(EnvRefused, match=f"{name} looks like a credential.*allow_credential_env"):
        resolve_env([spec], HOST)
    assert resolve_env([spec], HOST, allow_credential_names=True).names == (name,)


@pytest.mark.parametrize(
    ("spec", "secret"),
    [
        ("REDIS_URL=redis://:hunter2@cache:6379/0", "hunter2"),
        ("PIP_INDEX_URL=https://__token__:pypi-AgEIcHlwaS5vcmc@index.example/simple", "AgEI"),
        ("BROKER=amqp://guest:guestpw@rabbit//", "guestpw"),
        ("REPO_URL=https://ghp_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa@git.example/x.git", "ghp_"),
    ],
)
def test_a_url_with_a_password_or_token_is_refused_by_name_never_shown(
    spec: str, secret: str
) -> None:
    name, _, value = spec.partition("=")
    for specs, host in (([spec], HOST), ([name], {name: value})):
        with pytest.raises(EnvRefused, match=f"{name} looks like a credential: its value") as c:
            resolve_env(specs, host, from_host=OWN)
        assert secret not in str(c.value) and value not in str(c.value)
    allowed = resolve_env([spec], HOST, allow_credential_names=True)
    assert allowed.values[name] == value


@pytest.mark.parametrize(
    "spec",
    [
        "PWD=/work",  # the shell's own folder, not a password
        "OLDPWD=/",
        "BYPASS_CACHE=1",
        "PASSTHROUGH=1",
        "COMPASS_HEADING=N",
        "PATTERN=*.py",
        "REDIS_URL=redis://cache:6379/0",
        "GIT_URL=ssh://git@git.example/x.git",
        "DOCS_URL=https://user@docs.example/",
        "PAGE=https://docs.example/a@b",
    ],
)
def test_harmless_names_and_urls_pass(spec: str) -> None:
    name, _, value = spec.partition("=")
    assert resolve_env([spec], HOST).values[name] == value
