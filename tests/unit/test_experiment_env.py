"""Environment variables that cross into an experiment: named only, never credentials."""

from __future__ import annotations

import pytest

from pybox._core.errors import EnvRefused, RequestRejected
from pybox._features.experiments.env_policy import resolve_env

HOST = {"CI": "true", "GITHUB_TOKEN": "ghp_supersecret", "HOME": "/home/me", "EMPTY": ""}


def test_a_name_forwards_the_host_value_and_a_literal_is_injected() -> None:
    env = resolve_env(["CI", "NODE_ENV=test", "EMPTY", "X=a=b"], HOST)
    assert env.names == ("CI", "NODE_ENV", "EMPTY", "X")
    assert dict(env.values) == {"CI": "true", "NODE_ENV": "test", "EMPTY": "", "X": "a=b"}
    assert env.pairs()[1] == ("NODE_ENV", "test")
    assert resolve_env(None, HOST).names == () == resolve_env([], HOST).names


def test_values_never_appear_in_a_repr() -> None:
    env = resolve_env(["CI", "MY_VAR=hunter2"], HOST)
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
        resolve_env(specs, HOST)
    assert isinstance(caught.value, RequestRejected)
    for secret in ("ghp_supersecret", "/evil", "u:p@h", "hunter", "secret'"):
        assert secret not in str(caught.value)


def test_the_operator_may_allow_credential_names_but_never_pybox_s_own() -> None:
    env = resolve_env(["GITHUB_TOKEN"], HOST, allow_credential_names=True)
    assert env.values["GITHUB_TOKEN"] == "ghp_supersecret"
    with pytest.raises(EnvRefused, match="PATH"):
        resolve_env(["PATH=/x"], HOST, allow_credential_names=True)
