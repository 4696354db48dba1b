"""`Session.prepare`: limits resolved once, the image checked, one run id, nothing created."""

from __future__ import annotations

import pytest

from pybox._adapters.state import StateStore
from pybox._core.errors import EngineUnavailable, ImageError, InvalidRequest, LimitExceeded
from pybox._core.limits import MIB, LimitRequest, Policy
from pybox._core.pool import PoolSettings
from pybox._core.request import PreparedRun, RunRequest
from pybox._engine import Engine
from pybox._orchestration.session import Session
from tests.unit.conftest import IMAGE_ID
from tests.unit.fake_engine import FakeEngine, Script


def test_prepare_resolves_checks_and_names_the_run(session: Session, engine: FakeEngine) -> None:
    prepared = session.prepare(RunRequest(code=b"print(1)", limits=LimitRequest(pids=64)))
    assert isinstance(prepared, PreparedRun)
    assert prepared.limits.pids == 64
    assert prepared.limits.memory_bytes == Policy().defaults.memory_bytes
    assert prepared.image.image_id == IMAGE_ID
    assert len(prepared.run_id) == 16
    # The image was checked against the engine; no box was made.
    assert engine.names("inspect_image")
    assert not engine.names("create")
    assert engine.containers == {}


def test_each_prepare_gets_its_own_run_id(session: Session) -> None:
    request = RunRequest(code=b"print(1)")
    assert session.prepare(request).run_id != session.prepare(request).run_id


def test_the_receipt_carries_the_prepared_run_id(session: Session, engine: FakeEngine) -> None:
    engine.script = Script(stdout=b"1\n", exit_code=0)
    prepared = session.prepare(RunRequest(code=b"print(1)"))
    receipt = session.run(prepared).receipt
    assert receipt.run_id == prepared.run_id
    assert receipt.observed_by_engine.container_name == f"pybox-{prepared.run_id}"


def _untouchable(state: StateStore) -> Session:
    def connect() -> Engine:
        raise AssertionError("the engine was touched")

    return Session(connect, state, Policy(), owner="testhost:1:1")


@pytest.mark.parametrize(
    ("request_", "error"),
    [
        (RunRequest(code=b"x", code_name="../evil.py"), InvalidRequest),
        (RunRequest(code=b"x", limits=LimitRequest(memory_bytes=10**6 * MIB)), LimitExceeded),
        (RunRequest(code=b"x", limits=LimitRequest(pids=1)), InvalidRequest),
        (RunRequest(code=b"x", env=(("API_TOKEN", "t"),)), InvalidRequest),
        (RunRequest(code=b"x", image="missing"), ImageError),
    ],
)
def test_bad_input_is_refused_before_the_engine_is_touched(
    state: StateStore, request_: RunRequest, error: type[Exception]
) -> None:
    with pytest.raises(error):
        _untouchable(state).prepare(request_)


def test_an_unreachable_engine_is_an_error(state: StateStore) -> None:
    def connect() -> Engine:
        raise EngineUnavailable("cannot reach the engine at unix:///nowhere")

    session = Session(connect, state, Policy(), owner="testhost:1:1")
    with pytest.raises(EngineUnavailable):
        session.prepare(RunRequest(code=b"print(1)"))


def test_a_warm_box_run_carries_the_prepared_run_id(engine: FakeEngine, state: StateStore) -> None:
    """A warm box was named before the run existed; the receipt still uses the run's id
    and names the box it ran in. The box's attempt record goes with the box."""
    engine.script = Script(stdout=b"1\n", exit_code=0)
    session = Session(
        engine,
        state,
        Policy(),
        owner="testhost:1:1",
        sampler_factory=lambda container_id: None,
        is_owner_alive=lambda owner: owner == "testhost:1:1",
        pool=PoolSettings(boxes_per_profile=1),
    )
    try:
        assert session.warm_up(wait_s=5.0)
        waiting = [c.name for c in engine.containers.values() if c.state == "running"]
        prepared = session.prepare(RunRequest(code=b"print(1)"))
        receipt = session.run(prepared).receipt
        assert receipt.observed_by_pybox.box_source == "warm_pool"
        assert receipt.run_id == prepared.run_id
        assert receipt.observed_by_engine.container_name == waiting[0] != f"pybox-{prepared.run_id}"
        assert waiting[0].removeprefix("pybox-") not in state.attempts()
    finally:
        session.close()
