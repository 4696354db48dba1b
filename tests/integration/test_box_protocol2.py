"""A box that runs programs one after another (bootstrap protocol 2), on the real engine."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pybox._boxes.box import Box
from pybox._boxes.spec import new_run_id
from pybox._core import wire
from pybox._core.limits import LimitRequest
from pybox._core.receipt import Status
from pybox._core.request import InputFile, RunRequest
from pybox._engine import Engine
from pybox._orchestration.session import Session
from tests.integration.conftest import boxes

DAEMON = """
import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:          # a daemon: double fork and a session of its own
        open("daemon.pid", "w").write(str(os.getpid()))
        time.sleep(1000)
    os._exit(0)
while not os.path.exists("daemon.pid"):
    time.sleep(0.01)
open("note.txt", "w").write("from the first program")
deadline = time.process_time() + 0.3
while time.process_time() < deadline:   # some CPU of its own
    pass
print("first", os.getpid())
"""

SECOND = """
import json, os
pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
print(json.dumps({"note": open("note.txt").read(), "daemon": int(open("daemon.pid").read()),
                  "pids": pids, "me": os.getpid()}))
"""


@pytest.fixture
def box(session: Session, engine: Engine) -> Iterator[Box]:
    request = RunRequest(code=b"", limits=LimitRequest(timeout_s=3))
    made = Box(
        session._context(),
        session.verified_image("stdlib"),
        session.resolve(request),
        "main.py",
        box_id=new_run_id(),
        expires_at=int(time.time() + 300),
        protocol=wire.MANY_PROGRAMS,
        payload_wait_s=60,
    )
    with made:
        made.open()
        yield made
    # Removed and confirmed gone at the end, its attempt record cleared.
    assert made.removal is not None and made.removal.confirmed
    assert engine.inspect_container(str(made.container_id)) is None
    assert boxes(engine, made.spec.run_id) == []
    assert made.spec.run_id not in session.state.attempts()


def test_two_programs_share_files_and_nothing_else(box: Box) -> None:
    first = box.run_program(RunRequest(code=DAEMON.encode()), run_id=new_run_id())
    assert first.receipt.status is Status.SUCCEEDED, first.receipt.cause.summary
    second = box.run_program(RunRequest(code=SECOND.encode()), run_id=new_run_id())
    assert second.receipt.status is Status.SUCCEEDED, second.stderr
    seen = json.loads(second.stdout)
    assert seen["note"] == "from the first program"  # files in the writable area stay
    # The daemon the first program left is gone: only PID 1 and the program remain.
    assert seen["daemon"] not in seen["pids"]
    assert seen["pids"] == [1, seen["me"]]
    one, two = first.receipt, second.receipt
    assert one.run_id != two.run_id
    assert one.observed_by_engine.container_id == two.observed_by_engine.container_id
    assert (one.observed_by_pybox.box_source, two.observed_by_pybox.box_source) == (
        "fresh",
        "same_box",
    )
    # Each program's counters are its own: the second did not spend the first's CPU.
    k1, k2 = one.observed_by_kernel, two.observed_by_kernel
    assert k1.counters_since == "box_start" and k2.counters_since == "code_arrival"
    assert k1.cpu_usage_s is not None and k2.cpu_usage_s is not None
    assert k1.cpu_usage_s >= 0.3
    assert k2.cpu_usage_s < k1.cpu_usage_s - 0.2
    assert k2.pids_peak is not None and k2.pids_peak >= 1
    for receipt in (one, two):
        assert receipt.observed_by_engine.posture_verified
        assert receipt.observed_by_engine.state == "running"
        assert receipt.observed_by_engine.exit_code is None


def test_a_timeout_leaves_the_box_usable(box: Box) -> None:
    hang = b"import time\nprint('waiting', flush=True)\ntime.sleep(1000)\n"
    started = time.monotonic()
    timed_out = box.run_program(RunRequest(code=hang), run_id=new_run_id())
    elapsed = time.monotonic() - started
    receipt = timed_out.receipt
    assert receipt.status is Status.TIMED_OUT
    assert receipt.observed_by_pybox.deadline_kill
    assert timed_out.stdout == b"waiting\n"
    assert 3.0 <= (receipt.observed_by_pybox.run_duration_s or 0) < 5.0
    assert elapsed < 8
    assert box.removal is None and box.broken is None
    after = box.run_program(RunRequest(code=b"print('still here')"), run_id=new_run_id())
    assert after.receipt.status is Status.SUCCEEDED
    assert after.stdout == b"still here\n"
    assert after.receipt.observed_by_pybox.run_duration_s is not None
    assert after.receipt.observed_by_pybox.run_duration_s < 2


def test_each_program_returns_its_files_and_gets_its_inputs(box: Box, tmp_path: Path) -> None:
    write = (
        b"import os\n"
        b"path = os.path.join(os.environ['PYBOX_OUTPUT_DIR'], 'a.txt')\n"
        b"open(path, 'w').write(open('in.txt').read())\n"
    )
    for n, text in enumerate((b"one", b"two")):
        folder = tmp_path / str(n)
        folder.mkdir()
        request = RunRequest(code=write, inputs=(InputFile("in.txt", text),), collect_outputs=True)
        outcome = box.run_program(request, run_id=new_run_id(), files_dir=folder)
        assert outcome.receipt.status is Status.SUCCEEDED, outcome.stderr
        assert (folder / "a.txt").read_bytes() == text


def test_a_failing_program_is_data_and_the_box_goes_on(box: Box) -> None:
    failed = box.run_program(RunRequest(code=b"raise SystemExit(7)"), run_id=new_run_id())
    assert failed.receipt.status is Status.FAILED and failed.receipt.exit_code == 7
    ok = box.run_program(RunRequest(code=b"print(6*7)"), run_id=new_run_id())
    assert ok.stdout == b"42\n"
