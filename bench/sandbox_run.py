"""Benchmark: a `run` in an existing sandbox, against a warm one-shot run and
against `docker exec` into an idle hardened container, measured in the same run.

Run from the repository root: ``python bench/sandbox_run.py [--rounds N] [--json]``.

Paths, interleaved round by round (the order rotates):

* ``sandbox_run``   -- ``Sandboxes.run`` of ``print(6*7)`` in a sandbox made
  before measuring: take its lock, re-read its record, read its posture back,
  attach, find its place in the stream, run a fresh interpreter, record the run.
* ``warm_one_shot`` -- ``Session.run`` of the same program with a warm pool
  (refilled, unmeasured, between calls): a fresh box already started.
* ``docker_exec``   -- ``docker exec`` of ``python3 -c 'print(6*7)'`` in a
  container of the same image started with pybox's hardening flags (the
  baseline: a process in a box that already runs, through the docker CLI).

Ratios divide each path's p50 by docker_exec's p50 from the same run.
"""

from __future__ import annotations

import argparse
import json
import secrets
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._docker import docker_hardening
from bench._stats import percentile
from bench._values import BENCH_LABEL, CODE
from pybox._core.request import RunRequest
from pybox._features.sandboxes.records import RUN_PROGRAM
from pybox._orchestration.session import Session

PATHS = ("sandbox_run", "warm_one_shot", "docker_exec")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    session = Session.open(warm_pool=True)
    sandboxes = session.sandboxes()
    info = sandboxes.create()
    prepared = session.prepare(RunRequest(code=CODE.encode()))
    name = f"pybox-bench-exec-{secrets.token_hex(4)}"
    limits = prepared.limits.to_dict()
    subprocess.run(
        ["docker", "run", "-d", "--rm", "--name", name, "--label", f"{BENCH_LABEL}=1",
         *docker_hardening(limits), "--entrypoint", "sleep", prepared.image.image_id, "3600"],
        check=True, capture_output=True,
    )  # fmt: skip
    samples: dict[str, list[float]] = {path: [] for path in PATHS}
    try:
        session.warm_up(wait_s=30)

        def sandbox_run() -> bytes:
            request = RunRequest(code=CODE.encode(), code_name=RUN_PROGRAM)
            return sandboxes.run(info.sandbox_id, request).stdout

        def warm_one_shot() -> bytes:
            return session.run(session.prepare(RunRequest(code=CODE.encode()))).stdout

        def docker_exec() -> bytes:
            argv = ["docker", "exec", name, "/usr/bin/python3", "-c", CODE]
            return subprocess.run(argv, check=True, capture_output=True).stdout

        calls = {"sandbox_run": sandbox_run, "warm_one_shot": warm_one_shot,
                 "docker_exec": docker_exec}  # fmt: skip
        for index in range(args.rounds + 3):
            order = PATHS[index % 3 :] + PATHS[: index % 3]
            for path in order:
                started = time.perf_counter()
                out = calls[path]()
                elapsed = time.perf_counter() - started
                if out != b"42\n":
                    raise SystemExit(f"{path} printed {out!r}, not 42")
                if index >= 3:  # the first rounds warm up
                    samples[path].append(elapsed)
                if path == "warm_one_shot":
                    session.warm_up(wait_s=10)  # unmeasured refill
    finally:
        sandboxes.destroy(info.sandbox_id)
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)
        session.close()
    p50 = {path: percentile(values, 50) * 1000 for path, values in samples.items()}
    report = {
        "rounds": args.rounds,
        "p50_ms": {path: round(value, 1) for path, value in p50.items()},
        "p95_ms": {path: round(percentile(v, 95) * 1000, 1) for path, v in samples.items()},
        "ratio_to_docker_exec_p50": {
            path: round(value / p50["docker_exec"], 2) for path, value in p50.items()
        },
        "sandbox_run_to_warm_one_shot_p50": round(p50["sandbox_run"] / p50["warm_one_shot"], 2),
    }
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for path in PATHS:
            print(
                f"{path:14} p50 {report['p50_ms'][path]:7.1f} ms  p95 {report['p95_ms'][path]:7.1f}"
                f" ms  x{report['ratio_to_docker_exec_p50'][path]:.2f} docker exec"
            )
        print(f"sandbox_run / warm_one_shot p50: x{report['sandbox_run_to_warm_one_shot_p50']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
