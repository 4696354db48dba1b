"""`pybox doctor`: its exit code, its `ok`, counts it could not take, and the next step."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from pybox._core.errors import EngineUnavailable
from pybox._engine import DockerEngine, EngineEndpoint
from pybox._engine.errors import unreachable
from pybox._frontends.cli import main
from pybox._orchestration.doctor import ENGINE_UNREACHABLE, diagnose
from pybox._orchestration.engine_steps import START_ENGINE, access_step, engine_next_step


@pytest.fixture
def no_engine(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("PYBOX_PLATFORM", "linux")
    monkeypatch.setenv("PYBOX_STATE_DIR", str(tmp_path / "state"))
    socket_path = tmp_path / "docker.sock"
    monkeypatch.setenv("DOCKER_HOST", f"unix://{socket_path}")
    return socket_path


def test_an_unreachable_engine_fails_and_counts_nothing(
    no_engine: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["doctor"]) == 125
    out = capsys.readouterr().out
    assert f"boxes:  {ENGINE_UNREACHABLE}" in out
    assert f"images: {ENGINE_UNREACHABLE}" in out
    assert "0 pybox box" not in out
    assert "NOT ok: 1 problem found" in out
    assert "no problems found" not in out


def test_the_json_report_has_ok_and_says_what_it_did_not_check(
    no_engine: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["doctor", "--json"]) == 125
    report = json.loads(capsys.readouterr().out)
    assert report["doctor_version"] == 1
    assert report["ok"] is False
    assert "boxes" not in report and "images" not in report
    assert report["unchecked"] == {"boxes": ENGINE_UNREACHABLE, "images": ENGINE_UNREACHABLE}
    assert report["engine"]["reachable"] is False


def test_a_docker_host_socket_that_does_not_exist_names_docker_host(no_engine: Path) -> None:
    report = diagnose(os.environ)
    (step,) = report["next"]
    assert step.startswith(f"DOCKER_HOST names {no_engine}, which does not exist")
    assert "sudo apt-get install docker.io && sudo systemctl start docker" in step


def test_a_usual_socket_that_does_not_exist_says_install_and_start() -> None:
    missing = FileNotFoundError(2, "No such file or directory")
    exc = EngineUnavailable("Cannot reach the container engine")
    exc.__cause__ = missing
    step = engine_next_step(exc, "/var/run/docker.sock", START_ENGINE, found_by="usual path")
    assert step == "sudo apt-get install docker.io && sudo systemctl start docker"


def test_permission_denied_says_join_the_group_not_start_docker(
    no_engine: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    no_engine.write_bytes(b"")

    def refuse(cls: type[DockerEngine], endpoint: EngineEndpoint) -> DockerEngine:
        denied = PermissionError(13, "Permission denied")
        raise unreachable(endpoint, denied) from denied

    monkeypatch.setattr(DockerEngine, "connect", classmethod(refuse))
    assert main(["doctor"]) == 125
    out = capsys.readouterr().out
    assert "permission denied" in out
    assert "group and log in again" in out or "log out and in again" in out
    assert "systemctl start docker" not in out


def test_the_group_step_tells_a_member_to_log_in_again() -> None:
    joined = access_step("ada", "docker", listed=True, active=False)
    assert "ada is in the docker group but this login session is not yet" in joined
    assert "usermod" not in joined
    outside = access_step("ada", "docker", listed=False, active=False)
    assert outside.startswith("add your user to the docker group and log in again")
    assert "sudo usermod -aG docker ada" in outside
