"""The Python API's surface, without an engine."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

import pybox
from pybox import Client, run_container
from pybox._adapters.state import StateStore
from pybox._frontends.api import RunOptions
from tests.unit.fake_engine import FakeEngine


def test_run_options_match_client_run() -> None:
    parameters = inspect.signature(Client.run).parameters
    keyword_only = [name for name, p in parameters.items() if p.kind is p.KEYWORD_ONLY]
    assert keyword_only == list(RunOptions.__annotations__)


def test_run_container_is_public() -> None:
    assert pybox.run_container is run_container
    assert "run_container" in pybox.__all__


def test_repair_options_match_client_repair() -> None:
    from pybox._frontends.api import LimitOptions, RepairOptions

    parameters = inspect.signature(Client.repair).parameters
    keyword_only = [n for n, p in parameters.items() if p.kind is p.KEYWORD_ONLY]
    assert keyword_only[:2] == ["goal", "model"]
    assert sorted(keyword_only[2:]) == sorted(
        set(RepairOptions.__annotations__) - set(LimitOptions.__annotations__)
    )
    assert "repair" in pybox.__all__ and pybox.repair is not None


def test_repair_refuses_unknown_options(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PYBOX_STATE_DIR", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.delenv("PYBOX_CONFIG", raising=False)
    with pytest.raises(pybox.InvalidRequest, match="Unknown option"):
        Client(warm_pool=False).repair("print(1)", goal="exit0", model="llm", network="host")  # type: ignore[call-arg]
    with pytest.raises(pybox.InvalidRequest, match="goal must be a RepairGoal"):
        Client(warm_pool=False).repair("print(1)", goal="pass", model="llm")


def test_every_limit_is_a_keyword_of_run_and_repair() -> None:
    from pybox._core.limits import LIMIT_FIELDS
    from pybox._frontends.api import LimitOptions

    attrs = [field.attr for field in LIMIT_FIELDS]
    assert len(attrs) == 10
    assert list(LimitOptions.__annotations__) == attrs
    run_keywords = inspect.signature(Client.run).parameters
    assert all(run_keywords[a].kind is inspect.Parameter.KEYWORD_ONLY for a in attrs)


def test_run_takes_argv_stdin_and_env() -> None:
    parameters = inspect.signature(Client.run).parameters
    assert {"argv", "stdin", "env"} <= set(parameters)


def test_env_accepts_a_mapping_or_pairs() -> None:
    from pybox._core.errors import InvalidRequest
    from pybox._frontends.api._options import _env

    assert _env({"A": "1", "B": "2"}) == (("A", "1"), ("B", "2"))
    assert _env([("A", "1")]) == (("A", "1"),)
    assert _env(None) == ()
    with pytest.raises(InvalidRequest):
        _env(["A=1"])  # type: ignore[list-item]


def test_every_error_pybox_raises_is_public() -> None:
    """A caller can catch any of pybox's own errors by its public name."""
    import inspect

    from pybox._core import errors

    for name, value in vars(errors).items():
        if inspect.isclass(value) and issubclass(value, errors.PyboxError):
            assert name in pybox.__all__ and getattr(pybox, name) is value, name


def test_an_experiment_forwards_the_callers_own_variables_by_name(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, engine: FakeEngine, state: StateStore
) -> None:
    """The API's caller is the user: a name alone takes its value from the caller's
    environment (issue 29); only the MCP server narrows this to the operator's list."""
    from pybox._orchestration.session import Session
    from tests.unit.test_experiment_tools import SERVER_ENV, Served

    served = Served(engine, state, tmp_path, monkeypatch)
    monkeypatch.setattr(Session, "open", lambda *a, **k: served.session)
    experiment = pybox.Experiment(served.project, env=["REDIS_HOST", "CI", "MODE=test"])
    forwarded = served.experiments._env[experiment.experiment_id]
    assert forwarded == {"REDIS_HOST": SERVER_ENV["REDIS_HOST"], "CI": "true", "MODE": "test"}
    with pytest.raises(pybox.RequestRejected, match="CI_JOB_JWT looks like a credential"):
        pybox.Experiment(served.project, env=["CI_JOB_JWT=eyJ"])
