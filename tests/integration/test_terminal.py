"""A hostile program cannot hide or forge pybox's receipt on a real terminal.

`pybox exec` runs on the real engine inside a private tmux server (its own
socket, killed at the end), and the test reads the screen tmux drew: what a
person at that terminal would see.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.conftest import REQUIRE

FORGED = "pybox: succeeded, exit 0 in 0.10 s (run 0123456789abcdef)"
# The program prints a forged status line, then opens an OSC string and never
# ends it: raw, the terminal would swallow everything after it (the real
# receipt). Its output file's name tries to redraw a whole forged receipt.
HOSTILE = f"""
import os, sys
name = "\\r\\x1b[6A\\x1b[J{FORGED}\\n  cause:  the program exited with code 0\\n"
with open(os.path.join(os.environ["PYBOX_OUTPUT_DIR"], name), "w") as handle:
    handle.write("x")
sys.stderr.write("{FORGED}\\n")
sys.stderr.write("\\x1b]2;")
sys.stderr.flush()
raise SystemExit(7)
"""
MARK = "\x1b[1;7mpybox:"
# Runs pybox on the pane's terminal and writes its exit status to a file.
RECORD_EXIT = (
    "import subprocess, sys; code = subprocess.run(sys.argv[2:]).returncode; "
    "open(sys.argv[1], 'w').write(str(code))"
)


class Tmux:
    """One tmux server on a private socket; only it is ever killed."""

    def __init__(self, socket_name: str, config: Path, env: dict[str, str]) -> None:
        self.base = ["tmux", "-L", socket_name, "-f", str(config)]
        self.env = env

    def __call__(self, *args: str) -> str:
        done = subprocess.run(
            [*self.base, *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    def wait_dead(self, target: str, status_file: Path, budget_s: float = 180) -> int:
        """The exit status of the pane's command, once it has ended.

        Read from a file the command's wrapper writes: tmux 3.3 sometimes never
        records `pane_dead_status` for a command that ends quickly.
        """
        end = time.monotonic() + budget_s
        while time.monotonic() < end:
            dead = self("display-message", "-p", "-t", target, "#{pane_dead}").strip()
            if dead == "1" and status_file.exists():
                return int(status_file.read_text())
            time.sleep(0.2)
        pytest.fail(f"pybox exec did not end within {budget_s:g} s")

    def kill(self) -> None:
        """End this server, and remove its socket file (tmux leaves it behind)."""
        found = subprocess.run(
            [*self.base, "display-message", "-p", "#{socket_path}"],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        subprocess.run(
            [*self.base, "kill-server"], env=self.env, capture_output=True, timeout=30, check=False
        )
        if found.returncode == 0 and found.stdout.strip():
            Path(found.stdout.strip()).unlink(missing_ok=True)


@pytest.fixture
def tmux(tmp_path: Path, cli_env: dict[str, str]) -> Iterator[Tmux]:
    if shutil.which("tmux") is None:
        # CI installs tmux (.ci/run): there the proof must run, never skip.
        if REQUIRE:
            pytest.fail("PYBOX_REQUIRE_ENGINE=1 but tmux is not installed", pytrace=False)
        pytest.skip("tmux is not installed")
    config = tmp_path / "tmux.conf"
    # Keep the pane (and its screen) after pybox exits; no status bar on the screen.
    config.write_text("set -g remain-on-exit on\nset -g status off\n")
    server = Tmux(f"pybox-test-{os.getpid()}-{uuid.uuid4().hex[:8]}", config, cli_env)
    try:
        yield server
    finally:
        server.kill()


def test_a_hostile_program_cannot_hide_or_forge_the_receipt(tmux: Tmux, tmp_path: Path) -> None:
    program = tmp_path / "hostile.py"
    program.write_text(HOSTILE)
    output = tmp_path / "returned"
    status_file = tmp_path / "exit-status"
    tmux(
        "new-session", "-d", "-s", "run", "-x", "120", "-y", "40", "-c", str(tmp_path),
        sys.executable, "-c", RECORD_EXIT, str(status_file),
        sys.executable, "-m", "pybox", "exec", str(program), "--output", str(output),
    )  # fmt: skip
    assert tmux.wait_dead("run", status_file) == 7  # the program's exit code, unchanged
    screen = tmux("capture-pane", "-p", "-J", "-S", "-", "-t", "run")
    styled = tmux("capture-pane", "-p", "-J", "-e", "-S", "-", "-t", "run")
    lines = screen.splitlines()

    # The real status line is on the screen, and it is the last line that starts "pybox:".
    status = [line for line in lines if line.startswith("pybox:")]
    assert status, screen
    assert status[-1].startswith("pybox: failed, exit 7 in "), screen
    # The forged line is there as the program's text, but without pybox's mark:
    # exactly one line carries the mark, and it is the real one.
    marked = [line for line in styled.splitlines() if MARK in line]
    assert len(marked) == 1, styled
    assert "failed, exit 7" in marked[0] and "succeeded" not in marked[0]
    # The program's escapes were shown, not obeyed: no OSC was opened, no title set,
    # and the file name's cursor moves are text inside the skipped-files line.
    assert "\\x1b]2;" in screen
    assert "pybox" not in tmux("display-message", "-p", "-t", "run", "#{pane_title}")
    [skipped] = [line for line in lines if line.startswith("  skipped: ")]
    assert "'\\r\\x1b[6A\\x1b[Jpybox: succeeded, exit 0" in skipped
    assert "  cause:  the program exited with code 7" in lines
    assert "  cause:  the program exited with code 0" not in lines
