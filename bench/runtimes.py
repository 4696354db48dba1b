"""Cold and warm runs under runc and gVisor, interleaved in the same run.

    python -m bench.runtimes [--rounds N]

Cold: a fresh box per run (in-process `Session.run`, and a whole `pybox exec`
process). Warm: a box from the warm pool, filled before each run. Rounds
alternate runc and gvisor so drift on the machine hits both alike. Needs the
engine to have gVisor registered (`pybox doctor`). Figures: docs/performance.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

from pybox._adapters.config import load_settings
from pybox._adapters.state import StateStore
from pybox._core.pool import PoolSettings
from pybox._core.request import RunRequest
from pybox._core.runtimes import LANES, RuntimePolicy
from pybox._orchestration.hosts import open_host
from pybox._orchestration.session import Session

CODE = b"print(6*7)\n"


def _session(lane: str, *, pool: bool) -> Session:
    settings = load_settings(os.environ)
    host = open_host(settings, os.environ)
    return Session(
        host.connect,
        StateStore(settings.state_dir),
        settings.policy,
        host=host,
        pool=PoolSettings() if pool else None,
        runtimes=RuntimePolicy(default=lane),
    )


def one_round(lane: str, times: dict[str, list[float]]) -> None:
    request = RunRequest(code=CODE)
    cold = _session(lane, pool=False)
    cold.run(request)  # the session's first sweep and checks, not timed
    started = time.monotonic()
    cold.run(request)
    times[f"{lane} fresh box"].append(time.monotonic() - started)
    warm = _session(lane, pool=True)
    try:
        warm.warm_up(request, wait_s=30)
        started = time.monotonic()
        outcome = warm.run(request)
        times[f"{lane} warm box"].append(time.monotonic() - started)
        assert outcome.receipt.observed_by_pybox.box_source == "warm_pool"
    finally:
        warm.close()
    started = time.monotonic()
    subprocess.run(
        [sys.executable, "-m", "pybox", "exec", "--quiet", "--runtime", lane, "-"],
        input=CODE,
        capture_output=True,
        check=True,
    )
    times[f"{lane} pybox exec"].append(time.monotonic() - started)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.runtimes")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    times: dict[str, list[float]] = {
        f"{lane} {kind}": [] for kind in ("fresh box", "warm box", "pybox exec") for lane in LANES
    }
    for _ in range(args.rounds):
        for lane in LANES:
            one_round(lane, times)
    for name, values in times.items():
        print(
            f"{name:24} median {statistics.median(values):.3f} s  "
            f"min {min(values):.3f}  max {max(values):.3f}  (n={len(values)})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
