"""bench/engines.py and the engine-aware pieces of the benchmarks, without an engine:
the Podman baseline is the same box as Docker's in Podman's words."""

from __future__ import annotations

import argparse

import pytest
from bench import _docker, _environment, engines

LIMITS = {
    "memory_bytes": 512 * 1024 * 1024,
    "writable_bytes": 64 * 1024 * 1024,
    "open_files": 256,
    "cpus": 1.0,
    "pids": 128,
}


def test_podman_s_run_is_docker_s_box_in_podman_s_words() -> None:
    docker = _docker.docker_hardening(LIMITS)
    podman = _docker.podman_hardening(LIMITS)
    pybox_tmpfs = [flag for flag in podman if flag.startswith("/pybox:")]
    assert pybox_tmpfs == [f"/pybox:rw,nosuid,nodev,noexec,size={64 * 1024 * 1024},U,mode=0755"]
    # Every other flag is Docker's, plus the RLIMIT_NPROC Podman needs here.
    assert [f for f in podman if not f.startswith("/pybox:")][:-2] == [
        f for f in docker if not f.startswith("/pybox:")
    ]
    assert podman[-2:] == ["--ulimit", f"nproc={_docker.PODMAN_NPROC}:{_docker.PODMAN_NPROC}"]
    argv = _docker.engine_run_argv("podman", "sha256:abc", LIMITS, "tok")
    assert argv[:6] == ["podman", "--runtime", "runc", "run", "--rm", "-i"]
    assert argv[-4:] == ["sha256:abc", *_docker.PYTHON_C_CODE]
    assert _docker.engine_run_argv("docker", "sha256:abc", LIMITS, "tok") == (
        _docker.docker_argv("sha256:abc", LIMITS, "tok")
    )


def test_the_owner_column_is_asked_for_in_each_cli_s_template() -> None:
    assert ".Label " in _environment._owner_format("docker")
    assert "index .Labels" in _environment._owner_format("podman")


def test_podman_runs_get_its_socket_and_state_and_never_docker_s_host(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///var/run/docker.sock")
    monkeypatch.setenv("PYBOX_ENGINE", "docker")
    args = argparse.Namespace(podman_host="unix:///run/p.sock", podman_state_dir="/tmp/p")
    env = engines.engine_environ(args, "podman")
    assert "DOCKER_HOST" not in env
    assert (env["PYBOX_ENGINE"], env["CONTAINER_HOST"], env["PYBOX_STATE_DIR"]) == (
        "podman",
        "unix:///run/p.sock",
        "/tmp/p",
    )
    docker = engines.engine_environ(args, "docker")
    assert "PYBOX_ENGINE" not in docker and "CONTAINER_HOST" not in docker


def test_podman_without_its_socket_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        engines.parse_args(["--engines", "podman", "--podman-host", ""])
    assert stop.value.code == 2
    assert "--podman-state-dir" in capsys.readouterr().err
