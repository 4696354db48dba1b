"""The warm pool against the fake engine: single use, verified first, bounded, cleaned up."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pybox._adapters.config import load_settings
from pybox._adapters.state import StateStore
from pybox._boxes.pool import WarmPool
from pybox._boxes.pool_values import PoolKey, ProfileStats
from pybox._boxes.spec import BoxContext
from pybox._core.errors import ConfigError
from pybox._core.limits import MIB, LimitRequest, Policy
from pybox._core.pool import PoolSettings
from pybox._core.receipt import KernelObserved, Status, rebase_kernel
from pybox._core.request import RunRequest
from pybox._engine.interface import JSONObject
from pybox._orchestration.session import Session
from tests.unit.conftest import OWNER
from tests.unit.fake_engine import FakeEngine, Script


def pooled_session(
    engine: FakeEngine, state: StateStore, settings: PoolSettings
) -> Iterator[Session]:
    session = Session(
        engine,
        state,
        Policy(),
        owner=OWNER,
        sampler_factory=lambda container_id: None,
        is_owner_alive=lambda owner: owner == OWNER,
        pool=settings,
    )
    try:
        yield session
    finally:
        session.close()


@pytest.fixture
def pooled(engine: FakeEngine, state: StateStore) -> Iterator[Session]:
    yield from pooled_session(engine, state, PoolSettings(boxes_per_profile=1))


def started(engine: FakeEngine) -> list[str]:
    return [c.name for c in engine.containers.values() if c.state == "running"]


def wait_for(condition: object, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def test_a_warm_box_is_verified_before_it_waits(pooled: Session, engine: FakeEngine) -> None:
    assert pooled.warm_up(wait_s=5.0)
    skipped = ("list", "inspect_image", "info")
    operations = [name for name, _ in engine.calls if name not in skipped]
    # create, posture read back, attach, start: the same checks as a fresh box.
    assert operations[:4] == ["create", "inspect", "attach", "start"]
    assert len(started(engine)) == 1


def test_a_run_takes_a_warm_box_once_and_a_new_one_replaces_it(
    pooled: Session, engine: FakeEngine, state: StateStore
) -> None:
    engine.script = Script(stdout=b"42\n")
    assert pooled.warm_up(wait_s=5.0)
    waiting = started(engine)
    outcome = pooled.run(RunRequest(code=b"print(6*7)\n"))
    receipt = outcome.receipt
    assert outcome.stdout == b"42\n"
    assert receipt.status is Status.SUCCEEDED
    assert receipt.observed_by_pybox.box_source == "warm_pool"
    assert receipt.observed_by_pybox.create_s is None
    assert receipt.observed_by_pybox.box_waited_s is not None
    assert receipt.observed_by_engine.posture_verified
    assert receipt.observed_by_engine.removal_confirmed
    assert receipt.observed_by_engine.container_name == waiting[0]
    assert receipt.observed_by_kernel.counters_since == "box_start"  # no sampler here
    # The used box is gone; a different one waits in its place.
    wait_for(lambda: len(started(engine)) == 1)
    assert started(engine) != waiting
    second = pooled.run(RunRequest(code=b"print(6*7)\n"))
    assert second.receipt.run_id != receipt.run_id
    assert second.receipt.observed_by_engine.container_name not in waiting


def test_close_removes_every_waiting_box(
    engine: FakeEngine, state: StateStore, tmp_path: Path
) -> None:
    sessions = pooled_session(engine, state, PoolSettings(boxes_per_profile=2))
    session = next(sessions)
    assert session.warm_up(wait_s=5.0)
    assert len(started(engine)) == 2
    assert session.close() == []
    assert engine.containers == {}
    assert state.attempts() == {}
    assert all(attach.closed for attach in engine.attachments)


def test_a_request_that_matches_no_pool_takes_the_normal_path(
    pooled: Session, engine: FakeEngine
) -> None:
    assert pooled.warm_up(wait_s=5.0)
    outcome = pooled.run(RunRequest(code=b"", limits=LimitRequest(memory_bytes=128 * MIB)))
    assert outcome.receipt.observed_by_pybox.box_source == "fresh"
    assert outcome.receipt.observed_by_pybox.create_s is not None


def test_a_weakened_box_never_enters_the_pool(pooled: Session, engine: FakeEngine) -> None:
    def weaken(body: dict[str, object]) -> None:
        host_config = body["HostConfig"]
        assert isinstance(host_config, dict)
        host_config["ReadonlyRootfs"] = False

    engine.tamper = weaken
    assert not pooled.warm_up(wait_s=0.5)
    stats = pooled.pool_stats()
    assert stats is not None and stats.failed >= 1 and stats.waiting == 0
    assert stats.last_error is not None and "refused before start" in stats.last_error
    assert "start" not in [name for name, _ in engine.calls]
    wait_for(lambda: engine.containers == {})


def test_the_memory_budget_bounds_the_waiting_boxes(engine: FakeEngine, state: StateStore) -> None:
    limits = Policy().resolve(LimitRequest())
    settings = PoolSettings(boxes_per_profile=3, memory_budget_bytes=limits.memory_bytes)
    for session in pooled_session(engine, state, settings):
        assert not session.warm_up(wait_s=0.5)
        assert len(started(engine)) == 1
    assert engine.containers == {}


def test_a_profile_nobody_asks_for_is_emptied(engine: FakeEngine, state: StateStore) -> None:
    for session in pooled_session(engine, state, PoolSettings(boxes_per_profile=1, idle_s=0.3)):
        assert session.warm_up(wait_s=5.0)

        def emptied(session: Session = session) -> bool:
            stats = session.pool_stats()
            return engine.containers == {} and stats is not None and stats.profiles == 0

        wait_for(emptied)


def test_a_session_without_a_pool_never_starts_boxes_ahead(
    session: Session, engine: FakeEngine
) -> None:
    assert not session.warm_up(wait_s=0.1)
    assert session.pool_stats() is None
    assert engine.containers == {}


def test_pool_settings_come_from_the_config_file_and_environment(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text("[pool]\nboxes_per_profile = 3\nidle_s = 60\nmemory_budget_mib = 1024\n")
    settings = load_settings({"PYBOX_STATE_DIR": str(tmp_path)}, str(config))
    assert settings.pool == PoolSettings(3, 60.0, 1024 * MIB)
    env = {"PYBOX_STATE_DIR": str(tmp_path), "PYBOX_POOL_BOXES": "0"}
    assert load_settings(env, str(config)).pool.boxes_per_profile == 0
    assert settings.pool.concurrent_starts == 4
    env = {"PYBOX_STATE_DIR": str(tmp_path), "PYBOX_POOL_STARTS": "3"}
    assert load_settings(env, str(config)).pool.concurrent_starts == 3


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("boxes_per_profile", "2.5"),
        ("boxes_per_profile", "-1"),
        ("idle_s", "0"),
        ("size", "1"),
        ("concurrent_starts", "0"),
        ("concurrent_starts", "1.5"),
        ("concurrent_starts", "17"),
    ],
)
def test_bad_pool_settings_are_clear_errors(key: str, value: str) -> None:
    with pytest.raises(ConfigError, match="pool"):
        PoolSettings().with_settings({key: value}, "test")


def _kernel(**values: float | int | None) -> KernelObserved:
    base: dict[str, object] = dict.fromkeys(KernelObserved.__dataclass_fields__)
    base.update(cgroup_version=1, samples=3, sample_interval_s=0.01)
    base.pop("counters_since")
    base.pop("peaks_include_idle_wait")
    base.update(values)
    return KernelObserved(**base)  # type: ignore[arg-type]


def test_rebasing_subtracts_the_idle_wait_from_totals_only() -> None:
    baseline = _kernel(cpu_usage_s=0.05, cpu_periods=4, oom_kill_count=0, memory_peak_bytes=10)
    final = _kernel(cpu_usage_s=0.30, cpu_periods=10, oom_kill_count=1, memory_peak_bytes=99)
    rebased = rebase_kernel(final, baseline)
    assert rebased.cpu_usage_s == pytest.approx(0.25)
    assert rebased.cpu_periods == 6
    assert rebased.oom_kill_count == 1
    assert rebased.memory_peak_bytes == 99  # a peak cannot be rebased: labelled instead
    assert rebased.peaks_include_idle_wait
    assert rebased.counters_since == "code_arrival"
    assert rebased.cpu_throttled_s is None  # unknown on either side stays unknown


def make_context(engine: FakeEngine, state: StateStore) -> BoxContext:
    return BoxContext(
        engine=engine,
        state=state,
        owner=OWNER,
        pybox_version="test",
        bootstrap_source="",
        sampler_factory=lambda container_id: None,
    )


def test_a_replacement_waits_until_the_run_is_done(engine: FakeEngine, state: StateStore) -> None:
    """Starting a box competes with the run's own teardown for the CPUs."""
    settings = PoolSettings(boxes_per_profile=1)
    pool = WarmPool(lambda _runtime: make_context(engine, state), settings)
    key = PoolKey.of(state.image("stdlib"), Policy().resolve(LimitRequest()), "main.py")  # type: ignore[arg-type]
    try:
        assert pool.wait_ready(key, 5.0)
        assert pool.take(key) is not None
        time.sleep(0.3)
        assert pool.stats().starting == 0 and pool.stats().waiting == 0
        pool.done(key)
        assert pool.wait_ready(key, 5.0)
    finally:
        assert pool.close() == []


