"""Admission control: at most N box slots held at once across threads and processes,
a bounded queue, a clear Busy, cancel and Ctrl-C while waiting, a dead holder's slot freed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from pybox._adapters.config import load_settings
from pybox._adapters.lockfiles import lock_files
from pybox._core.admission import AdmissionConfig, AdmissionSettings, default_max_running
from pybox._core.errors import Busy, ConfigError, RequestRejected, WaitCancelled
from pybox._core.limits import MIB
from pybox._orchestration.admission import Admission

SRC = Path(__file__).resolve().parents[2] / "src"
GIB = 1024 * MIB


def admission(state: Path, running: int = 1, waiting: int = 4, wait_s: float = 5.0) -> Admission:
    return Admission(state, AdmissionSettings(running, waiting, wait_s))


def wait_for(condition: object, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.005)


def child(code: str, state: Path, *args: str) -> subprocess.Popen[str]:
    """A separate Python process using the same state directory."""
    script = textwrap.dedent(code)
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    return subprocess.Popen(
        [sys.executable, "-c", script, str(state), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


# -- the settings ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("memory", "cpus", "default", "expected"),
    [
        (16 * GIB, 8, 512 * MIB, 32),  # memory and 4 x CPUs agree
        (23 * GIB, 2, 512 * MIB, 8),  # 4 x CPUs is smaller (this kind of machine)
        (1 * GIB, 64, 2 * GIB, 1),  # never below 1
        (1024 * GIB, 128, 512 * MIB, 64),  # never above 64
        (None, None, 512 * MIB, 64),  # facts not known: only the absolute bound
        (4 * GIB, None, 512 * MIB, 8),
    ],
)
def test_the_default_cap_keeps_memory_within_the_machine(
    memory: int | None, cpus: int | None, default: int, expected: int
) -> None:
    assert default_max_running(memory, cpus, default) == expected
    settled = AdmissionConfig().settle(
        machine_memory_bytes=memory, cpus=cpus, default_memory_bytes=default
    )
    assert settled == AdmissionSettings(expected, 32, 60.0)


def test_an_operator_cap_wins_over_the_machine() -> None:
    settled = AdmissionConfig(max_running_boxes=3, max_waiting_runs=0, admission_wait_s=2.5).settle(
        machine_memory_bytes=64 * GIB, cpus=32, default_memory_bytes=512 * MIB
    )
    assert settled == AdmissionSettings(3, 0, 2.5)


def test_settings_come_from_the_file_then_the_environment(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text(
        "max_running_boxes = 3\nmax_waiting_runs = 7\nadmission_wait_s = 1.5\n[defaults]\n"
    )
    environ = {"XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CONFIG_HOME": str(tmp_path)}
    settings = load_settings(environ, str(config))
    assert settings.admission == AdmissionConfig(3, 7, 1.5)
    environ.update(PYBOX_MAX_RUNNING_BOXES="2", PYBOX_ADMISSION_WAIT_S="0")
    settings = load_settings(environ, str(config))
    assert settings.admission == AdmissionConfig(2, 7, 0.0)
    assert "environment" in settings.sources
    assert load_settings({"XDG_CONFIG_HOME": str(tmp_path / "none")}).admission == (
        AdmissionConfig()
    )


@pytest.mark.parametrize(
    ("line", "named"),
    [
        ("max_running_boxes = 0", "max_running_boxes must be a whole number of boxes from 1"),
        ("max_running_boxes = 2.5", "max_running_boxes must be a whole number"),
        ("max_waiting_runs = -1", "max_waiting_runs must be a whole number of runs from 0"),
        ("admission_wait_s = true", "admission_wait_s must be a number of seconds"),
        ('admission_wait_s = "soon"', "not 'soon'"),
    ],
)
def test_a_bad_setting_is_a_config_error(tmp_path: Path, line: str, named: str) -> None:
    config = tmp_path / "config.toml"
    config.write_text(line + "\n")
    with pytest.raises(ConfigError) as info:
        load_settings({"XDG_STATE_HOME": str(tmp_path)}, str(config))
    assert named in str(info.value)
    with pytest.raises(ConfigError, match=r"PYBOX_MAX_WAITING_RUNS|max_waiting_runs"):
        load_settings({"PYBOX_MAX_WAITING_RUNS": "many"})


# -- threads -------------------------------------------------------------------------


def test_threads_never_hold_more_than_the_cap(tmp_path: Path) -> None:
    gate = admission(tmp_path, running=2, waiting=16)
    lock = threading.Lock()
    now = [0]
    peak = [0]
    done: list[int] = []

    def work(number: int) -> None:
        with gate.slot(what=f"run {number}"):
            with lock:
                now[0] += 1
                peak[0] = max(peak[0], now[0])
            time.sleep(0.03)
            with lock:
                now[0] -= 1
        done.append(number)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert sorted(done) == list(range(10))
    assert peak[0] == 2
    assert gate.running() == 0 and gate.waiting() == 0


def test_waiters_of_one_process_are_served_in_order(tmp_path: Path) -> None:
    gate = admission(tmp_path, running=1, waiting=8)
    order: list[int] = []
    holder = gate.try_slot("the first")
    assert holder is not None

    def work(number: int) -> None:
        with gate.slot(what=f"run {number}"):
            order.append(number)

    threads = []
    for number in range(5):
        threads.append(threading.Thread(target=work, args=(number,)))
        threads[-1].start()
        wait_for(lambda n=number: gate.waiting() == n + 1)
    holder.release()
    for thread in threads:
        thread.join(5)
    assert order == [0, 1, 2, 3, 4]


# -- the queue and Busy ---------------------------------------------------------------


def test_a_full_queue_is_busy_at_once_and_the_waiter_still_runs(tmp_path: Path) -> None:
    gate = admission(tmp_path, running=1, waiting=1, wait_s=10)
    holder = gate.try_slot("the first")
    assert holder is not None
    got: list[str] = []
    waiter = threading.Thread(target=lambda: got.append(_hold(gate, "the waiter")))
    waiter.start()
    wait_for(lambda: gate.waiting() == 1)
    started = time.monotonic()
    with pytest.raises(Busy) as info, gate.slot(what="run abc"):
        pytest.fail("admitted beyond the queue")
    assert time.monotonic() - started < 0.5
    busy = info.value
    assert isinstance(busy, RequestRejected)  # the CLI's exit 2, an MCP tool error
    message = str(busy)
    assert message.startswith(
        "Busy: run abc was not started: every box slot is taken and the queue is full"
    )
    assert "boxes running: 1 of at most 1 (max_running_boxes)" in message
    assert "runs waiting: 1 of at most 1 (max_waiting_runs)" in message
    assert "Nothing was started. Retry after" in message
    assert busy.retry_after_s >= 1 and f"Retry after {busy.retry_after_s:g} s." in message
    assert (busy.running, busy.max_running, busy.waiting, busy.max_waiting) == (1, 1, 1, 1)
    holder.release()
    waiter.join(5)
    assert got == ["the waiter"]


def _hold(gate: Admission, what: str) -> str:
    with gate.slot(what=what):
        return what


def test_no_queue_means_busy_when_every_slot_is_held(tmp_path: Path) -> None:
    gate = admission(tmp_path, running=2, waiting=0)
    with (
        gate.slot(),
        gate.slot(),
        pytest.raises(Busy, match="no run may wait; boxes running: 2 of at most 2"),
        gate.slot(),
    ):
        pytest.fail("admitted beyond the cap")
    with gate.slot():
        pass  # free again


def test_a_wait_that_runs_out_is_busy_and_gives_its_place_back(tmp_path: Path) -> None:
    gate = admission(tmp_path, running=1, waiting=2, wait_s=0.2)
    with gate.slot(what="a long run", expected_s=3.0):
        started = time.monotonic()
        with pytest.raises(Busy) as info, gate.slot(what="run late"):
            pass
        waited = time.monotonic() - started
        assert 0.2 <= waited < 1.0
        assert "run late waited 0.2 s (admission_wait_s) for a box slot" in str(info.value)
        # The holder's timeout (3 s + the box margin) bounds the estimate.
        assert 1 <= info.value.retry_after_s <= 9
        assert gate.waiting() == 0


def test_cancel_while_waiting_stops_the_wait(tmp_path: Path) -> None:
    gate = admission(tmp_path, running=1, waiting=2, wait_s=30)
    cancel = threading.Event()
    with gate.slot():
        threading.Timer(0.1, cancel.set).start()
        started = time.monotonic()
        with (
            pytest.raises(WaitCancelled, match="Run x was stopped while it waited"),
            gate.slot(cancel=cancel, what="run x"),
        ):
            pass
        assert time.monotonic() - started < 0.5
        assert gate.waiting() == 0
    assert gate.running() == 0


def test_the_pool_never_takes_a_slot_ahead_of_a_waiter(tmp_path: Path) -> None:
    gate = admission(tmp_path, running=2, waiting=2)
    places = lock_files(tmp_path / "admission", "wait")
    place = places.take(2, b"someone")  # someone waits (as another process would)
    assert place is not None
    assert gate.anyone_waiting()
    assert gate.try_slot("a warm pool box") is None  # a slot is free, but it is wanted
    places.release(place)
    slot = gate.try_slot("a warm pool box")
    assert slot is not None
    slot.release()


def test_a_free_slot_is_left_to_an_older_waiter_but_not_to_a_stuck_one(tmp_path: Path) -> None:
    gate = admission(tmp_path, running=1, waiting=4, wait_s=0.3)
    places = lock_files(tmp_path / "admission", "wait")

    def older_waiter(until: float) -> int:
        note = json.dumps({"ticket": [1, 1, 0], "until": until}).encode()
        place = places.take(4, note)
        assert place is not None
        return place

    place = older_waiter(time.time() + 60)  # waits, in some other process
    with (
        pytest.raises(Busy, match="runs waiting: 1 of at most 4"),
        gate.slot(what="a younger run"),
    ):
        pytest.fail("overtook an older waiter")
    places.release(place)
    place = older_waiter(time.time() - 10)  # long past its own deadline: stopped
    started = time.monotonic()
    with gate.slot(what="a younger run"):
        assert time.monotonic() - started < 0.2
    places.release(place)


# -- processes -----------------------------------------------------------------------

HOLD_AND_LOG = """
import sys, time
from pathlib import Path
from pybox._core.admission import AdmissionSettings
from pybox._orchestration.admission import Admission
gate = Admission(Path(sys.argv[1]), AdmissionSettings(2, 32, 30))
log = open(sys.argv[2], "w")
for _ in range(6):
    with gate.slot(what="a child"):
        log.write(f"+ {time.monotonic()}\\n"); log.flush()
        time.sleep(0.02)
        log.write(f"- {time.monotonic()}\\n"); log.flush()
