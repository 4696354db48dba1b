"""Benchmark: what the Colima code path adds to a run, measured on this machine.

Each round runs `print(6*7)` once on each path, in an order that changes from
round to round:

* ``local``          -- ``Client.run`` on the local-engine path.
* ``colima``         -- ``Client.run`` on the Colima path, with the scripted fake
  ``colima`` of the test suite: its ``status --json`` names this machine's
  engine socket and its ``ssh`` runs the counter read here. So this measures
  pybox's own work on that path (the VM read-back per session, one ``colima
  ssh`` subprocess per kernel sample) but not a real VM's SSH latency.
* ``colima_fresh``   -- a new ``Client`` per run on the Colima path: adds the
  per-session checks (``colima version``, ``colima status --json``, reading the
  profile's two YAML files).

Output: p50 and p95 wall time in ms per path, the ratio of each Colima path's
p50 to the local p50 (the baseline measured in the same run), and the median
number of kernel samples per run. Every run must print exactly "42".

Run from the repository root: ``python bench/colima_path.py [--rounds N]``.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

# Run as a script, this file's folder is on the path, not the repository root.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._stats import percentile
from bench.fake_colima import install_fake_colima
from pybox import Client
from pybox._adapters.state import default_state_dir
from pybox._engine import find_endpoint


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    base_env = dict(os.environ)
    socket = find_endpoint(base_env).socket_path
    with tempfile.TemporaryDirectory(prefix="pybox-bench-colima-") as scratch:
        root = Path(scratch)
        fake = install_fake_colima(root / "bin", running=False, docker_socket=f"unix://{socket}")
        home = root / "home"
        home.mkdir()
        state = root / "state"
        state.mkdir()
        images = default_state_dir(base_env) / "images.json"
        (state / "images.json").write_bytes(images.read_bytes())
        colima_env = dict(
            base_env,
            HOME=str(home),
            PYBOX_PLATFORM="colima",
            PYBOX_COLIMA=str(fake.colima),
            PYBOX_DOCKER_CLI=str(fake.docker),
            PYBOX_STATE_DIR=str(state),
        )
        local_env = dict(base_env, PYBOX_STATE_DIR=str(state))
        local_env.pop("PYBOX_PLATFORM", None)
        vm_start = subprocess.run(
            [sys.executable, "-m", "pybox", "vm", "start"], env=colima_env, check=False
        )
        if vm_start.returncode != 0:
            return 1
        local, colima = Client(environ=local_env), Client(environ=colima_env)
        paths: dict[str, Callable[[], object]] = {
            "local": lambda: local.run("print(6*7)"),
            "colima": lambda: colima.run("print(6*7)"),
            "colima_fresh": lambda: Client(environ=colima_env).run("print(6*7)"),
        }
        walls: dict[str, list[float]] = {name: [] for name in paths}
        samples: dict[str, list[int]] = {name: [] for name in paths}
        for round_number in range(args.rounds + 2):
            order = list(paths)
            random.shuffle(order)
            for name in order:
                started = time.perf_counter()
                result = paths[name]()
                elapsed = (time.perf_counter() - started) * 1000
                stdout = getattr(result, "stdout", "")
                if stdout.strip() != "42":
                    print(f"{name}: unexpected output {stdout!r}", file=sys.stderr)
                    return 1
                if round_number >= 2:  # two warm-up rounds
                    walls[name].append(elapsed)
                    receipt = getattr(result, "receipt", None)
                    samples[name].append(receipt.observed_by_kernel.samples if receipt else 0)
    baseline = percentile(walls["local"], 50)
    print(f"rounds: {args.rounds} (after 2 warm-up rounds); wall time in ms")
    for name, values in walls.items():
        p50 = percentile(values, 50)
        print(
            f"{name:<13} p50 {p50:7.1f}  p95 {percentile(values, 95):7.1f}  "
            f"x{p50 / baseline:4.2f} of local  kernel samples p50 "
            f"{percentile(samples[name], 50):g}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
