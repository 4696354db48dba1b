"""The Python API on the real engine, as the README shows it."""

from __future__ import annotations

import hashlib
import os
import socket
import threading
from pathlib import Path

import pytest

import pybox
from pybox import Client, LimitExceeded, run_container


@pytest.fixture(autouse=True)
def private_state(monkeypatch: pytest.MonkeyPatch, state_dir: Path) -> None:
    monkeypatch.setenv("PYBOX_STATE_DIR", str(state_dir))
    monkeypatch.delenv("PYBOX_CONFIG", raising=False)


def test_run_container_as_in_the_readme() -> None:
    code = (
        "import os\n"
        "rows = open(os.path.join(os.environ['PYBOX_INPUT_DIR'], 'a.csv')).read().splitlines()\n"
        "open(os.path.join(os.environ['PYBOX_OUTPUT_DIR'], 'count.txt'), 'w').write(str(len(rows)))\n"
        "print(6*7)\n"
    )
    result = run_container(
        code, timeout_s=5, inputs=[("a.csv", b"x,y\n1,2\n3,4\n")], collect_outputs=True
    )
    assert result.ok
    assert result.stdout == "42\n"
    assert result.exit_code == 0
    assert result.status == "succeeded"
    assert [(f.path, f.data) for f in result.output_files] == [("count.txt", b"3")]
    assert result.output_files[0].sha256 == hashlib.sha256(b"3").hexdigest()
    assert isinstance(result.receipt, pybox.Receipt)
    assert result.receipt.to_dict()["receipt_version"] == 2


def test_files_returned_in_memory_sweep_a_killed_pybox_s_staging(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Collected without output_dir, the files are staged in the temporary folder,
    # named after their owner: what a killed pybox left there is removed and named.
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    stale = tmp_path / f".pybox-staging-{socket.gethostname()}:{os.getpid()}:1-abcd1234"
    stale.mkdir()
    (stale / "half.bin").write_bytes(b"untrusted")
    result = run_container(
        "import os\nopen(os.environ['PYBOX_OUTPUT_DIR'] + '/r.txt', 'w').write('ok')\n",
        collect_outputs=True,
    )
    assert result.ok and [(f.path, f.data) for f in result.output_files] == [("r.txt", b"ok")]
    assert result.stale_staging_removed == (stale,)
    assert list(tmp_path.iterdir()) == []  # its own staging is gone too


def test_output_dir_is_written_all_at_once(tmp_path: Path) -> None:
    target = tmp_path / "out"
    result = Client().run(
        "import os\nopen(os.environ['PYBOX_OUTPUT_DIR'] + '/r.txt', 'w').write('ok')\n",
        output_dir=target,
    )
    assert result.ok
    assert (target / "r.txt").read_text() == "ok"
    assert result.output_dir == target


def test_limit_above_ceiling_raises_before_anything_runs() -> None:
    with pytest.raises(LimitExceeded, match="the maximum is 8192 MiB"):
        Client().run("print(1)", memory_bytes=16 * 1024**3)


def test_cancel_stops_the_run() -> None:
    cancel = threading.Event()
    timer = threading.Timer(0.5, cancel.set)
    timer.start()
    result = Client().run("import time\ntime.sleep(30)\n", cancel=cancel)
    timer.cancel()
    assert result.status == "stopped"
    assert result.receipt.observed_by_engine.removal_confirmed