def test_a_waiting_box_that_died_is_skipped_and_removed(
    pooled: Session, engine: FakeEngine
) -> None:
    engine.script = Script(stdout=b"42\n")
    assert pooled.warm_up(wait_s=5.0)
    (dead,) = [c for c in engine.containers.values() if c.state == "running"]
    dead.state, dead.killed = "exited", True  # ended while it waited, by anyone
    outcome = pooled.run(RunRequest(code=b"print(6*7)\n"))
    assert outcome.receipt.status is Status.SUCCEEDED
    assert outcome.receipt.observed_by_pybox.box_source == "fresh"
    wait_for(lambda: dead.container_id not in engine.containers)


def test_a_warm_box_waits_for_its_bootstrap_to_report_ready(
    pooled: Session, engine: FakeEngine
) -> None:
    assert pooled.warm_up(wait_s=5.0)
    (waiting,) = [a for a in engine.attachments if a.started]
    # The pool read the bootstrap's ready report; nothing is left unread.
    assert not waiting.has_pending()


def test_a_waiting_box_ends_itself_after_its_idle_time_if_pybox_froze(
    engine: FakeEngine, state: StateStore
) -> None:
    for session in pooled_session(engine, state, PoolSettings(boxes_per_profile=1, idle_s=60)):
        assert session.warm_up(wait_s=5.0)
        (waiting,) = [c for c in engine.containers.values() if c.state == "running"]
        # The bootstrap's last argument: how long it waits for code before it ends itself.
        assert waiting.body["Entrypoint"][-1] == "70"


