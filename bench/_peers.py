"""Peer sandbox libraries, each in a throwaway environment, driven by `bench/peer_worker.py`."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from bench._mcp_client import end_child
from bench._values import (
    BENCH_LABEL,
    CODE,
    PEER_LLM_SANDBOX,
    PEER_PACKAGES,
    PEER_SETUP_TIMEOUT_S,
    BenchFailure,
    Context,
    Outcome,
    PathUnavailable,
    check_stdout,
)


class PeerWorker:
    """`bench/peer_worker.py` in a peer's throwaway environment: one call per request."""

    def __init__(self, python: Path, config: dict[str, Any], stderr: IO[bytes]) -> None:
        worker = Path(__file__).with_name("peer_worker.py")
        self._proc = subprocess.Popen(
            [str(python), str(worker), json.dumps(config)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
        self.name = str(config["peer"])
        try:
            self._expect_line()  # {"ready": true} once the library is loaded
        except BenchFailure as exc:
            end_child(self._proc)
            raise PathUnavailable(f"its worker did not start: {exc}") from exc

    def _expect_line(self) -> dict[str, Any]:
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline()
        if not line:
            raise BenchFailure(f"{self.name}: the worker exited (code {self._proc.wait()})")
        answer: dict[str, Any] = json.loads(line)
        if "error" in answer:
            raise BenchFailure(f"{self.name}: {answer['error']}")
        return answer

    def call(self) -> tuple[float, str]:
        assert self._proc.stdin is not None
        self._proc.stdin.write("run\n")
        self._proc.stdin.flush()
        answer = self._expect_line()
        return float(answer["wall_s"]), str(answer["stdout"])

    def close(self) -> None:
        end_child(self._proc)


def call_peer(ctx: Context, name: str) -> Outcome:
    wall_s, stdout = ctx.peers[name].call()
    check_stdout(name, stdout)
    return Outcome(inner_wall_s=wall_s)


def install_peer(name: str, root: Path) -> Path:
    """A throwaway virtual environment with the peer in it (the host's pip configuration)."""
    venv = root / name
    steps = [
        [sys.executable, "-m", "venv", str(venv)],
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", *PEER_PACKAGES[name]],
    ]
    for argv in steps:
        try:
            done = subprocess.run(
                argv, capture_output=True, text=True, timeout=PEER_SETUP_TIMEOUT_S, check=False
            )
        except subprocess.TimeoutExpired as exc:
            raise PathUnavailable(f"{argv[2]} took over {PEER_SETUP_TIMEOUT_S:.0f} s") from exc
        if done.returncode != 0:
            why = " ".join(done.stderr.split())[-500:]
            raise PathUnavailable(f"{' '.join(argv[2:])} failed: {why}")
    return venv / "bin" / "python"


def build_peer_image(image_id: str, token: str) -> str:
    """pybox's image plus a `python` command and a long-running CMD (for llm-sandbox).

    Built from the local image with no network; nothing is pulled. Labelled
    with the run's token so the cleanup removes it.
    """
    tag = f"pybox-bench-peer:{token}"
    dockerfile = (
        f"FROM {image_id}\n"
        "USER 0:0\n"
        'RUN ["/bin/ln", "-s", "python3", "/usr/bin/python"]\n'
        "USER 1000:1000\n"
        'CMD ["/bin/sleep", "infinity"]\n'
    )
    argv = ["docker", "build", "-q", "--network", "none", "--force-rm"]
    argv += ["--label", f"{BENCH_LABEL}={token}", "-t", tag, "-"]
    try:
        done = subprocess.run(
            argv,
            input=dockerfile,
            capture_output=True,
            text=True,
            timeout=PEER_SETUP_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise PathUnavailable(f"building its image took over {PEER_SETUP_TIMEOUT_S:.0f} s") from exc
    if done.returncode != 0:
        raise PathUnavailable(f"building its image failed: {' '.join(done.stderr.split())[-500:]}")
    return tag


def start_peers(
    ctx: Context, names: Sequence[str], root: Path, stderr: IO[bytes]
) -> dict[str, str]:
    """A worker per peer; the peers that could not be set up here, and why."""
    skipped: dict[str, str] = {}
    for name in names:
        try:
            if name == PEER_LLM_SANDBOX:
                ctx.peer_image = build_peer_image(ctx.image_id, ctx.token)
            python = install_peer(name, root)
            config = {
                "peer": name,
                "image": ctx.peer_image if name == PEER_LLM_SANDBOX else ctx.image_id,
                "label": BENCH_LABEL,
                "token": ctx.token,
                "code": CODE,
                "memory_mib": int(ctx.limits["memory_bytes"]) // (1024 * 1024),
                "pids": int(ctx.limits["pids"]),
            }
            ctx.peers[name] = PeerWorker(python, config, stderr)
        except PathUnavailable as exc:
            skipped[name] = str(exc)
    return skipped
