"""`pybox mcp --http` beyond loopback says, before it serves, that its traffic is
plain HTTP on every interface; on loopback it says nothing of the kind. The
servers are started as an operator would start them and stopped by their pid; the
test connects to nothing."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.test_mcp import server_env

TOKEN = "exposure-test-token-" + "z" * 24


def start_and_read_until_listening(state_dir: Path, engine_name: str, address: str) -> list[str]:
    """What the server printed up to the line that says where it listens."""
    env = {**server_env(state_dir, engine_name), "PYBOX_MCP_TOKEN": TOKEN}
    process = subprocess.Popen(
        [sys.executable, "-m", "pybox", "mcp", "--http", address],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert process.stderr is not None
    lines: list[str] = []
    try:
        for _ in range(40):
            line = process.stderr.readline().decode(errors="replace")
            if not line:
                break
            lines.append(line)
            if re.search(r"at http://[^ ]+:\d+/mcp", line):
                break
    finally:
        process.terminate()
        process.wait(timeout=60)
    assert any(re.search(r"at http://[^ ]+:\d+/mcp", line) for line in lines), lines
    return lines


@pytest.mark.usefixtures("engine")
def test_every_interface_is_warned_about_before_serving(state_dir: Path, engine_name: str) -> None:
    lines = start_and_read_until_listening(state_dir, engine_name, "0.0.0.0:0")
    warning = [line for line in lines if "serving plain HTTP on every interface" in line]
    assert warning, lines
    assert "unencrypted" in warning[0] and "SSH tunnel or a TLS proxy" in warning[0]
    assert "Traceback" not in "".join(lines)


@pytest.mark.usefixtures("engine")
def test_loopback_gets_no_such_warning(state_dir: Path, engine_name: str) -> None:
    lines = start_and_read_until_listening(state_dir, engine_name, "127.0.0.1:0")
    assert not [line for line in lines if "plain HTTP" in line], lines
