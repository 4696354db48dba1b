"""Each isolation lane end to end: the runtime read back, the receipt, and every
limit's mapping tested under runc and under gVisor (docs/isolation.md)."""

from __future__ import annotations

import json
from dataclasses import replace

from pybox._core.cpu_budget import cpu_budget
from pybox._core.limits import BUILTIN_DEFAULTS, MIB, LimitRequest
from pybox._core.receipt import Status
from pybox._core.request import RunRequest
from pybox._core.runtime_limits import engine_pids_limit
from pybox._core.runtimes import GVISOR, RUNC
from pybox._engine import Engine
from pybox._orchestration.session import Session
from tests.integration.conftest import run_cli
from tests.integration.runtimes import GVISOR_ENGINE_RUNTIME, need_lane

WHERE = b"print(open('/proc/version').read().split()[2])\n"


def run(session: Session, code: str, **limits: object) -> tuple[object, bytes]:
    outcome = session.run(RunRequest(code=code.encode(), limits=LimitRequest(**limits)))  # type: ignore[arg-type]
    return outcome.receipt, outcome.stdout


def test_the_lane_is_read_back_and_in_the_receipt(lane_session: Session, lane: str) -> None:
    outcome = lane_session.run(RunRequest(code=WHERE))
    receipt = outcome.receipt
    assert receipt.status is Status.SUCCEEDED, receipt.cause
    assert receipt.observed_by_engine.posture_verified
    isolation = receipt.configured.isolation
    assert isolation is not None and isolation.lane == lane
    expected_runtime = GVISOR_ENGINE_RUNTIME if lane == GVISOR else RUNC
    assert receipt.configured.runtime == expected_runtime
    assert isolation.shares_host_kernel is (lane == RUNC)
    with open("/proc/version") as handle:
        host_kernel = handle.read().split()[2].encode()
    # gVisor's Sentry answers for its own kernel, not the host's.
    assert (outcome.stdout.strip() == host_kernel) is (lane == RUNC)
    scope = "gvisor_sandbox" if lane == GVISOR else "box"
    assert receipt.observed_by_kernel.scope == scope


FORKS = r"""
import os, time
made = 0
while True:
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        time.sleep(30)
        os._exit(0)
    made += 1
print("forked", made)
"""


def test_the_processes_cap_is_the_programs_in_each_lane(lane_session: Session, lane: str) -> None:
    receipt, stdout = run(lane_session, FORKS, pids=32, timeout_s=30)
    assert receipt.status is Status.SUCCEEDED, receipt.cause  # type: ignore[attr-defined]
    # pybox's bootstrap and the program are two of the 32: 30 forks in both lanes.
    assert stdout.strip() == b"forked 30"
    kernel = receipt.observed_by_kernel  # type: ignore[attr-defined]
    limits = receipt.configured.limits  # type: ignore[attr-defined]
    assert limits["pids"] == 32
    assert kernel.pids_limit == engine_pids_limit(lane, replace(BUILTIN_DEFAULTS, pids=32))


def test_a_small_processes_cap_does_not_kill_gvisor_before_start(
    lane_session: Session, lane: str
) -> None:
    # Under gVisor without the mapping, a cap below about 44 fails the box's start.
    receipt, stdout = run(lane_session, "print('started')", pids=8)
    assert receipt.status is Status.SUCCEEDED, receipt.cause  # type: ignore[attr-defined]
    assert stdout == b"started\n"


HOG = r"""
chunks = []
while True:
    block = bytearray(8 << 20)
    for i in range(0, len(block), 4096):
        block[i] = 1
    chunks.append(block)
"""


def test_the_memory_cap_holds_in_each_lane(lane_session: Session) -> None:
    receipt, _ = run(lane_session, HOG, memory_bytes=128 * MIB, timeout_s=30)
    assert receipt.status is Status.OUT_OF_MEMORY, receipt.cause  # type: ignore[attr-defined]
    kernel = receipt.observed_by_kernel  # type: ignore[attr-defined]
    assert kernel.memory_limit_bytes == 128 * MIB
    # The kernel's peak may pass the cap by a page or so before the OOM killer acts.
    assert kernel.memory_peak_bytes is not None
    assert kernel.memory_peak_bytes <= 128 * MIB + 64 * 1024


FILES = r"""
handles = []
try:
    while True:
        handles.append(open("/dev/null"))
except OSError as exc:
    print(len(handles), exc.errno)
"""


def test_the_open_files_cap_is_per_process_in_each_lane(lane_session: Session) -> None:
    receipt, stdout = run(lane_session, FILES, open_files=64)
    assert receipt.status is Status.SUCCEEDED, receipt.cause  # type: ignore[attr-defined]
    opened, errno = stdout.split()
    assert errno == b"24"  # EMFILE
    assert 50 <= int(opened) < 64  # stdin, stdout, stderr and the bootstrap's are open


