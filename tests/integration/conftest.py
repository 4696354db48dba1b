"""Integration tests run against the real engine and the recorded stdlib image.

With PYBOX_REQUIRE_ENGINE=1 (set in CI) a missing engine or image fails the
suite instead of skipping it. Each test cleans up after itself, and the suite
ends by asserting that no box it made is left behind.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pybox._adapters.host_facts import current_owner, owner_alive
from pybox._adapters.state import StateStore, default_state_dir
from pybox._core.errors import PyboxError
from pybox._core.limits import Policy
from pybox._core.posture import LABEL_MANAGED, LABEL_OWNER
from pybox._engine import DockerEngine, Engine, find_endpoint
from pybox._orchestration.session import Session

REQUIRE = os.environ.get("PYBOX_REQUIRE_ENGINE") == "1"

# The runtime-parametrised fixtures (runc, gvisor): tests/integration/runtimes.py.
from tests.integration.runtimes import lane, lane_session  # noqa: E402, F401


def _unavailable(reason: str) -> None:
    if REQUIRE:
        pytest.fail(f"PYBOX_REQUIRE_ENGINE=1 but {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def engine() -> Engine:
    try:
        return DockerEngine.connect(find_endpoint(os.environ))
    except PyboxError as exc:
        _unavailable(f"no container engine: {exc}")
        raise


@pytest.fixture(scope="session")
def state_dir(tmp_path_factory: pytest.TempPathFactory, engine: Engine) -> Path:
    """A private state directory holding a copy of the machine's image records."""
    source = default_state_dir(os.environ) / "images.json"
    if not source.exists():
        _unavailable(f"no recorded images in {source}: run `pybox setup --yes` first")
    target = tmp_path_factory.mktemp("pybox-state")
    shutil.copy(source, target / "images.json")
    if StateStore(target).image("stdlib") is None:
        _unavailable("the stdlib image is not recorded: run `pybox setup --yes` first")
    return target


@pytest.fixture(scope="session")
def session(engine: Engine, state_dir: Path) -> Session:
    return Session(engine, StateStore(state_dir), Policy())


@pytest.fixture(scope="session", autouse=True)
def nothing_left_behind(request: pytest.FixtureRequest) -> Iterator[None]:
    """At the end of the suite no box made by these tests may remain."""
    if not any(item.get_closest_marker("integration") for item in request.session.items):
        yield
        return
    try:
        engine = DockerEngine.connect(find_endpoint(os.environ))
    except PyboxError:
        yield
        return
    before = {c["Id"] for c in engine.list_containers({LABEL_MANAGED: "1"})}
    yield
    left: set[str] = set()
    for _ in range(20):  # a box of another process may still be on its way out
        left = {
            str(c["Id"])
            for c in engine.list_containers({LABEL_MANAGED: "1"})
            if c["Id"] not in before and not _owned_by_another_live_process(c)
        }
        if not left:
            break
        time.sleep(0.5)
    assert not left, f"{len(left)} pybox boxes left behind by the tests: {sorted(left)}"


def _owned_by_another_live_process(container: dict[str, Any]) -> bool:
    """Boxes of other pybox processes running beside this suite are not its leftovers.

    Boxes made by this suite carry this process's owner or that of a CLI
    subprocess it started, which has exited by the end of the suite.
    """
    owner = (container.get("Labels") or {}).get(LABEL_OWNER, "")
    return owner != current_owner() and owner_alive(owner) is True


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "integration" in str(item.fspath):
            item.add_marker(pytest.mark.integration)


@pytest.fixture
def cli_env(state_dir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYBOX_STATE_DIR"] = str(state_dir)
    env.pop("PYBOX_CONFIG", None)
    return env


def run_cli(
    args: list[str], env: dict[str, str], stdin: bytes = b"", timeout_s: float = 120
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "pybox", *args],
        input=stdin,
        capture_output=True,
        env=env,
        timeout=timeout_s,
        check=False,
    )


def boxes(engine: Engine, run_id: str | None = None) -> list[dict[str, object]]:
    labels: dict[str, str | None] = {LABEL_MANAGED: "1"}
    if run_id is not None:
        labels["io.pybox.run-id"] = run_id
    return engine.list_containers(labels)
