"""A `pybox exec` SIGKILLed while it receives the returned files, for real: the
partial, untrusted files it staged beside the destination are never published,
and the next run into that place removes them and says so; the killed run's box
does not outlive it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from pybox._core.posture import LABEL_OWNER
from pybox._engine import Engine
from tests.integration.conftest import boxes, run_cli

JOB = """
import os
out = os.environ["PYBOX_OUTPUT_DIR"]
for i in range(90):
    with open(os.path.join(out, "part-%02d.bin" % i), "wb") as f:
        f.write(os.urandom(640 * 1024))
"""


def _owner(box: dict[str, object]) -> str:
    labels = box.get("Labels")
    return str(labels.get(LABEL_OWNER, "")) if isinstance(labels, dict) else ""


def _staged(folder: Path) -> list[Path]:
    """Staging folders beside the destination that already hold a received file."""
    return [
        path
        for path in folder.glob(".pybox-staging-*")
        if path.is_dir() and any(item.is_file() for item in path.rglob("*"))
    ]


def _kill_during_transfer(cli_env: dict[str, str], folder: Path, job: Path) -> int | None:
    """Start `pybox exec`, SIGKILL it once it has staged a file; its pid, or None
    when the run finished first (a fast machine): then the caller tries again."""
    process = subprocess.Popen(
        [sys.executable, "-m", "pybox", "exec", str(job), "--output", str(folder / "out")],
        env=cli_env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline and process.poll() is None:
            if _staged(folder):
                os.kill(process.pid, signal.SIGKILL)
                process.wait(timeout=30)
                return process.pid
            time.sleep(0.002)
        return None
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=30)


def test_a_pybox_killed_mid_transfer_leaves_nothing_published_and_is_swept(
    cli_env: dict[str, str], tmp_path: Path, engine: Engine
) -> None:
    job = tmp_path / "job.py"
    job.write_text(JOB)
    killed_pid = None
    for attempt in range(5):
        folder = tmp_path / f"try-{attempt}"
        folder.mkdir()
        killed_pid = _kill_during_transfer(cli_env, folder, job)
        if killed_pid is not None:
            break
    assert killed_pid is not None, "every run finished before a file was staged"
    (stale,) = _staged(folder)
    assert str(killed_pid) in stale.name  # named after its owner
    assert not (folder / "out").exists()  # nothing partial was published

    small = tmp_path / "small.py"
    small.write_text(
        "import os\nopen(os.path.join(os.environ['PYBOX_OUTPUT_DIR'], 'r.txt'), 'w').write('ok')\n"
    )
    result = run_cli(["exec", str(small), "--output", str(folder / "out2")], cli_env)
    assert result.returncode == 0, result.stderr.decode()
    assert f"pybox: removed {stale}: partial files of a pybox that was killed" in (
        result.stderr.decode()
    )
    assert not stale.exists()
    assert (folder / "out2" / "r.txt").read_text() == "ok"
    assert sorted(p.name for p in folder.iterdir()) == ["out2"]
    # The killed run's box ended with its controller; the next run swept it.
    deadline = time.monotonic() + 30
    left: list[dict[str, object]] = []
    while True:
        left = [box for box in boxes(engine) if f":{killed_pid}:" in _owner(box)]
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert left == []
