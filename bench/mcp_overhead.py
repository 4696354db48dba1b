"""Benchmark: `print(6*7)` through `pybox mcp` (stdio, run_python) versus the Python API.

Each round runs the program once per path, in an order that alternates from
round to round:

* ``api`` -- ``Client.run(...)`` on one `Client` made up front and reused;
* ``mcp`` -- a ``tools/call`` of ``run_python`` on one `pybox mcp` process
  started up front (2026-07-28 requests: no handshake), timed from writing
  the request line to reading the response line.

Warm-up rounds are not counted. Every run must print exactly "42". The ratio
line divides the MCP path's p50 by the API's: what the protocol, JSON and the
server's threads add to a run. Informational only: no verdict, exit code 0
unless a run failed.

Run from the repository root: ``python bench/mcp_overhead.py [--rounds N]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

from pybox import Client

META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}
CODE = "print(6*7)"


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    rank = (len(ordered) - 1) * fraction
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


class McpPath:
    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "pybox", "mcp"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        self.next_id = 0

    def run(self) -> float:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.next_id += 1
        request = {
            "jsonrpc": "2.0",
            "id": self.next_id,
            "method": "tools/call",
            "params": {"_meta": META, "name": "run_python", "arguments": {"code": CODE}},
        }
        started = time.perf_counter()
        self.process.stdin.write(json.dumps(request).encode() + b"\n")
        self.process.stdin.flush()
        response = json.loads(self.process.stdout.readline())
        elapsed = time.perf_counter() - started
        stdout = response["result"]["structuredContent"]["stdout"]
        if stdout != "42\n":
            raise SystemExit(f"mcp: unexpected output {stdout!r}")
        return elapsed

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=60)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()
    client = Client()
    mcp = McpPath()

    def api_run() -> float:
        started = time.perf_counter()
        result = client.run(CODE)
        elapsed = time.perf_counter() - started
        if result.stdout != "42\n":
            raise SystemExit(f"api: unexpected output {result.stdout!r}")
        return elapsed

    paths = {"api": api_run, "mcp": mcp.run}
    times: dict[str, list[float]] = {name: [] for name in paths}
    try:
        for round_number in range(args.warmup + args.rounds):
            order = list(paths) if round_number % 2 == 0 else list(reversed(paths))
            for name in order:
                elapsed = paths[name]()
                if round_number >= args.warmup:
                    times[name].append(elapsed * 1000)
    finally:
        mcp.close()
    print(f"{'path':<6}{'n':>4}{'p50 ms':>10}{'p95 ms':>10}{'min ms':>10}{'mean ms':>10}")
    for name, values in times.items():
        print(
            f"{name:<6}{len(values):>4}{percentile(values, 0.5):>10.1f}"
            f"{percentile(values, 0.95):>10.1f}{min(values):>10.1f}"
            f"{statistics.fmean(values):>10.1f}"
        )
    ratio = percentile(times["mcp"], 0.5) / percentile(times["api"], 0.5)
    print(f"ratio mcp/api p50: {ratio:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
