"""The Python API's surface, without an engine."""

from __future__ import annotations

import inspect

import pybox
from pybox import Client, run_container
from pybox._frontends.api import RunOptions


def test_run_options_match_client_run() -> None:
    parameters = inspect.signature(Client.run).parameters
    keyword_only = [name for name, p in parameters.items() if p.kind is p.KEYWORD_ONLY]
    assert keyword_only == list(RunOptions.__annotations__)


def test_run_container_is_public() -> None:
    assert pybox.run_container is run_container
    assert "run_container" in pybox.__all__
