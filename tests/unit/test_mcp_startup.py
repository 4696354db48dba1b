"""What `pybox mcp` checks before it serves: the images it may offer, the machine's size."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pybox._adapters.state import StateStore
from pybox._core.errors import ConfigError, EngineUnavailable
from pybox._core.limits import MIB, Policy
from pybox._frontends.mcp import ServerOptions, _fit_machine
from pybox._frontends.mcp._startup import Machine, check_images, machine_fit
from pybox._orchestration.session import Session
from tests.unit.conftest import make_session
from tests.unit.fake_engine import FakeEngine
from tests.unit.mcp_harness import Peer


def pybox(state: StateStore, *args: str) -> subprocess.CompletedProcess[bytes]:
    env = {
        "PATH": os.environ.get("PATH", ""),
        "PYBOX_STATE_DIR": str(state.root),
        "XDG_CONFIG_HOME": str(state.root),
        "DOCKER_HOST": "unix:///nonexistent/docker.sock",  # no engine is touched
    }
    return subprocess.run(
        [sys.executable, "-m", "pybox", *args],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        check=False,
        timeout=60,
    )


def test_an_image_that_is_not_recorded_stops_the_server_before_it_starts(
    state: StateStore,
) -> None:
    done = pybox(state, "mcp", "--images", "stdlib,nosuch")
    assert done.returncode == 2, done.stderr
    assert done.stdout == b""
    err = done.stderr.decode()
    assert "--images: no image 'nosuch' is recorded" in err and "(recorded: stdlib)" in err
    assert "serving" not in err  # nothing was started


def test_check_images() -> None:
    check_images(None, [], "here")
    check_images(("stdlib",), ["stdlib", "sci"], "here")
    with pytest.raises(ConfigError, match="names no image"):
        check_images((), ["stdlib"], "here")
    with pytest.raises(ConfigError, match="no image 'a', 'b' is recorded in here"):
        check_images(("a", "stdlib", "b"), ["stdlib"], "here")


# -- the engine's machine ---------------------------------------------------------------------


def test_a_default_above_the_machine_is_a_problem_a_ceiling_a_warning() -> None:
    policy = Policy()  # defaults 512 MiB, 1 CPU; ceilings 8192 MiB, 4 CPUs
    problems, warnings = machine_fit(policy, Machine(cpus=2, memory_bytes=4096 * MIB))
    assert problems == []
    assert len(warnings) == 2
    assert "memory ceiling (8192 MiB)" in warnings[0] and "4096 MiB" in warnings[0]
    assert "--max-memory" in warnings[0]
    assert "cpus ceiling (4 CPUs)" in warnings[1] and "--max-cpus" in warnings[1]
    problems, _ = machine_fit(policy, Machine(cpus=8, memory_bytes=256 * MIB))
    [problem] = problems
    assert "default memory (512 MiB)" in problem and "256 MiB" in problem
    assert "--default-memory" in problem
    assert machine_fit(policy, Machine(cpus=None, memory_bytes=None)) == ([], [])
    assert machine_fit(policy, Machine(cpus=16, memory_bytes=64 * 1024 * MIB)) == ([], [])


class SizedEngine(FakeEngine):
    def __init__(self, cpus: int, memory_bytes: int) -> None:
        super().__init__()
        self.ncpu = cpus
        self.memory_bytes = memory_bytes

    def info(self) -> dict[str, Any]:
        return {**super().info(), "MemTotal": self.memory_bytes}


def test_the_server_refuses_defaults_the_machine_cannot_give(state: StateStore) -> None:
    engine = SizedEngine(cpus=1, memory_bytes=8192 * MIB)
    policy = Policy().with_settings({"cpus": 2}, {}, "test")
    with pytest.raises(ConfigError, match=r"default cpus \(2 CPUs\).*\(1 CPU, engine-observed\)"):
        _fit_machine(make_session(engine, state, policy), ServerOptions())
    assert not engine.containers


def test_the_server_warns_and_refuses_runs_above_the_machines_memory(
    state: StateStore, capsys: pytest.CaptureFixture[str]
) -> None:
    engine = SizedEngine(cpus=4, memory_bytes=1024 * MIB)
    session = make_session(engine, state)
    options = _fit_machine(session, ServerOptions())
    assert options.machine_memory_bytes == 1024 * MIB
    assert "warning: the memory ceiling (8192 MiB)" in capsys.readouterr().err
    peer = Peer(session, options)
    result = peer.call("run_python", {"code": "", "limits": {"memory_mib": 2048}})["result"]
    assert result["isError"] is True
    assert "the engine's machine has only 1024 MiB" in result["content"][0]["text"]
    assert not engine.containers
    fits = peer.call("run_python", {"code": "", "limits": {"memory_mib": 1024}})["result"]
    assert fits["isError"] is False, fits


def test_an_engine_not_reachable_at_start_is_not_fatal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def down() -> Any:
        raise EngineUnavailable("no engine here")

    session = Session(down, StateStore(tmp_path), Policy())
    assert _fit_machine(session, ServerOptions()) == ServerOptions()
    assert "limits not checked" in capsys.readouterr().err
