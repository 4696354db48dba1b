"""Limits enforced by the kernel, deadlines, and boxes that outlive their controller."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from pybox._boxes.cleanup import remove_and_confirm
from pybox._boxes.spec import (
    box_spec,
    create_box,
    new_run_id,
    read_back_posture,
    refuse_if_weakened,
)
from pybox._core.limits import MIB, LimitRequest
from pybox._core.posture import LABEL_OWNER, LABEL_RUN_ID
from pybox._core.receipt import Status
from pybox._core.request import RunRequest
from pybox._engine import Engine
from pybox._orchestration.session import Session
from tests.integration.conftest import boxes

STUBBORN = r"""
import os, signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
for _ in range(3):
    if os.fork() == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if os.fork() == 0:
            os.setsid()          # a daemon: double fork and a new session
            time.sleep(1000)
        time.sleep(1000)
print('children started', flush=True)
time.sleep(1000)
"""


def test_timeout_ends_a_stubborn_program_and_its_children(session: Session, engine: Engine) -> None:
    started = time.monotonic()
    outcome = session.run(RunRequest(code=STUBBORN.encode(), limits=LimitRequest(timeout_s=2)))
    elapsed = time.monotonic() - started
    receipt = outcome.receipt
    assert receipt.status is Status.TIMED_OUT
    assert receipt.exit_code is None
    assert receipt.observed_by_pybox.deadline_kill
    assert receipt.cause.known
    assert outcome.stdout == b"children started\n"
    assert receipt.observed_by_kernel.pids_peak is not None
    assert receipt.observed_by_kernel.pids_peak >= 7  # the program, 3 children, 3 daemons
    assert 2.0 <= (receipt.observed_by_pybox.run_duration_s or 0) < 4.0
    assert elapsed < 10
    assert receipt.observed_by_engine.removal_confirmed
    assert boxes(engine, receipt.run_id) == []


def test_out_of_memory_has_kernel_evidence(session: Session) -> None:
    code = "chunks = []\nwhile True:\n    chunks.append(b'x' * (8 * 1024 * 1024))\n"
    receipt = session.run(
        RunRequest(code=code.encode(), limits=LimitRequest(memory_bytes=64 * MIB))
    ).receipt
    assert receipt.status is Status.OUT_OF_MEMORY
    kernel = receipt.observed_by_kernel
    assert kernel.oom_kill_count is not None and kernel.oom_kill_count >= 1
    assert kernel.memory_limit_bytes == 64 * MIB
    assert kernel.memory_peak_bytes is not None
    assert kernel.memory_peak_bytes <= 64 * MIB
    assert kernel.memory_peak_bytes > 48 * MIB
    assert any("OOM-kill counter" in item for item in receipt.cause.evidence)
    assert receipt.exit_code == 137


def test_exit_137_without_evidence_is_not_called_oom(session: Session) -> None:
    code = "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n"
    receipt = session.run(RunRequest(code=code.encode())).receipt
    assert receipt.status is Status.FAILED
    assert receipt.exit_code == 137
    assert not receipt.cause.known
    assert receipt.observed_by_kernel.oom_kill_count == 0


FORK_BOMB = r"""
import os, time
made = 0
while True:
    try:
        pid = os.fork()
    except OSError as exc:
        print('fork refused after', made, exc.errno, flush=True)
        time.sleep(0.3)  # hold the peak long enough to be sampled from outside
        break
    if pid == 0:
        time.sleep(30)
        os._exit(0)
    made += 1
"""


def test_fork_bomb_is_stopped_by_the_pids_cap(session: Session) -> None:
    outcome = session.run(RunRequest(code=FORK_BOMB.encode(), limits=LimitRequest(pids=32)))
    kernel = outcome.receipt.observed_by_kernel
    assert outcome.receipt.status is Status.SUCCEEDED
    assert outcome.stdout.startswith(b"fork refused after")
    assert kernel.pids_limit == 32
    assert kernel.pids_peak == 32
    assert kernel.pids_limit_hits is not None and kernel.pids_limit_hits >= 1


CPU_SPIN = r"""
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


