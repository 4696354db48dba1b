"""`pybox mcp` operator flags and `pybox config --client`, without an engine."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from pybox._adapters.state import StateStore
from pybox._core.errors import ConfigError, LimitExceeded
from pybox._core.request import RunRequest
from pybox._frontends import cli
from pybox._frontends.mcp import ServerOptions, operator_environ, register
from pybox._frontends.mcp._runs import Run, RunRegistry
from pybox._orchestration.session import Session
from tests.unit.conftest import make_session
from tests.unit.fake_engine import FakeEngine, Script
from tests.unit.mcp_harness import Peer


def parse(argv: list[str]) -> argparse.Namespace:
    return cli.build_parser([register]).parse_args(argv)


def test_operator_flags_become_ceilings_and_defaults(tmp_path: Path) -> None:
    args = parse(["mcp", "--max-memory", "256", "--max-timeout", "120", "--default-timeout", "5"])
    environ = {
        "PYBOX_MAX_MEMORY_MIB": "4096",
        "PYBOX_STATE_DIR": str(tmp_path),
        "XDG_CONFIG_HOME": str(tmp_path),
    }
    env = operator_environ(args, environ)
    session = Session.open(env, None)
    policy = session.policy
    assert policy.ceilings.memory_bytes == 256 * 2**20  # the flag wins over the environment
    assert policy.defaults.memory_bytes == 256 * 2**20  # a default never exceeds its ceiling
    assert policy.ceilings.timeout_s == 120 and policy.defaults.timeout_s == 5


def test_images_flag_limits_what_an_agent_may_name(engine: FakeEngine, state: StateStore) -> None:
    peer = Peer(make_session(engine, state), ServerOptions(images=("python-sci",)))
    result = peer.call("run_python", {"code": "", "image": "stdlib"})["result"]
    assert result["isError"] is True and "not available" in result["content"][0]["text"]
    assert not engine.calls
    tools = peer.request("tools/list")["result"]["tools"]
    assert "none recorded" in tools[0]["description"]


def test_too_many_runs_at_once_is_refused(engine: FakeEngine, state: StateStore) -> None:
    engine.script = Script(hang=True)
    peer = Peer(make_session(engine, state), ServerOptions(max_running=1))
    first = peer.call("start_run", {"code": ""})["result"]
    assert first["isError"] is False
    second = peer.call("start_run", {"code": ""})["result"]
    assert second["isError"] is True and "at most 1 at once" in second["content"][0]["text"]
    run_id = first["structuredContent"]["run_id"]
    assert peer.call("stop_run", {"run_id": run_id})["result"]["structuredContent"]["state"] == (
        "finished"
    )


@pytest.mark.parametrize("client", ["claude-code", "claude-desktop", "cursor", "vscode"])
def test_config_prints_only_the_config(client: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pybox", "config", "--client", client, "--format", "json"],
        capture_output=True,
        check=True,
        timeout=60,
    )
    data = json.loads(done.stdout)  # stdout holds the configuration and nothing else
    servers = data["servers"] if client == "vscode" else data["mcpServers"]
    entry = servers["pybox"]
    assert entry["command"] == sys.executable
    assert entry["args"] == ["-m", "pybox", "mcp"]
    assert done.stderr.startswith(b"pybox: ")


def test_config_for_claude_code_is_a_command_line() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pybox",
            "config",
            "--client",
            "claude-code",
            "--server-arg=--max-memory=256",
        ],
        capture_output=True,
        check=True,
        timeout=60,
        # Without variables to carry (they would come as --env options).
        env={k: v for k, v in os.environ.items() if not k.startswith(("PYBOX_", "DOCKER_"))},
    )
    line = done.stdout.decode()
    assert line.startswith("claude mcp add --scope user pybox -- ")
    assert line.rstrip().endswith("-m pybox mcp --max-memory=256")


def test_config_refuses_an_unknown_client() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pybox", "config", "--client", "emacs"],
        capture_output=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 2 and done.stdout == b""
    assert b"invalid choice" in done.stderr


def test_a_bad_operator_flag_is_named() -> None:
    args = parse(["mcp", "--max-memory", "lots"])
    with pytest.raises(ConfigError, match="--max-memory"):
        operator_environ(args, {})


def test_simultaneous_starts_never_exceed_the_cap(engine: FakeEngine, state: StateStore) -> None:
    """The cap is checked where the run is registered, under one lock."""
    engine.script = Script(hang=True)
    session = make_session(engine, state)
    registry = RunRegistry(session)
    prepared = [session.prepare(RunRequest(code=b"")) for _ in range(8)]
    barrier = threading.Barrier(8)
    started: list[Run] = []
    refused: list[LimitExceeded] = []

    def start(index: int) -> None:
        barrier.wait()
        try:
            started.append(registry.start(prepared[index], max_running=2))
        except LimitExceeded as exc:
            refused.append(exc)

    threads = [threading.Thread(target=start, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        assert len(started) == 2 and len(refused) == 6
    finally:
        registry.close()
    assert engine.containers == {}
