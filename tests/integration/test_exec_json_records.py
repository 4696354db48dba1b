"""What `pybox exec --json` prints in the cases docs/receipt.md describes, on the
real engine: a stopped run still prints its record, and `output_dir` is absolute."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from pybox._engine import Engine
from tests.integration.test_limits_and_leftovers import (
    _running_program,
    _wait_for_box,
    _wait_for_program,
)


def _default_sigint() -> None:
    # A shell started in the background ignores SIGINT, and children inherit that;
    # a terminal's Ctrl-C reaches a pybox whose SIGINT is the default.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_stopped_run_still_prints_its_json_record(
    engine: Engine, cli_env: dict[str, str], tmp_path: Path, signum: int
) -> None:
    marker = f"pybox-test-{uuid.uuid4().hex}"
    code = "print('before the stop', flush=True)\n" + _running_program(marker)
    controller = subprocess.Popen(
        [sys.executable, "-m", "pybox", "exec", "-", "--json", "--output", "out"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=cli_env,
        cwd=tmp_path,
        preexec_fn=_default_sigint,  # noqa: PLW1509 - only resets one signal before exec
    )
    assert controller.stdin is not None
    controller.stdin.write(code.encode())
    controller.stdin.close()
    controller.stdin = None
    box = _wait_for_box(engine, controller.pid)
    _wait_for_program(marker)
    os.kill(controller.pid, signum)
    out, err = controller.communicate(timeout=30)
    assert controller.returncode == 130, err.decode()
    record = json.loads(out)
    assert record["status"] == "stopped"
    assert record["exit_code"] is None
    assert record["receipt"]["observed_by_pybox"]["cancelled"] is True
    assert record["stdout"] == "before the stop\n"
    # The folder as an absolute path, not as given ("out").
    assert record["output_dir"] == str(tmp_path / "out")
    assert engine.inspect_container(str(box["Id"])) is None
