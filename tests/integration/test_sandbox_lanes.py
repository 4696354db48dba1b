"""A sandbox keeps the isolation lane it was made in: every run in a gVisor sandbox
runs under gVisor's kernel, from any session, whatever that session's default
lane; egress that the lane cannot carry is refused before anything is made
(docs/isolation.md, docs/sandboxes.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pybox._adapters.state import StateStore
from pybox._core.errors import EgressRefused
from pybox._core.limits import LimitRequest, Policy
from pybox._core.receipt import Status
from pybox._core.request import RunRequest
from pybox._core.runtimes import GVISOR, RUNC
from pybox._engine import Engine
from pybox._features.sandboxes.records import RUN_PROGRAM
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
