"""What `pybox mcp` checks before it serves: the images it may offer, the machine's size."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pybox._adapters.state import StateStore
from pybox._core.errors import ConfigError, EngineUnavailable
from pybox._core.limits import MIB, Policy
from pybox._frontends import cli
from pybox._frontends.mcp import ServerOptions, _fit_machine, register
from pybox._frontends.mcp._startup import Machine, check_images, machine_fit
from pybox._orchestration.session import Session
from tests.unit.conftest import make_session
from tests.unit.fake_engine import FakeEngine
from tests.unit.mcp_harness import MODERN_META, Peer


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


# -- `pybox config --client`: the operator's policy reaches the server ------------------------


def config_env(state: StateStore, **extra: str) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(state.root),
        "XDG_CONFIG_HOME": str(state.root / "xdg"),
        "PYBOX_STATE_DIR": str(state.root),
        **extra,
    }


def pybox_config(env: dict[str, str], *args: str, cwd: Path | None = None) -> Any:
    return subprocess.run(
        [sys.executable, "-m", "pybox", "config", *args],
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        check=False,
        timeout=60,
    )


def test_config_carries_the_config_file_and_the_servers_environment(
    state: StateStore, tmp_path: Path
) -> None:
    (tmp_path / "policy.toml").write_text("[ceilings]\nmemory_mib = 300\n")
    env = config_env(
        state,
        DOCKER_HOST="unix:///nonexistent/docker.sock",
        PYBOX_MAX_TIMEOUT_S="90",
        PYBOX_MCP_TOKEN="secret-token-0123456789",
        UNRELATED="x",
    )
    done = pybox_config(
        env, "--client", "cursor", "--format", "json", "--config", "policy.toml", cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    entry = json.loads(done.stdout)["mcpServers"]["pybox"]
    assert entry["args"] == ["-m", "pybox", "mcp", "--config", str(tmp_path / "policy.toml")]
    assert entry["env"] == {
        "DOCKER_HOST": "unix:///nonexistent/docker.sock",
        "PYBOX_MAX_TIMEOUT_S": "90",
        "PYBOX_STATE_DIR": str(state.root),
    }  # never the HTTP token, nor anything the server does not need

    # The server started as printed runs under that policy.
    server = subprocess.run(
        [entry["command"], *entry["args"]],
        env={"PATH": env["PATH"], "HOME": env["HOME"], **entry["env"]},
        input=json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "resources/read",
                "params": {"_meta": MODERN_META, "uri": "pybox://capabilities"},
            }
        ).encode()
        + b"\n",
        capture_output=True,
        check=False,
        timeout=60,
    )
    assert server.returncode == 0, server.stderr
    reply = json.loads(server.stdout.splitlines()[0])
    capabilities = json.loads(reply["result"]["contents"][0]["text"])
    assert capabilities["limits"]["ceilings"]["memory_mib"] == 300  # from the file
    assert capabilities["limits"]["ceilings"]["timeout_s"] == 90  # from the environment


def test_config_carries_pybox_config_as_an_absolute_path(state: StateStore, tmp_path: Path) -> None:
    (tmp_path / "policy.toml").write_text("[ceilings]\nmemory_mib = 300\n")
    env = config_env(state, PYBOX_CONFIG="policy.toml")
    done = pybox_config(env, "--client", "claude-code", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    words = shlex.split(done.stdout.decode())
    assert words[:7] == [
        "claude",
        "mcp",
        "add",
        "--scope",
        "user",
        "pybox",
        "--env=PYBOX_CONFIG=" + str(tmp_path / "policy.toml"),
    ]
    assert words[7] == f"--env=PYBOX_STATE_DIR={state.root}"
    assert words[8:] == ["--", sys.executable, "-m", "pybox", "mcp"]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--server-arg=--bogus"], "unrecognized arguments: --bogus"),
        (["--server-arg=--max-memory=lots"], "--max-memory"),
        (["--server-arg=--reply-output=0"], "--reply-output must be at least 1"),
        (["--server-arg=--http=127.0.0.1:8765"], "not for a client configuration"),
        (["--server-arg=--config=/etc/x.toml"], "pybox config --config PATH"),
        (["--server-arg=--images=nosuch"], "no image 'nosuch' is recorded"),
        (["--server-arg=--help"], "--help is not a server argument"),
        (["--config", "missing.toml"], "does not exist"),
    ],
)
def test_config_refuses_what_the_server_would_refuse(
    state: StateStore, tmp_path: Path, args: list[str], expected: str
) -> None:
    done = pybox_config(config_env(state), "--client", "vscode", *args, cwd=tmp_path)
    assert done.returncode == 2
    assert done.stdout == b""  # nothing a user could paste
    assert expected in done.stderr.decode()


def test_config_refuses_a_broken_config_file(state: StateStore, tmp_path: Path) -> None:
    (tmp_path / "policy.toml").write_text("[ceilings]\nmemory_mb = 300\n")
    done = pybox_config(
        config_env(state), "--client", "vscode", "--config", "policy.toml", cwd=tmp_path
    )
    assert done.returncode == 2 and done.stdout == b""
    assert "memory_mb" in done.stderr.decode()


def test_pybox_mcp_takes_config_after_the_command_too() -> None:
    parser = cli.build_parser([register])
    assert parser.parse_args(["mcp", "--config", "a.toml"]).config == "a.toml"
    assert parser.parse_args(["--config", "b.toml", "mcp"]).config == "b.toml"
    assert parser.parse_args(["mcp"]).config is None
    assert parser.parse_args(["config", "--client", "cursor", "--config", "c.toml"]).config == (
        "c.toml"
    )


def test_forward_env_is_an_operator_flag_checked_at_start(state: StateStore) -> None:
    parser = cli.build_parser([register])
    parsed = parser.parse_args(["mcp", "--forward-env", "CI", "--forward-env", "REDIS_HOST"])
    assert parsed.forward_env == ["CI", "REDIS_HOST"]
    done = pybox(state, "mcp", "--forward-env", "NOT=NAME")
    assert done.returncode == 2 and done.stdout == b""
    assert "--forward-env: 'NOT=NAME' is not an environment variable name" in done.stderr.decode()
    helped = pybox(state, "mcp", "--help").stdout.decode()
    assert "--forward-env NAME" in helped and "forward_env" in helped
    refused = pybox_config(
        config_env(state), "--client", "vscode", "--server-arg=--forward-env=1X", cwd=state.root
    )
    assert refused.returncode == 2 and b"'1X' is not an environment variable name" in (
        refused.stderr
    )
