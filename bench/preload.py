"""Benchmark: the data program in preloaded warm boxes against its own cold runs.

The program is what users of the ``data`` image run: ``import numpy, pandas,
matplotlib``, a small frame, a plot saved to a file. Four paths, each once per
round, in an order that rotates from round to round:

* ``client_cold`` -- ``pybox.run_container(..., image="data")``: a one-shot
  call, no warm pool; the box is created, verified and started for the run and
  its interpreter imports everything itself.
* ``client_warm`` -- ``Client.run(..., image="data")`` on one reused ``Client``
  whose warm pool holds boxes of the data image, each of which has imported the
  image's preload list (numpy, pandas, matplotlib, matplotlib.pyplot) before
  the code arrives. Target (issue 19): p50 at most 0.1x ``client_cold``'s.
* ``mcp_cold`` -- ``run_python`` with ``image: data`` to a ``pybox mcp`` server
  over stdio whose pool is off (``PYBOX_POOL_BOXES=0``, ``PYBOX_POOL_MAX_BOXES=0``).
* ``mcp_warm`` -- the same call to a second server with its pool on. Target:
  p50 at most 0.1x ``mcp_cold``'s.

After each warm call the benchmark sleeps ``--think-s`` (unmeasured) so the
pool can start and preload the next box, as an agent's think-time would. Every
run must print the program's line; warm hits are counted from each receipt's
``box_source``, and each warm receipt's preload report is kept (modules, the
imports' seconds, the resident memory they added, the objects ``gc.freeze()``
moved to the permanent generation after them and its seconds), and each run's
``run_duration_s`` (code sent to the exit report: the program's own time,
its interpreter's exit included) gives a "program p50" per path, and the
receipt's ``removed_s`` less its ``program_ended_s`` (the exit report to the
engine's confirmed removal) a "teardown p50". The ``data`` image must be
recorded with modules to preload (``pybox image build data``).

Run from the repository root: ``python bench/preload.py [--rounds N] [--json]``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import suppress
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench._environment import loadavg, machine_facts
from bench._mcp_client import PYBOX_MCP_ARGV, McpClient
from bench._stats import percentile
from pybox import Client, run_container

DATA_PROGRAM = """\
import numpy, pandas, matplotlib
import matplotlib.pyplot as plt
frame = pandas.DataFrame({"x": numpy.arange(20), "y": numpy.arange(20) ** 2})
figure, axes = plt.subplots()
axes.plot(frame["x"], frame["y"])
figure.savefig("/tmp/plot.png")
print("plotted", len(frame), int(frame["y"].sum()))
"""
EXPECTED = "plotted 20 2470"
PATHS = ("client_cold", "client_warm", "mcp_cold", "mcp_warm")
TARGET_RATIO = 0.1


def _mcp_call(client: McpClient) -> dict[str, Any]:
    params = {"name": "run_python", "arguments": {"code": DATA_PROGRAM, "image": "data"}}
    result = client.request("tools/call", params, 120.0) or {}
    structured = result.get("structuredContent") or {}
    if result.get("isError") or EXPECTED not in json.dumps(structured):
        raise SystemExit(f"run_python failed: {json.dumps(result)[:800]}")
    receipt = structured.get("receipt") or {}
    return dict(receipt)


def _checked(result: Any) -> dict[str, Any]:
    if not result.ok or EXPECTED not in str(result.stdout):
        raise SystemExit(f"the data program failed: {result.stderr!r}")
    return dict(result.receipt.to_dict())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--think-s", type=float, default=4.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    started_at = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    load_before = loadavg()
    env_cold = dict(os.environ, PYBOX_POOL_BOXES="0", PYBOX_POOL_MAX_BOXES="0")
    mcp_cold = _mcp_with_env(env_cold)
    mcp_warm = McpClient(PYBOX_MCP_ARGV, subprocess.DEVNULL)
    mcp_warm.initialize()
    client = Client()
    walls: dict[str, list[float]] = {path: [] for path in PATHS}
    sources: dict[str, list[str]] = {path: [] for path in PATHS}
    # The program's own time by pybox's clock: code sent to its exit report.
    programs: dict[str, list[float]] = {path: [] for path in PATHS}
    # The box's end by pybox's clock: the exit report to the engine's confirmed
    # removal (the engine's exit handling, the final inspect, remove, confirm).
    teardowns: dict[str, list[float]] = {path: [] for path in PATHS}
    preloads: list[dict[str, Any]] = []

    calls: dict[str, Callable[[], dict[str, Any]]] = {
        "client_cold": lambda: _checked(run_container(DATA_PROGRAM, image="data", timeout_s=60)),
        "client_warm": lambda: _checked(client.run(DATA_PROGRAM, image="data", timeout_s=60)),
        "mcp_cold": lambda: _mcp_call(mcp_cold),
        "mcp_warm": lambda: _mcp_call(mcp_warm),
    }
    try:
        for number in range(args.warmup + args.rounds):
            shift = number % len(PATHS)
            for path in PATHS[shift:] + PATHS[:shift]:
                began = time.perf_counter()
                receipt = calls[path]()
                wall = time.perf_counter() - began
                if path.endswith("_warm"):
                    time.sleep(args.think_s)
                if number < args.warmup:
                    continue
                walls[path].append(wall)
                source = (receipt.get("observed_by_pybox") or {}).get("box_source")
                sources[path].append(str(source))
                observed = receipt.get("observed_by_pybox") or {}
                program_s = observed.get("run_duration_s")
                if isinstance(program_s, int | float):
                    programs[path].append(float(program_s))
                ended_s, removed_s = observed.get("program_ended_s"), observed.get("removed_s")
                if isinstance(ended_s, int | float) and isinstance(removed_s, int | float):
                    teardowns[path].append(float(removed_s) - float(ended_s))
                report = (receipt.get("reported_by_program") or {}).get("preload")
                if path.endswith("_warm") and source == "warm_pool" and report:
                    preloads.append(report)
    finally:
        client.close()
        for server in (mcp_cold, mcp_warm):
            with suppress(Exception):
                server.close()
    stats: dict[str, dict[str, Any]] = {
        path: {
            "n": len(values),
            "p50_ms": round(percentile(values, 50) * 1000, 1),
            "p95_ms": round(percentile(values, 95) * 1000, 1),
            "min_ms": round(min(values) * 1000, 1),
            "max_ms": round(max(values) * 1000, 1),
            "warm_hits": sum(s == "warm_pool" for s in sources[path]),
            "program_p50_ms": _ms(_p50(programs[path])),
            "teardown_p50_ms": _ms(_p50(teardowns[path])),
        }
        for path, values in walls.items()
    }
    ratios = {
        "client_warm / client_cold": stats["client_warm"]["p50_ms"]
        / stats["client_cold"]["p50_ms"],
        "mcp_warm / mcp_cold": stats["mcp_warm"]["p50_ms"] / stats["mcp_cold"]["p50_ms"],
    }
    report = {
        "started_at": started_at,
        "load_before": load_before,
        "load_after": loadavg(),
        "machine": machine_facts(),
        "rounds": args.rounds,
        "think_s": args.think_s,
        "stats": stats,
        "ratios": {key: round(value, 3) for key, value in ratios.items()},
        "targets": {
            key: "PASS" if value <= TARGET_RATIO else "MISS" for key, value in ratios.items()
        },
        "preload": {
            "seconds_p50": _p50(p.get("seconds") for p in preloads),
            "added_rss_mib_p50": _p50((p.get("added_rss_bytes") or 0) / 2**20 for p in preloads),
            "frozen_objects_p50": _p50(p.get("frozen_objects") for p in preloads),
            "freeze_s_p50": _p50(p.get("freeze_s") for p in preloads),
            "fallbacks": sum(1 for p in preloads if p.get("fallback")),
            "reports": len(preloads),
        },
    }
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print("| path | n | p50 | p95 | min | max | warm hits | program p50 | teardown p50 |")
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        for path, row in stats.items():
            print(
                f"| {path} | {row['n']} | {row['p50_ms']} ms | {row['p95_ms']} ms | "
                f"{row['min_ms']} ms | {row['max_ms']} ms | {row['warm_hits']} of {row['n']} | "
                f"{row['program_p50_ms']} ms | {row['teardown_p50_ms']} ms |"
            )
        for key, value in ratios.items():
            print(f"{key}: {value:.3f}x ({report['targets'][key]} at {TARGET_RATIO}x)")
        print(f"preload: {json.dumps(report['preload'])}; load {load_before} -> {loadavg()}")
    return 0


def _p50(values: Any) -> float | None:
    found = [float(v) for v in values if v is not None]
    return round(percentile(found, 50), 3) if found else None


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 1)


def _mcp_with_env(env: dict[str, str]) -> McpClient:
    saved = dict(os.environ)
    os.environ.update(env)
    try:
        client = McpClient(PYBOX_MCP_ARGV, subprocess.DEVNULL)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    client.initialize()
    return client


if __name__ == "__main__":
    sys.exit(main())
