"""pybox as a user who is not root, only in the docker group, with a fresh state.

.ci/run makes that user, installs pybox for it the README's way and runs
`pybox setup --yes` and a first `pybox exec` as it; it then names the user and
its pybox in PYBOX_TEST_USER and PYBOX_TEST_USER_PYBOX for these tests. They
check what that user is told before any image of its own exists: a dry run
that says what the build needs, and no loop when only another user's state
records the engine's stdlib image. Without those variables they are skipped.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from pybox._adapters.state import StateStore
from pybox._engine import Engine
from pybox._features.images.records import plan_stdlib
from tests.integration.conftest import ENGINES

USER = os.environ.get("PYBOX_TEST_USER", "")
USER_PYBOX = os.environ.get("PYBOX_TEST_USER_PYBOX", "")

# The user reaches Docker through the docker group. A non-root user's Podman is
# rootless Podman, which pybox refuses on a cgroup v1 host (docs/engines.md).
DOCKER_ONLY = "the non-root user drives Docker through the docker group; not a Podman pass"

pytestmark = [
    pytest.mark.skipif(
        not (USER and USER_PYBOX and os.geteuid() == 0),
        reason="needs root and PYBOX_TEST_USER / PYBOX_TEST_USER_PYBOX (set by .ci/run)",
    ),
    pytest.mark.skipif("docker" not in ENGINES, reason=DOCKER_ONLY),
]


@pytest.fixture
def fresh_state() -> Iterator[Path]:
    """A state folder the user owns, holding nothing yet; removed afterwards."""
    account = pwd.getpwnam(USER)
    parent = Path(tempfile.mkdtemp(prefix="pybox-nonroot-"))
    try:
        os.chown(parent, account.pw_uid, account.pw_gid)
        yield parent / "state"
    finally:
        shutil.rmtree(parent, ignore_errors=True)


def as_user(argv: list[str], state: Path, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    home = pwd.getpwnam(USER).pw_dir
    return subprocess.run(
        [
            "runuser",
            "-u",
            USER,
            "--",
            "env",
            "-u",
            "PYBOX_PLATFORM",
            f"HOME={home}",
            f"PYBOX_STATE_DIR={state}",
            USER_PYBOX,
            *argv,
        ],
        input=stdin,
        capture_output=True,
        cwd=home,
        timeout=120,
        check=False,
    )


def test_the_dry_run_says_what_the_build_needs_and_changes_nothing(fresh_state: Path) -> None:
    setup = as_user(["setup"], fresh_state)
    text = setup.stderr.decode()
    assert setup.returncode == 0, text
    assert f"build:  as {USER}, not root: the tree is made with mmdebstrap --mode=unshare" in text
    assert "privileges: no root" in text
    assert "found:   mmdebstrap" in text and "MISSING" not in text
    assert "needs root" not in text
    assert "Run `pybox setup --yes` to do this." in text
    assert not fresh_state.exists()


def test_another_users_image_is_named_instead_of_a_loop(
    engine: Engine, engine_name: str, fresh_state: Path
) -> None:
    if engine_name != "docker":
        pytest.skip(DOCKER_ONLY)
    reference = plan_stdlib(engine, StateStore(fresh_state)).reference
    if engine.inspect_image(reference) is None:
        pytest.skip(f"the engine holds no {reference} built under another state")
    ran = as_user(["exec", "-"], fresh_state, stdin=b"print(1)\n")
    assert ran.returncode == 125
    text = ran.stderr.decode()
    assert f"The engine holds a pybox stdlib image, {reference}" in text
    assert "another user's pybox built it" in text and "without sudo" in text
    doctor = as_user(["doctor", "--json"], fresh_state)
    assert doctor.returncode == 125
    report = json.loads(doctor.stdout)
    assert report["ok"] is False
    assert report["engine"]["reachable"] is True  # the docker group is enough
    stdlib = next(p for p in report["problems"] if p["what"] == "stdlib image")
    assert "another user's pybox built it" in stdlib["detail"]


def test_a_session_without_the_docker_group_is_told_to_log_in_again(fresh_state: Path) -> None:
    # The user is in the docker group, but this process drops it, as a login
    # session started before `usermod -aG docker` would lack it.
    home = pwd.getpwnam(USER).pw_dir
    doctor = subprocess.run(
        [
            "setpriv",
            f"--reuid={USER}",
            f"--regid={pwd.getpwnam(USER).pw_gid}",
            "--clear-groups",
            "env",
            f"HOME={home}",
            f"PYBOX_STATE_DIR={fresh_state}",
            USER_PYBOX,
            "doctor",
        ],
        capture_output=True,
        cwd=home,
        timeout=60,
        check=False,
    )
    out = doctor.stdout.decode()
    assert doctor.returncode == 125, out
    assert "permission denied" in out
    assert f"next:   {USER} is in the docker group but this login session is not yet" in out
    assert "systemctl start docker" not in out
    assert "boxes:  unknown: engine unreachable" in out