def test_cpu_is_throttled_to_the_limit(session: Session) -> None:
    receipt = session.run(
        RunRequest(code=CPU_SPIN.encode(), limits=LimitRequest(cpus=0.5, timeout_s=20))
    ).receipt
    kernel = receipt.observed_by_kernel
    assert receipt.status is Status.SUCCEEDED
    assert kernel.cpu_quota_cpus == 0.5
    assert kernel.cpu_throttled_periods is not None and kernel.cpu_throttled_periods > 0
    assert kernel.cpu_usage_s is not None
    # Four spinning processes for 1.5 s would use 4 CPU-seconds unthrottled.
    assert kernel.cpu_usage_s < 1.5


def test_pybox_memory_stays_bounded_under_an_output_flood(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    program = tmp_path / "flood.py"
    program.write_text(
        "import sys\nblock = b'y' * 65536\nfor _ in range(3200):\n"
        "    sys.stdout.buffer.write(block)\n    sys.stderr.buffer.write(block[:16384])\n"
    )
    script = (
        "import resource, subprocess, sys\n"
        "p = subprocess.run([sys.executable, '-m', 'pybox', 'exec', sys.argv[1], '--timeout', '120'],"
        " stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)\n"
        "print(p.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
        "sys.stderr.buffer.write(p.stderr)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script, str(program)],
        capture_output=True,
        env=cli_env,
        timeout=180,
        check=False,
    )
    code, max_rss_kib = (int(x) for x in result.stdout.split())
    assert code == 0, result.stderr.decode()
    assert b"stdout 200.0 MiB (truncated)" in result.stderr
    # 200 MiB printed and 50 MiB on stderr; pybox kept its own memory small.
    assert max_rss_kib < 80 * 1024, f"pybox used {max_rss_kib} KiB"


def _wait_for_box(engine: Engine, owner_pid: int, timeout_s: float = 20.0) -> dict[str, object]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for box in boxes(engine):
            labels = box.get("Labels")
            assert isinstance(labels, dict)
            if (
                str(labels.get(LABEL_OWNER, "")).split(":")[1:2] == [str(owner_pid)]
                and box.get("State") == "running"
            ):
                return box
        time.sleep(0.05)
    raise AssertionError("the controller never started its box")


def _running_program(marker: str) -> str:
    """Code that, once running, shows `marker` in its command line on this host.

    Boxes share the host's kernel, so the test (root) sees the box's processes in
    /proc: the marker appears only after pybox handed the code over, never while the
    box waits for it.
    """
    return (
        "import os, sys\n"
        f"os.execv(sys.executable, [sys.executable, '-c', 'import time; time.sleep(60)', {marker!r}])\n"
    )


def _wait_for_program(marker: str, timeout_s: float = 20.0) -> None:
    wanted = marker.encode()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue  # it ended, or is not ours to read
            if wanted in argv:
                return
        time.sleep(0.05)
    raise AssertionError("the program never started in its box")


def _start_controller(
    engine: Engine, env: dict[str, str], code: bytes, timeout_s: str, *extra: str
) -> tuple[subprocess.Popen[bytes], dict[str, object]]:
    """`pybox exec -` in a process of its own, once its box is running."""
    controller = subprocess.Popen(
        [sys.executable, "-m", "pybox", "exec", "-", "--timeout", timeout_s, *extra],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert controller.stdin is not None
    controller.stdin.write(code)
    controller.stdin.close()
    controller.stdin = None  # closed; communicate() must not flush it
    return controller, _wait_for_box(engine, controller.pid)


def test_controller_killed_halfway_is_swept_by_the_next_run(
    session: Session, engine: Engine, cli_env: dict[str, str]
) -> None:
    marker = f"pybox-test-{uuid.uuid4().hex}"
    controller, box = _start_controller(engine, cli_env, _running_program(marker).encode(), "3")
    _wait_for_program(marker)  # halfway: the program runs, pybox is watching it
    controller.send_signal(signal.SIGKILL)
    controller.wait()
    labels = box["Labels"]
    assert isinstance(labels, dict)
    run_id = str(labels[LABEL_RUN_ID])
    assert len(boxes(engine, run_id)) == 1, "the killed controller's box should still exist"
    # The in-box backstop ends the program shortly after its deadline, controller or not.
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        found = engine.inspect_container(str(box["Id"]))
        if found is None or found["State"]["Status"] != "running":
            break
        time.sleep(0.2)
    found = engine.inspect_container(str(box["Id"]))
    assert found is not None and found["State"]["Status"] == "exited"
    assert found["State"]["ExitCode"] == 124  # the backstop's exit code
    # The next run sweeps it: its owner process is gone.
    fresh = Session(engine, session.state, session.policy)
    receipt = fresh.run(RunRequest(code=b"print(1)")).receipt
    assert receipt.observed_by_pybox.leftovers_swept >= 1
    assert boxes(engine, run_id) == []


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_stopping_the_controller_removes_the_box(
    engine: Engine, cli_env: dict[str, str], signum: int
) -> None:
    controller, box = _start_controller(engine, cli_env, b"import time\ntime.sleep(60)\n", "60")
    os.kill(controller.pid, signum)
    _, stderr = controller.communicate(timeout=30)
    assert controller.returncode == 130, stderr.decode()
    assert b"pybox: stopped" in stderr
    assert b"removed (confirmed)" in stderr
    assert b"Traceback" not in stderr
    assert engine.inspect_container(str(box["Id"])) is None


def test_backstop_ends_the_box_while_the_controller_is_frozen(
    engine: Engine, cli_env: dict[str, str]
) -> None:
    """A controller that stops responding (SIGSTOP) cannot keep a box alive."""
    marker = f"pybox-test-{uuid.uuid4().hex}"
    controller, box = _start_controller(
        engine, cli_env, _running_program(marker).encode(), "1", "--json"
    )
    _wait_for_program(marker)
    os.kill(controller.pid, signal.SIGSTOP)
    try:
        deadline = time.monotonic() + 15
        state: dict[str, object] = {}
        while time.monotonic() < deadline:
            found = engine.inspect_container(str(box["Id"]))
            assert found is not None
            state = found["State"]
            if state["Status"] != "running":
                break
            time.sleep(0.2)
        # Timeout 1 s + 2 s of grace, measured inside the box.
        assert state["Status"] == "exited"
        assert state["ExitCode"] == 124
    finally:
        os.kill(controller.pid, signal.SIGCONT)
    out, err = controller.communicate(timeout=60)
    record = json.loads(out)
    assert controller.returncode == 124, err.decode()
    assert record["status"] == "timed_out"
    assert engine.inspect_container(str(box["Id"])) is None


def test_a_box_whose_code_never_arrives_ends_itself(session: Session, engine: Engine) -> None:
    """pybox froze between start and payload: the box does not wait for it forever."""
    context = session._context()
    spec = box_spec(
        context,
        session.verified_image("stdlib"),
        session.resolve(RunRequest(code=b"")),
        "main.py",
        run_id=new_run_id(),
        expires_at=int(time.time() + 120),
        payload_wait_s=1.0,
    )
    container_id = create_box(engine, spec, session.verified_image("stdlib"))
    stream = None
    try:
        refuse_if_weakened(read_back_posture(engine, spec, container_id))
        stream = engine.attach(container_id)
        engine.start_container(container_id)
        started = time.monotonic()
        state: dict[str, object] = {}
        while time.monotonic() - started < 15:
            found = engine.inspect_container(container_id)
            assert found is not None
            state = found["State"]
            if state["Status"] != "running":
                break
            time.sleep(0.1)
        # The connection stayed open and silent, as a frozen pybox's would.
        assert state["Status"] == "exited"
        assert state["ExitCode"] == 124
        assert time.monotonic() - started < 10
    finally:
        if stream is not None:
            stream.close()
        assert remove_and_confirm(engine, container_id)
