"""The baseline: `docker run --rm -i` with pybox's hardening, on the image pybox used."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence

from bench._values import (
    BENCH_LABEL,
    CODE,
    DOCKER_TIMEOUT_S,
    PATH_DOCKER,
    BenchFailure,
    Context,
    Outcome,
    check_stdout,
)


def docker_hardening(limits: Mapping[str, float]) -> list[str]:
    """`docker run` flags for pybox's posture (src/pybox/_core/posture.py) and these limits."""
    memory = int(limits["memory_bytes"])
    writable = int(limits["writable_bytes"])
    open_files = int(limits["open_files"])
    return [
        "--network", "none",
        "--read-only",
        "--cap-drop", "ALL",
        "--security-opt", "no-new-privileges",
        "--user", "1000:1000",
        "--memory", f"{memory}b",
        "--memory-swap", f"{memory}b",
        "--cpus", f"{limits['cpus']:g}",
        "--pids-limit", str(int(limits["pids"])),
        "--ulimit", f"nofile={open_files}:{open_files}",
        "--ulimit", "core=0:0",
        "--ipc", "private",
        "--log-driver", "none",
        "--tmpfs", f"/pybox:rw,nosuid,nodev,noexec,size={writable},uid=1000,gid=1000,mode=0755",
        "--tmpfs", f"/tmp:rw,nosuid,nodev,noexec,size={writable},mode=1777",
        "--shm-size", f"{writable}b",
        "--hostname", "pybox",
        # pybox asks for a private cgroup namespace; docker's default on a cgroup v1
        # host is the host's, so say it explicitly to keep the boxes equivalent.
        "--cgroupns", "private",
    ]  # fmt: skip


# Podman's default RLIMIT_NPROC (1048576) is above what runc may set here, so a
# `podman run` fails without one (pybox's PodmanEngine sends the same value).
PODMAN_NPROC = 16384


def podman_hardening(limits: Mapping[str, float]) -> list[str]:
    """The same box for `podman run`: Podman's tmpfs says `U` (owned by the box's
    user) where Docker's takes uid= and gid=, and RLIMIT_NPROC must be explicit."""
    flags = [
        flag.replace(",uid=1000,gid=1000,", ",U,") if flag.startswith("/pybox:") else flag
        for flag in docker_hardening(limits)
    ]
    return [*flags, "--ulimit", f"nproc={PODMAN_NPROC}:{PODMAN_NPROC}"]


# The program as `docker run` is told to run it; `bench/cli_startup.py` passes
# ("/usr/bin/python3", "-") to read it from stdin, as `pybox exec -` does.
PYTHON_C_CODE = ("/usr/bin/python3", "-c", CODE)


def docker_argv(
    image_id: str,
    limits: Mapping[str, float],
    token: str,
    command: Sequence[str] = PYTHON_C_CODE,
) -> list[str]:
    return engine_run_argv("docker", image_id, limits, token, command)


def engine_run_argv(
    engine: str,
    image_id: str,
    limits: Mapping[str, float],
    token: str,
    command: Sequence[str] = PYTHON_C_CODE,
) -> list[str]:
    """The engine's own `run --rm -i` of the box pybox makes (Podman with runc:
    crun refuses this machine's hybrid cgroup layout, docs/engines.md)."""
    podman = engine == "podman"
    return [
        *(("podman", "--runtime", "runc") if podman else ("docker",)), "run", "--rm", "-i",
        *(podman_hardening(limits) if podman else docker_hardening(limits)),
        "--label", f"{BENCH_LABEL}={token}",
        image_id,
        *command,
    ]  # fmt: skip


def call_docker(ctx: Context) -> Outcome:
    # stdin is /dev/null: `-i` still attaches it, as pybox attaches stdin, and the
    # program sees end-of-file at once.
    try:
        done = subprocess.run(
            docker_argv(ctx.image_id, ctx.limits, ctx.token),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=DOCKER_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise BenchFailure(f"docker: no result within {DOCKER_TIMEOUT_S:.0f} s") from exc
    check_stdout(PATH_DOCKER, done.stdout, f"(exit {done.returncode}, {done.stderr[-500:]!r})")
    return Outcome()
