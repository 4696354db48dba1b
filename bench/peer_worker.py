"""One peer sandbox library, driven one call per request (run by `bench/compare.py`).

This file runs inside the throwaway virtual environment that `compare.py
--peers` makes for the peer, never in pybox's own environment, so it uses only
the standard library plus the peer, imported by name at run time.

The interpreter and the library are loaded once; each request line on stdin
makes exactly one sandbox call, timed here around the library call alone, and
one JSON line answers on the protocol stream: {"wall_s", "stdout"} or
{"error"}. The process's own stdout is pointed at stderr first, because the
peers log there (epicbox's structlog does) and would corrupt the protocol.

Argument: one JSON object {"peer", "image", "label", "token", "code",
"memory_mib", "pids"}.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any


def _label_every_container(label: str, token: str) -> None:
    """Both peers create containers through docker-py; label each so the
    benchmark can find (and, after a crash, remove) exactly what it started."""
    containers: Any = importlib.import_module("docker.models.containers")
    original = containers.ContainerCollection.create

    def create(self: Any, *args: Any, **kwargs: Any) -> Any:
        kwargs["labels"] = {**(kwargs.get("labels") or {}), label: token}
        return original(self, *args, **kwargs)

    containers.ContainerCollection.create = create


def _llm_sandbox(config: dict[str, Any]) -> Callable[[], str]:
    docker: Any = importlib.import_module("docker")
    llm_sandbox: Any = importlib.import_module("llm_sandbox")
    client = docker.from_env()
    runtime = {
        # Without an init the container's PID 1 ignores SIGTERM and the
        # session's close waits out docker's 10 s stop timeout.
        "init": True,
        "network_disabled": True,
        "network_mode": "none",
        "mem_limit": f"{config['memory_mib']}m",
        "memswap_limit": f"{config['memory_mib']}m",
        "pids_limit": config["pids"],
    }

    def call() -> str:
        with llm_sandbox.SandboxSession(
            client=client,
            lang="python",
            image=config["image"],
            keep_template=True,  # never remove the benchmark's image
            skip_environment_setup=True,  # no pip inside a box without a network
            runtime_configs=dict(runtime),
        ) as session:
            result = session.run(config["code"])
        return str(result.stdout)

    return call


def _epicbox(config: dict[str, Any]) -> Callable[[], str]:
    epicbox: Any = importlib.import_module("epicbox")
    epicbox.configure(
        profiles=[
            epicbox.Profile("python", config["image"], user="1000:1000", network_disabled=True)
        ]
    )
    files = [{"name": "main.py", "content": config["code"].encode()}]
    limits = {"cputime": 10, "realtime": 30, "memory": config["memory_mib"]}
    limits["processes"] = config["pids"]

    def call() -> str:
        result = epicbox.run("python", "python3 main.py", files=files, limits=limits)
        if result.get("exit_code") != 0:
            raise RuntimeError(f"epicbox run failed: {result!r}")
        return bytes(result["stdout"]).decode("utf-8", "replace")

    return call


PEERS = {"llm_sandbox": _llm_sandbox, "epicbox": _epicbox}


def main() -> int:
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    config = json.loads(sys.argv[1])
    _label_every_container(config["label"], config["token"])
    call = PEERS[config["peer"]](config)
    protocol.write(json.dumps({"ready": True}) + "\n")
    for _line in sys.stdin:
        try:
            start = time.perf_counter()
            stdout = call()
            answer: dict[str, Any] = {"wall_s": time.perf_counter() - start, "stdout": stdout}
        except Exception as exc:  # reported to the benchmark, which stops the run
            traceback.print_exc()
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        protocol.write(json.dumps(answer) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