FILL = r"""
import os
for place in ("/tmp", "/pybox/work", "/dev/shm"):
    os.makedirs(place, exist_ok=True)
    written = 0
    try:
        with open(place + "/fill", "wb") as handle:
            while written < 64:
                handle.write(b"x" * (1 << 20))
                handle.flush()
                written += 1
    except OSError as exc:
        print(place, written, exc.errno)
    os.unlink(place + "/fill")
"""


def test_the_writable_cap_holds_in_each_tmpfs_in_each_lane(lane_session: Session) -> None:
    receipt, stdout = run(lane_session, FILL, writable_bytes=16 * MIB)
    assert receipt.status is Status.SUCCEEDED, receipt.cause  # type: ignore[attr-defined]
    lines = stdout.decode().splitlines()
    assert len(lines) == 3
    for line in lines:
        _place, written, errno = line.split()
        assert errno == "28" and 14 <= int(written) <= 16, line  # ENOSPC at the cap


SPIN = r"""
import os, time
end = time.monotonic() + 1.5
for _ in range(3):
    if os.fork() == 0:
        while time.monotonic() < end:
            pass
        os._exit(0)
while time.monotonic() < end:
    pass
for _ in range(3):
    os.wait()
"""


def assert_cpu_cap_held(receipt: object) -> None:
    """The judgement `pybox verify` makes (pybox._core.cpu_budget), in both lanes: the
    kernel's CPU time within the quota of every period it counted and within the cap
    times the box's life by pybox's clock."""
    kernel = receipt.observed_by_kernel  # type: ignore[attr-defined]
    budget = cpu_budget(receipt)  # type: ignore[arg-type]
    assert kernel.cpu_quota_cpus == 0.5
    assert budget.within_periods, budget
    assert budget.within_window, budget


def test_the_cpu_cap_holds_the_whole_sandbox(lane_session: Session) -> None:
    receipt, _ = run(lane_session, SPIN, cpus=0.5, timeout_s=30)
    assert receipt.status is Status.SUCCEEDED, receipt.cause  # type: ignore[attr-defined]
    kernel = receipt.observed_by_kernel  # type: ignore[attr-defined]
    assert kernel.cpu_throttled_periods is not None and kernel.cpu_throttled_periods > 0
    # Four spinners for 1.5 s would take 3 CPU-seconds unthrottled on two CPUs
    # (gVisor's own time is inside the same quota); the runc test's bound.
    assert kernel.cpu_usage_s is not None and kernel.cpu_usage_s < 1.5
    assert_cpu_cap_held(receipt)


# verify's cpu_spin, bounded: five threads that really run at once (hashlib releases
# the interpreter's lock), the program measured not to hold under gVisor before the
# judgement counted the box's whole life.
THREADS = r"""
import hashlib, threading, time
BLOCK = b"x" * (1 << 20)
end = time.monotonic() + 3.0
def spin():
    while time.monotonic() < end:
        hashlib.sha256(BLOCK).digest()
threads = [threading.Thread(target=spin) for _ in range(4)]
for thread in threads:
    thread.start()
spin()
for thread in threads:
    thread.join()
"""


def test_the_cpu_cap_holds_for_spinning_threads_in_each_lane(lane_session: Session) -> None:
    receipt, _ = run(lane_session, THREADS, cpus=0.5, timeout_s=30)
    assert receipt.status is Status.SUCCEEDED, receipt.cause  # type: ignore[attr-defined]
    kernel = receipt.observed_by_kernel  # type: ignore[attr-defined]
    # Throttled: the threads wanted more than the cap (how often depends on the
    # host's other load, which can leave the box less than its cap).
    assert kernel.cpu_throttled_periods is not None and kernel.cpu_throttled_periods > 0
    # Five threads for 3 s would take 6 CPU-seconds unthrottled on two CPUs; at
    # 0.5 CPU, 1.5 CPU-s plus the box's start and end, as under runc.
    assert kernel.cpu_usage_s is not None and kernel.cpu_usage_s < 2.5
    assert_cpu_cap_held(receipt)


def test_exec_runtime_flag_and_refusal(engine: Engine, cli_env: dict[str, str]) -> None:
    need_lane(engine, GVISOR)
    env = {
        **cli_env,
        "PYBOX_GVISOR_ENGINE_RUNTIME": GVISOR_ENGINE_RUNTIME,
    }
    done = run_cli(["exec", "--json", "--runtime", "gvisor", "-"], env, WHERE)
    assert done.returncode == 0, done.stderr
    record = json.loads(done.stdout)
    assert record["receipt"]["configured"]["isolation"]["lane"] == "gvisor"
    assert record["receipt"]["configured"]["runtime"] == GVISOR_ENGINE_RUNTIME
    refused = run_cli(
        ["exec", "--runtime", "runc", "-"], {**env, "PYBOX_ALLOWED_RUNTIMES": "gvisor"}, WHERE
    )
    assert refused.returncode == 2
    assert b"'runc' is not allowed by the operator" in refused.stderr
