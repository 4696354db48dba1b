"""`pybox setup` for a user who is not root, and after `sudo pybox setup`."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pybox._adapters.state import StateStore
from pybox._core.errors import ImageError
from pybox._core.images import LABEL_IMAGE
from pybox._features.images.records import plan_stdlib, sudo_problem
from pybox._frontends.cli import main
from tests.unit.conftest import make_session
from tests.unit.fake_engine import FakeEngine

MIRROR = "http://mirror.invalid/debian"


def test_sudo_would_record_the_image_in_roots_state(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    problem = sudo_problem({"SUDO_USER": "ada"}, "/root/.local/state/pybox")
    assert problem is not None
    assert "root's state (/root/.local/state/pybox)" in problem
    assert "Run `pybox setup --yes` as ada, without sudo" in problem
    # Meant on purpose, plain root, or not root at all: no problem.
    assert sudo_problem({"SUDO_USER": "ada", "PYBOX_STATE_DIR": "/srv/x"}, "/srv/x") is None
    assert sudo_problem({}, "/root/.local/state/pybox") is None
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert sudo_problem({"SUDO_USER": "ada"}, "/home/ada/.local/state/pybox") is None


def test_an_image_recorded_only_in_another_users_state_is_named_not_looped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = FakeEngine()
    empty = StateStore(tmp_path / "mine")
    reference = plan_stdlib(engine, empty, mirror=MIRROR, suite="bookworm").reference
    engine.images[reference] = {
        "Id": "sha256:" + "cd" * 32,
        "Config": {"Labels": {LABEL_IMAGE: "stdlib"}},
    }
    # This machine's recipe is the one the other user built.
    monkeypatch.setattr(
        "pybox._features.images.records.plan_stdlib",
        lambda engine, state: plan_stdlib(engine, state, mirror=MIRROR, suite="bookworm"),
    )
    session = make_session(engine, empty)
    with pytest.raises(ImageError) as raised:
        session.image("stdlib")
    message = str(raised.value)
    assert f"The engine holds a pybox stdlib image, {reference}" in message
    assert "another user's pybox built it" in message
    assert "without sudo" in message and "needs no root" in message


def test_without_another_users_image_the_advice_is_to_build(tmp_path: Path) -> None:
    session = make_session(FakeEngine(), StateStore(tmp_path / "mine"))
    with pytest.raises(ImageError, match=r"Build it with `pybox setup --yes`"):
        session.image("stdlib")


def test_setup_with_no_engine_names_the_fix_and_what_the_build_needs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PYBOX_PLATFORM", "linux")
    monkeypatch.setenv("PYBOX_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path / 'docker.sock'}")
    assert main(["setup"]) == 125
    err = capsys.readouterr().err
    assert "engine: UNREACHABLE: Cannot reach the container engine" in err
    assert f"next: DOCKER_HOST names {tmp_path / 'docker.sock'}, which does not exist" in err
    assert "sudo apt-get install docker.io && sudo systemctl start docker" in err
    assert "  build:  as " in err and "it needs:" in err
    assert "Nothing was changed." in err
    assert not (tmp_path / "state").exists()


def test_setup_as_a_user_says_what_needs_privileges_and_what_is_missing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PYBOX_PLATFORM", "linux")
    monkeypatch.setenv("PYBOX_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path / 'docker.sock'}")
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setattr("shutil.which", lambda name: None)
    assert main(["setup"]) == 125
    err = capsys.readouterr().err
    assert "not root: the tree is made with mmdebstrap --mode=unshare (no root needed)" in err
    assert "privileges: no root" in err
    assert "MISSING: mmdebstrap -> next: sudo apt-get install mmdebstrap" in err
    assert "needs root" not in err