"""


def test_processes_and_threads_never_hold_more_than_the_cap_together(tmp_path: Path) -> None:
    state = tmp_path / "state"
    children = [child(HOLD_AND_LOG, state, str(tmp_path / f"log{n}")) for n in range(3)]
    gate = admission(state, running=2, waiting=32, wait_s=30)
    events: list[tuple[float, int]] = []
    lock = threading.Lock()

    def work() -> None:
        for _ in range(6):
            with gate.slot(what="a thread"):
                with lock:
                    events.append((time.monotonic(), 1))
                time.sleep(0.02)
                with lock:
                    events.append((time.monotonic(), -1))

    threads = [threading.Thread(target=work) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    for process in children:
        assert process.wait(30) == 0, process.stderr.read() if process.stderr else ""
    for n in range(3):
        for line in (tmp_path / f"log{n}").read_text().splitlines():
            sign, stamp = line.split()
            events.append((float(stamp), 1 if sign == "+" else -1))
    assert len(events) == 2 * 6 * 5
    # Ends before starts at the same instant; at most 2 held at any moment.
    held = peak = 0
    for _, change in sorted(events, key=lambda e: (e[0], e[1])):
        held += change
        peak = max(peak, held)
    assert peak == 2
    assert held == 0


HOLD_AGAIN_AND_AGAIN = """
import sys, time
from pathlib import Path
from pybox._core.admission import AdmissionSettings
from pybox._orchestration.admission import Admission
gate = Admission(Path(sys.argv[1]), AdmissionSettings(1, 4, 30))
for number in range(40):
    with gate.slot(what="a greedy child"):
        if number == 0:
            print("go", flush=True)
        time.sleep(0.05)
