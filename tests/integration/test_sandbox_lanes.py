"""A sandbox keeps the isolation lane it was made in: every run in a gVisor sandbox
runs under gVisor's kernel, from any session, whatever that session's default
lane; egress that the lane cannot carry is refused before anything is made
(docs/isolation.md, docs/sandboxes.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pybox._adapters.state import StateStore
from pybox._core.errors import EgressRefused, SandboxNotFound
from pybox._core.limits import LimitRequest, Policy
from pybox._core.receipt import Status
from pybox._core.request import RunRequest
from pybox._core.runtimes import GVISOR, RUNC
from pybox._engine import Engine
from pybox._features.sandboxes.records import RUN_PROGRAM
from pybox._features.verify.verdict import case_source
from pybox._orchestration.session import Session
from tests.integration.runtimes import lane_policy, need_lane

KERNEL = b"import os; print(os.uname().release)\n"


def code(text: bytes) -> RunRequest:
    return RunRequest(code=text, code_name=RUN_PROGRAM, limits=LimitRequest(timeout_s=20))


def session_of(engine: Engine, state_dir: Path, default: str) -> Session:
    return Session(engine, StateStore(state_dir), Policy(), runtimes=lane_policy(default))


def host_kernel() -> str:
    with open("/proc/version") as handle:
        return handle.read().split()[2]


def test_a_gvisor_sandbox_runs_every_program_under_gvisor_from_any_session(
    engine: Engine, state_dir: Path
) -> None:
    need_lane(engine, GVISOR)
    maker = session_of(engine, state_dir, RUNC)  # the default is runc: gVisor is asked for
    sandboxes = maker.sandboxes()
    info = sandboxes.create(limits=LimitRequest(timeout_s=20), runtime=GVISOR)
    try:
        assert info.runtime == GVISOR and info.to_dict()["runtime"] == GVISOR
        first = sandboxes.run(info.sandbox_id, code(b"open('kept.txt', 'w').write('kept')\n"))
        assert first.receipt.status is Status.SUCCEEDED, first.receipt.cause
        # Another session (another process, as far as the store goes), default runc.
        other = session_of(engine, state_dir, RUNC).sandboxes()
        outcome = other.run(info.sandbox_id, code(b"print(open('kept.txt').read())\n" + KERNEL))
        receipt = outcome.receipt
        assert receipt.status is Status.SUCCEEDED, receipt.cause
        kept, kernel = outcome.stdout.decode().split()
        assert kept == "kept"
        assert kernel != host_kernel()  # the Sentry's, not the host's
        assert receipt.configured.isolation is not None
        assert receipt.configured.isolation.lane == GVISOR
        assert receipt.observed_by_kernel.scope == "gvisor_sandbox"
        assert receipt.observed_by_engine.posture_verified
        seen = engine.inspect_container(f"pybox-{info.sandbox_id}") or {}
        assert seen["HostConfig"]["Runtime"] == receipt.configured.isolation.engine_runtime
    finally:
        sandboxes.destroy(info.sandbox_id)
        maker.close()
    assert engine.inspect_container(f"pybox-{info.sandbox_id}") is None


def test_a_runc_sandbox_stays_in_runc_when_the_default_lane_is_gvisor(
    engine: Engine, state_dir: Path
) -> None:
    need_lane(engine, GVISOR)
    maker = session_of(engine, state_dir, RUNC)
    sandboxes = maker.sandboxes()
    info = sandboxes.create(limits=LimitRequest(timeout_s=20))
    try:
        assert info.runtime == RUNC
        other = session_of(engine, state_dir, GVISOR).sandboxes()
        outcome = other.run(info.sandbox_id, code(KERNEL))
        assert outcome.receipt.status is Status.SUCCEEDED, outcome.receipt.cause
        assert outcome.stdout.decode().strip() == host_kernel()
        assert outcome.receipt.configured.isolation is not None
        assert outcome.receipt.configured.isolation.lane == RUNC
    finally:
        sandboxes.destroy(info.sandbox_id)
        maker.close()


def test_egress_in_a_gvisor_sandbox_is_refused_before_anything_is_made(
    engine: Engine, state_dir: Path
) -> None:
    need_lane(engine, GVISOR)
    session = session_of(engine, state_dir, RUNC)
    sandboxes = session.sandboxes()
    try:
        with pytest.raises(EgressRefused, match="gVisor lane"):
            sandboxes.create(runtime=GVISOR, egress="packages")
        assert sandboxes.list() == []
    finally:
        session.close()


IPC_LEAVE = b"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
made = [libc.shmget(0x5059, 4096, 0o1600), libc.semget(0x5059, 1, 0o1600),
        libc.msgget(0x5059, 0o1600)]
assert min(made) >= 0, made
open("/dev/shm/canary", "w").write("left")
queue = libc.mq_open(b"/pybox-canary", os.O_CREAT | os.O_RDWR, 0o600, None)
print(queue >= 0)
"""