def test_a_box_that_waited_its_idle_time_is_not_taken(
    engine: FakeEngine, state: StateStore
) -> None:
    """Its bootstrap ends itself soon after; a run must not take it on the way out."""
    pool = WarmPool(
        lambda _runtime: make_context(engine, state), PoolSettings(boxes_per_profile=1, idle_s=60)
    )
    key = PoolKey.of(state.image("stdlib"), Policy().resolve(LimitRequest()), "main.py")  # type: ignore[arg-type]
    try:
        assert pool.wait_ready(key, 5.0)
        with pool._cond:  # hold the worker off: only take() may notice
            (box,) = pool._profiles[key].waiting
            box.ready_at -= 61
            assert pool.take(key) is None
    finally:
        assert pool.close() == []
    assert box.spec.name not in [c.name for c in engine.containers.values()]


def test_the_pool_keeps_more_ready_while_runs_miss_and_fewer_when_they_stop(
    engine: FakeEngine, state: StateStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sized to demand within the budget: each miss keeps one more box of that kind
    ready (up to the most allowed); without misses it falls back to the base."""
    from pybox._boxes import pool as pool_module

    settings = PoolSettings(boxes_per_profile=1, max_boxes_per_profile=3)
    pool = WarmPool(lambda _runtime: make_context(engine, state), settings)
    key = PoolKey.of(state.image("stdlib"), Policy().resolve(LimitRequest()), "main.py")  # type: ignore[arg-type]

    def profile() -> ProfileStats:
        (found,) = pool.profile_stats()
        return found

    try:
        assert pool.wait_ready(key, 5.0)
        taken = [pool.take(key)]
        assert taken[0] is not None
        assert pool.take(key) is None and pool.take(key) is None  # two misses
        assert profile().target == 3 and profile().misses == 2
        assert pool.take(key) is None  # no further than the most allowed
        assert profile().target == 3
        # In demand, the replacements start at once: no wait for the run to end.
        wait_for(lambda: profile().waiting == 3)
        assert profile().in_use == 1
        pool.done(key, taken[0])
        # Demand falls: one box fewer per quiet period, never below the base.
        monkeypatch.setattr(pool_module, "SHRINK_AFTER_S", 0.05)
        wait_for(lambda: profile().target == 1 and profile().waiting == 1)
    finally:
        assert pool.close() == []


def test_the_memory_budget_bounds_a_growing_pool(engine: FakeEngine, state: StateStore) -> None:
    limits = Policy().resolve(LimitRequest())
    settings = PoolSettings(
        boxes_per_profile=1, max_boxes_per_profile=8, memory_budget_bytes=2 * limits.memory_bytes
    )
    pool = WarmPool(lambda _runtime: make_context(engine, state), settings)
    key = PoolKey.of(state.image("stdlib"), limits, "main.py")  # type: ignore[arg-type]
    try:
        assert pool.wait_ready(key, 5.0)
        for _ in range(4):
            pool.take(key)
        wait_for(lambda: pool.stats().waiting == 2)
        time.sleep(0.3)
        assert pool.stats().waiting + pool.stats().starting == 2
    finally:
        pool.close()


def test_the_most_boxes_per_profile_is_a_setting(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text("[pool]\nmax_boxes_per_profile = 4\n")
    env = {"PYBOX_STATE_DIR": str(tmp_path)}
    assert load_settings(env, str(config)).pool.max_boxes_per_profile == 4
    env["PYBOX_POOL_MAX_BOXES"] = "5"
    assert load_settings(env, str(config)).pool.max_boxes_per_profile == 5
    assert PoolSettings().max_boxes_per_profile == 8
    with pytest.raises(ConfigError, match="whole number"):
        PoolSettings().with_settings({"max_boxes_per_profile": "2.5"}, "test")


class _TwoAtOnce(FakeEngine):
    """Creates wait until two are in flight: started one at a time, none would pass."""

    def __init__(self) -> None:
        super().__init__()
        self.both_in_flight = threading.Barrier(2, timeout=5.0)

    def create_container(self, name: str, body: JSONObject) -> str:
        self.both_in_flight.wait()
        return super().create_container(name, body)


def test_two_boxes_start_at_once(state: StateStore) -> None:
    engine = _TwoAtOnce()
    pool = WarmPool(lambda _runtime: make_context(engine, state), PoolSettings(boxes_per_profile=2))
    key = PoolKey.of(state.image("stdlib"), Policy().resolve(LimitRequest()), "main.py")  # type: ignore[arg-type]
    try:
        assert pool.wait_ready(key, 10.0)
        assert pool.stats().started == 2 and pool.stats().failed == 0
    finally:
        assert pool.close() == []


class _CountsInFlight(FakeEngine):
    """Creates that take a while, counting how many are in flight at once."""

    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.Lock()
        self.in_flight = self.most_in_flight = 0

    def create_container(self, name: str, body: JSONObject) -> str:
        with self.lock:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        time.sleep(0.2)
        with self.lock:
            self.in_flight -= 1
        return super().create_container(name, body)


@pytest.mark.parametrize("starts", [1, 3])
def test_the_boxes_started_at_once_are_a_setting(state: StateStore, starts: int) -> None:
    engine = _CountsInFlight()
    settings = PoolSettings(boxes_per_profile=4, concurrent_starts=starts)
    pool = WarmPool(lambda _runtime: make_context(engine, state), settings)
    key = PoolKey.of(state.image("stdlib"), Policy().resolve(LimitRequest()), "main.py")  # type: ignore[arg-type]
    try:
        assert pool.wait_ready(key, 10.0)
        deadline = time.monotonic() + 10
        while pool.stats().started < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert pool.stats().started == 4
        assert engine.most_in_flight == starts
    finally:
        assert pool.close() == []


def test_a_replacement_is_held_only_while_the_waiting_boxes_cover_the_runs(
    state: StateStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # With a hold far longer than the test, a start can only come from the rule.
    monkeypatch.setattr("pybox._boxes.pool.REFILL_HOLD_S", 600.0)
    engine = FakeEngine()
    pool = WarmPool(lambda _runtime: make_context(engine, state), PoolSettings(boxes_per_profile=2))
    key = PoolKey.of(state.image("stdlib"), Policy().resolve(LimitRequest()), "main.py")  # type: ignore[arg-type]
    taken = []
    try:
        assert pool.wait_ready(key, 10.0)
        deadline = time.monotonic() + 10
        while pool.stats().started < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        taken.append(pool.take(key))  # one run, one box still waiting: held
        time.sleep(0.5)
        assert pool.stats().started == 2
        taken.append(pool.take(key))  # a second run at once, none waiting: start now
        while pool.stats().started < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert pool.stats().started >= 3
        assert pool.stats().missed == 0
    finally:
        for box in taken:
            if box is not None:
                box.remove(look=False)
                pool.done(key, box)
        assert pool.close() == []
