from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pybox._adapters.state import StateStore
from pybox._core.images import ImageRecord
from pybox._core.limits import Policy
from pybox._orchestration.session import Session
from tests.unit.fake_engine import TEST_IMAGE_ID, TEST_RECIPE_HASH, FakeEngine

IMAGE_ID = TEST_IMAGE_ID
RECIPE_HASH = TEST_RECIPE_HASH
OWNER = "testhost:1:1"


@pytest.fixture
def state(tmp_path: Path) -> StateStore:
    store = StateStore(tmp_path / "state")
    store.record_image(
        ImageRecord(
            name="stdlib",
            image_id=IMAGE_ID,
            recipe_hash=RECIPE_HASH,
            python_path="/usr/bin/python3",
            built_at="2026-01-01T00:00:00Z",
        )
    )
    return store


@pytest.fixture
def engine() -> FakeEngine:
    return FakeEngine()


def make_session(
    engine: FakeEngine, state: StateStore, policy: Policy | None = None, **options: Any
) -> Session:
    return Session(
        engine,
        state,
        policy or Policy(),
        owner=OWNER,
        sampler_factory=lambda container_id: None,
        is_owner_alive=lambda owner: owner == OWNER,
        **options,
    )


@pytest.fixture
def session(engine: FakeEngine, state: StateStore) -> Session:
    return make_session(engine, state)
