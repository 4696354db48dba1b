"""Integration tests run against the real engine and the recorded stdlib image.

With PYBOX_REQUIRE_ENGINE=1 (set in CI) a missing engine or image fails the
suite instead of skipping it. `PYBOX_TEST_ENGINES` (default `docker`; for
example `docker,podman`) runs every test that uses the `engine`, `session`,
`state_dir` or `cli_env` fixtures once per engine: Podman's socket is
`CONTAINER_HOST` (else its usual ones) and its image records are in
`PYBOX_TEST_PODMAN_STATE_DIR` (else the default state directory). Each test cleans up after itself, and the suite
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
from pybox._engine import Engine, connect_engine, find_endpoint
from pybox._orchestration.session import Session

REQUIRE = os.environ.get("PYBOX_REQUIRE_ENGINE") == "1"

# The runtime-parametrised fixtures (runc, gvisor): tests/integration/runtimes.py.
from tests.integration.runtimes import lane, lane_session  # noqa: E402, F401


def _unavailable(reason: str) -> None:
    if REQUIRE:
        pytest.fail(f"PYBOX_REQUIRE_ENGINE=1 but {reason}", pytrace=False)
    pytest.skip(reason)


ENGINES = [
    name.strip() for name in os.environ.get("PYBOX_TEST_ENGINES", "docker").split(",") if name
]


def colima_runs_docker(engine_name: str) -> None:
    """Colima's VM runs Docker, so pybox's Colima path drives Docker only: its
    tests have no Podman variant (a fake VM around Podman would test nothing real)."""
    if engine_name != "docker":
        pytest.skip("the Colima path drives the Docker engine in Colima's VM, never Podman")


def engine_environ(name: str) -> dict[str, str]:
    """This process's environment, pointed at engine `name` (what a CLI run is given)."""
    env = dict(os.environ)
    if name == "podman":
        env.pop("DOCKER_HOST", None)
        env["PYBOX_ENGINE"] = "podman"
    else:
        env.pop("PYBOX_ENGINE", None)
        env.pop("CONTAINER_HOST", None)
    return env


@pytest.fixture(scope="session", params=ENGINES)
def engine_name(request: pytest.FixtureRequest) -> Iterator[str]:
    """The engine this pass runs against ("docker", "podman": PYBOX_TEST_ENGINES).

    For the pass, this process's environment points at that engine too, so tests
    that open sessions from the environment (`Client()`, `Session.open`) follow."""
    name = str(request.param)
    saved, pointed = dict(os.environ), engine_environ(name)
    os.environ.clear()
    os.environ.update(pointed)
    try:
        yield name
    finally:
        os.environ.clear()
        os.environ.update(saved)


@pytest.fixture(scope="session")
def engine(engine_name: str) -> Engine:
    try:
        env = engine_environ(engine_name)
        return connect_engine(find_endpoint(env, engine_name), engine_name)
    except PyboxError as exc:
        _unavailable(f"no {engine_name} engine: {exc}")
        raise


@pytest.fixture(scope="session")
def state_dir(tmp_path_factory: pytest.TempPathFactory, engine: Engine, engine_name: str) -> Path:
    """A private state directory holding a copy of the machine's image records."""
    own = os.environ.get(f"PYBOX_TEST_{engine_name.upper()}_STATE_DIR")
    source = (Path(own) if own else default_state_dir(os.environ)) / "images.json"
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
    engines: list[Engine] = []
    for name in ENGINES:
        try:
            engines.append(connect_engine(find_endpoint(engine_environ(name), name), name))
        except PyboxError:
            continue
    before = {c["Id"] for e in engines for c in e.list_containers({LABEL_MANAGED: "1"})}
    yield
    left: set[str] = set()
    for _ in range(20):  # a box of another process may still be on its way out
        left = {
            f"{e.name}:{c['Id']}"
            for e in engines
            for c in e.list_containers({LABEL_MANAGED: "1"})
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
def cli_env(state_dir: Path, engine_name: str) -> dict[str, str]:
    env = engine_environ(engine_name)
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