IPC_LOOK = b"""
import ctypes, json, os
libc = ctypes.CDLL(None, use_errno=True)
found = [libc.shmget(0x5059, 0, 0), libc.semget(0x5059, 0, 0), libc.msgget(0x5059, 0)]
queue = libc.mq_open(b"/pybox-canary", os.O_RDONLY, 0, None)
print(json.dumps({"sysv": found, "shm": os.listdir("/dev/shm"), "mqueue": queue}))
"""


def test_ipc_objects_do_not_survive_between_a_sandboxs_runs(
    lane: str, engine: Engine, state_dir: Path
) -> None:
    """SysV shared memory, semaphores and message queues, /dev/shm and POSIX
    message queues: one run's are gone before the next (docs/sandboxes.md)."""
    session = session_of(engine, state_dir, lane)
    sandboxes = session.sandboxes()
    info = sandboxes.create(limits=LimitRequest(timeout_s=20))
    try:
        left = sandboxes.run(info.sandbox_id, code(IPC_LEAVE))
        assert left.receipt.status is Status.SUCCEEDED, left.stderr
        queue_made = left.stdout.strip() == b"True"
        looked = sandboxes.run(info.sandbox_id, code(IPC_LOOK))
        assert looked.receipt.status is Status.SUCCEEDED, looked.stderr
        seen = json.loads(looked.stdout)
        assert seen["sysv"] == [-1, -1, -1]
        assert seen["shm"] == []
        # gVisor mounts no mqueue filesystem, so its queues cannot be listed (or
        # removed) by name: docs/sandboxes.md says so. runc's are.
        assert queue_made
        if lane == RUNC:
            assert seen["mqueue"] == -1
    finally:
        sandboxes.destroy(info.sandbox_id)
        session.close()


def test_a_report_forged_on_pid_1s_stdout_is_never_taken_for_pid_1s(
    lane: str, engine: Engine, state_dir: Path
) -> None:
    """Under gVisor a program opens its PID 1's stdout (/proc/1/fd/1) and writes an
    exit report "exit code 0" (docs/isolation.md): it lacks the run's token, so
    the run is a sandbox error and the sandbox ends. Under runc it cannot open it,
    and the run fails with its own exit code."""
    attack = RunRequest(
        code=case_source("bootstrap_link"),
        code_name=RUN_PROGRAM,
        argv=("attack",),
        limits=LimitRequest(timeout_s=20),
    )
    session = session_of(engine, state_dir, lane)
    sandboxes = session.sandboxes()
    info = sandboxes.create(limits=LimitRequest(timeout_s=20))
    try:
        receipt = sandboxes.run(info.sandbox_id, attack).receipt
        if lane == GVISOR:
            assert receipt.status is Status.SANDBOX_ERROR
            assert "does not carry this run's token" in receipt.cause.summary
            with pytest.raises(SandboxNotFound):
                sandboxes.run(info.sandbox_id, code(b"print('never')"))
        else:
            assert receipt.status is Status.FAILED
            assert receipt.reported_by_program.exit_code == 3
    finally:
        sandboxes.destroy(info.sandbox_id)
        session.close()