"""


def test_a_process_that_runs_again_and_again_does_not_overtake_a_waiter(
    tmp_path: Path,
) -> None:
    process = child(HOLD_AGAIN_AND_AGAIN, tmp_path)
    try:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "go"
        gate = admission(tmp_path, running=1, waiting=4, wait_s=10)
        started = time.monotonic()
        with gate.slot(what="the waiter"):
            waited = time.monotonic() - started
            assert process.poll() is None  # the child was not done: it let this one in
        assert waited < 0.5
        assert process.wait(30) == 0
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
            process.wait(10)


HOLD_UNTIL_KILLED = """
import sys, time
from pathlib import Path
from pybox._core.admission import AdmissionSettings
from pybox._orchestration.admission import Admission
gate = Admission(Path(sys.argv[1]), AdmissionSettings(1, 4, 30))
with gate.slot(what="a doomed child", expected_s=60):
    print("held", flush=True)
    time.sleep(120)
"""


def test_a_killed_processs_slot_is_released(tmp_path: Path) -> None:
    process = child(HOLD_UNTIL_KILLED, tmp_path)
    try:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "held"
        gate = admission(tmp_path, running=1, waiting=4, wait_s=0.1)
        assert gate.running() == 1
        with pytest.raises(Busy, match="boxes running: 1 of at most 1"), gate.slot():
            pass
        os.kill(process.pid, signal.SIGKILL)
        process.wait(10)
        gate = admission(tmp_path, running=1, waiting=4, wait_s=5)
        with gate.slot(what="after the kill"):
            assert gate.running() == 1
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
            process.wait(10)


WAIT_THEN_CTRL_C = """
import sys
from pathlib import Path
from pybox._core.admission import AdmissionSettings
from pybox._orchestration.admission import Admission
gate = Admission(Path(sys.argv[1]), AdmissionSettings(1, 4, 60))
print("waiting", flush=True)
try:
    with gate.slot(what="a child"):
        print("admitted", flush=True)
except KeyboardInterrupt:
    print("interrupted", gate.waiting(), flush=True)
"""


def test_ctrl_c_while_waiting_gives_the_place_back(tmp_path: Path) -> None:
    gate = admission(tmp_path, running=1, waiting=4)
    with gate.slot(what="the holder"):
        process = child(WAIT_THEN_CTRL_C, tmp_path)
        try:
            assert process.stdout is not None
            assert process.stdout.readline().strip() == "waiting"
            wait_for(lambda: gate.waiting() == 1)
            os.kill(process.pid, signal.SIGINT)
            out, err = process.communicate(timeout=10)
        finally:
            if process.poll() is None:
                os.kill(process.pid, signal.SIGKILL)
                process.wait(10)
        assert out.split() == ["interrupted", "0"], err
        assert gate.waiting() == 0
