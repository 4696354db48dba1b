"""The warm pool keeps boxes per isolation lane: a gVisor run takes a gVisor box
that waited, never a runc one, and each is the same sealed box as a fresh one
(docs/isolation.md, docs/pool.md)."""

from __future__ import annotations

from pathlib import Path

from pybox._adapters.state import StateStore
from pybox._core.limits import Policy
from pybox._core.pool import PoolSettings
from pybox._core.posture import LABEL_OWNER
from pybox._core.receipt import Status
from pybox._core.request import RunRequest
from pybox._core.runtimes import GVISOR, RUNC
from pybox._engine import Engine
from pybox._orchestration.session import Session
from tests.integration.conftest import boxes
from tests.integration.runtimes import lane_policy, need_lane

WHERE = b"import os; print(os.uname().release, os.getuid())\n"


def pooled_session(engine: Engine, state_dir: Path, default: str) -> Session:
    return Session(
        engine,
        StateStore(state_dir),
        Policy(),
        runtimes=lane_policy(default),
        pool=PoolSettings(boxes_per_profile=1, idle_s=60),
    )


def owned(engine: Engine, session: Session) -> list[dict[str, object]]:
    found = []
    for box in boxes(engine):
        labels = box["Labels"]
        assert isinstance(labels, dict)
        if labels.get(LABEL_OWNER) == session.owner:
            found.append(box)
    return found


def test_each_lane_keeps_its_own_waiting_boxes(engine: Engine, state_dir: Path) -> None:
    need_lane(engine, GVISOR)
    session = pooled_session(engine, state_dir, RUNC)
    gvisor = RunRequest(code=WHERE, runtime=GVISOR)
    runc = RunRequest(code=WHERE)
    try:
        assert session.warm_up(gvisor, wait_s=60)
        assert session.warm_up(runc, wait_s=60)
        lanes = {p.key.runtime.lane: p.waiting for p in session.pool_profiles()}
        assert lanes == {GVISOR: 1, RUNC: 1}
        assert len(owned(engine, session)) == 2
        seen: dict[str, str] = {}
        for request, lane in ((gvisor, GVISOR), (runc, RUNC)):
            outcome = session.run(request)
            receipt = outcome.receipt
            assert receipt.status is Status.SUCCEEDED, receipt.cause
            assert receipt.observed_by_pybox.box_source == "warm_pool"
            assert receipt.configured.isolation is not None
            assert receipt.configured.isolation.lane == lane
            assert receipt.observed_by_engine.posture_verified
            assert receipt.observed_by_engine.removal_confirmed
            scope = "gvisor_sandbox" if lane == GVISOR else "box"
            assert receipt.observed_by_kernel.scope == scope
            assert receipt.observed_by_kernel.counters_since == "code_arrival"
            seen[lane] = outcome.stdout.decode().split()[0]
        with open("/proc/version") as handle:
            host_kernel = handle.read().split()[2]
        # The gVisor box's kernel is the Sentry, the runc box's the host's.
        assert seen[RUNC] == host_kernel
        assert seen[GVISOR] != host_kernel
    finally:
        assert session.close() == []
    # Closing removed the replacement boxes waiting in both lanes.
    assert owned(engine, session) == []
