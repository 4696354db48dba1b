"""Admission on the one run path (fake engine): Session.run holds a slot for the box's
life, the warm pool's boxes hold slots without deadlocking runs, MCP says Busy as a tool
result with the retry-after."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from pybox._adapters.state import StateStore
from pybox._core.admission import AdmissionConfig
from pybox._core.errors import Busy
from pybox._core.limits import MIB, LimitRequest, Policy
from pybox._core.pool import PoolSettings
from pybox._core.receipt import Status
from pybox._core.request import RunRequest
from pybox._orchestration.session import Session
from tests.unit.conftest import OWNER
from tests.unit.fake_engine import FakeEngine, Script
from tests.unit.mcp_harness import Peer


def capped(
    engine: FakeEngine,
    state: StateStore,
    running: int,
    waiting: int = 32,
    wait_s: float = 30.0,
    pool: PoolSettings | None = None,
) -> Session:
    return Session(
        engine,
        state,
        Policy(),
        owner=OWNER,
        sampler_factory=lambda container_id: None,
        is_owner_alive=lambda owner: owner == OWNER,
        pool=pool,
        admission=AdmissionConfig(running, waiting, wait_s),
    )


class Watcher:
    """Counts the fake engine's containers (any state) every 2 ms; keeps the peak."""

    def __init__(self, engine: FakeEngine) -> None:
        self.engine = engine
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, len(list(self.engine.containers.values())))
            time.sleep(0.002)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(5)
        return self.peak


def wait_for(condition: object, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.005)


def hanging(timeout_s: float = 0.2, memory_mib: int | None = None) -> RunRequest:
    memory = None if memory_mib is None else memory_mib * MIB
    return RunRequest(code=b"", limits=LimitRequest(timeout_s=timeout_s, memory_bytes=memory))


def test_concurrent_runs_never_exceed_the_cap_and_all_finish(
    engine: FakeEngine, state: StateStore
) -> None:
    engine.script = Script(hang=True)  # each run lasts its timeout
    session = capped(engine, state, running=2)
    watcher = Watcher(engine)
    statuses: list[Status] = []

    def one() -> None:
        statuses.append(session.run(hanging()).receipt.status)

    threads = [threading.Thread(target=one) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert watcher.stop() == 2
    assert statuses == [Status.TIMED_OUT] * 6
    assert engine.containers == {}
    assert session.admission.get().running() == 0


def test_a_run_beyond_the_queue_is_busy_and_creates_nothing(
    engine: FakeEngine, state: StateStore
) -> None:
    engine.script = Script(hang=True)
    session = capped(engine, state, running=1, waiting=0)
    # The first run hangs long enough that it is still inside its box, with its attempt
    # recorded, while the second is refused, however loaded the machine is.
    first = threading.Thread(target=session.run, args=(hanging(3.0),))
    first.start()
    wait_for(lambda: session.admission.get().running() == 1 and state.attempts() != {})
    creates = [name for name, _ in engine.calls].count("create")
    attempts_before = state.attempts()
    with pytest.raises(Busy, match=r"boxes running: 1 of at most 1 .*Retry after"):
        session.run(hanging())
    assert [name for name, _ in engine.calls].count("create") == creates
    assert state.attempts() == attempts_before  # only the first run's
    first.join(10)
    assert engine.containers == {}


@pytest.fixture
def pooled_cap_1(engine: FakeEngine, state: StateStore) -> Iterator[Session]:
    session = capped(engine, state, running=1, wait_s=10.0, pool=PoolSettings(boxes_per_profile=1))
    try:
        yield session
    finally:
        session.close()


def test_a_waiting_warm_box_holds_a_slot_and_gives_it_to_a_run(
    pooled_cap_1: Session, engine: FakeEngine
) -> None:
    session = pooled_cap_1
    assert session.warm_up(wait_s=5.0)  # the one slot is the warm box's now
    assert session.admission.get().running() == 1
    watcher = Watcher(engine)
    # Another profile: no warm box fits, so the run waits and the pool gives its slot back.
    started = time.monotonic()
    outcome = session.run(RunRequest(code=b"", limits=LimitRequest(memory_bytes=128 * MIB)))
    assert time.monotonic() - started < 3.0
    assert outcome.receipt.status is Status.SUCCEEDED
    assert outcome.receipt.observed_by_pybox.box_source == "fresh"
    assert watcher.stop() == 1


def test_a_warm_box_taken_by_a_run_keeps_its_slot(
    pooled_cap_1: Session, engine: FakeEngine
) -> None:
    session = pooled_cap_1
    assert session.warm_up(wait_s=5.0)
    watcher = Watcher(engine)
    outcome = session.run(RunRequest(code=b""))
    assert outcome.receipt.observed_by_pybox.box_source == "warm_pool"
    assert watcher.stop() == 1


def test_the_pool_does_not_start_a_box_without_a_free_slot(
    pooled_cap_1: Session, engine: FakeEngine
) -> None:
    session = pooled_cap_1
    held = session.admission.get().try_slot("a run elsewhere")
    assert held is not None
    assert not session.warm_up(wait_s=0.5)
    assert "create" not in [name for name, _ in engine.calls]
    stats = session.pool_stats()
    assert stats is not None and stats.failed == 0  # not a failure: it waits for a slot
    held.release()
    assert session.warm_up(wait_s=5.0)


def test_mcp_says_busy_as_a_tool_result_with_the_retry_after(
    engine: FakeEngine, state: StateStore
) -> None:
    session = capped(engine, state, running=1, waiting=0)
    held = session.admission.get().try_slot("a run elsewhere", expected_s=3.0)
    assert held is not None
    try:
        peer = Peer(session)
        reply = peer.call("run_python", {"code": "print(1)"})
        assert "error" not in reply  # never a protocol error
        result = reply["result"]
        assert result["isError"] is True
        text = result["content"][0]["text"]
        assert "Busy:" in text and "Retry after" in text
        structure = result["structuredContent"]
        assert structure["status"] == "error"
        assert 1 <= structure["retry_after_s"] <= 8
        assert "create" not in [name for name, _ in engine.calls]
    finally:
        held.release()
