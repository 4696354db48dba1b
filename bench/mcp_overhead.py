"""Benchmark: `print(6*7)` through `pybox mcp` (stdio, run_python) versus the Python API.

Each round runs the program once per path, in an order that alternates from
round to round:

* ``api`` -- ``Client.run(...)`` on one `Client` made up front and reused;
* ``mcp`` -- a ``tools/call`` of ``run_python`` on one `pybox mcp` process
  started up front (2026-07-28 requests: no handshake), timed from sending
  the request to reading its response (bench/_mcp_client.py, the MCP client
  `bench/compare.py` uses too).

Warm-up rounds are not counted. Every run must print exactly "42". The ratio
line divides the MCP path's p50 by the API's: what the protocol, JSON and the
server's threads add to a run. Informational only: no verdict, exit code 0
unless a run failed.

Run from the repository root: ``python bench/mcp_overhead.py [--rounds N]``.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

# Run as a script, this file's folder is on the path, not the repository root.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._mcp_client import PYBOX_MCP_ARGV, STATELESS_META, McpClient
from bench._mcp_path import read_run_python
from bench._rounds import round_order
from bench._stats import wall_stats
from bench._values import CODE, BenchFailure, PathUnavailable, check_stdout
from pybox import Client


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()
    client = Client()
    mcp = McpClient(PYBOX_MCP_ARGV, subprocess.DEVNULL)

    def api_run() -> None:
        check_stdout("api", client.run(CODE).stdout)

    def mcp_run() -> None:
        read_run_python(mcp.run_python(CODE, meta=STATELESS_META), "mcp")

    paths: dict[str, Callable[[], None]] = {"api": api_run, "mcp": mcp_run}
    walls_s: dict[str, list[float]] = {name: [] for name in paths}
    try:
        for round_number in range(args.warmup + args.rounds):
            for name in round_order(list(paths), round_number, None):
                started = time.perf_counter()
                paths[name]()
                elapsed = time.perf_counter() - started
                if round_number >= args.warmup:
                    walls_s[name].append(elapsed)
    except (BenchFailure, PathUnavailable) as exc:
        print(f"mcp_overhead: {exc}", file=sys.stderr)
        return 1
    finally:
        mcp.close()
        client.close()
    stats = {name: wall_stats(values) for name, values in walls_s.items()}
    print(f"{'path':<6}{'n':>4}{'p50 ms':>10}{'p95 ms':>10}{'min ms':>10}{'mean ms':>10}")
    for name, row in stats.items():
        mean_ms = statistics.fmean(walls_s[name]) * 1000
        print(
            f"{name:<6}{row['n']:>4}{row['p50_ms']:>10.1f}{row['p95_ms']:>10.1f}"
            f"{row['min_ms']:>10.1f}{mean_ms:>10.1f}"
        )
    print(f"ratio mcp/api p50: {stats['mcp']['p50_ms'] / stats['api']['p50_ms']:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
