"""Benchmark: one `print(6*7)` box through pybox's paths, `docker run` and peer libraries.

Run from the repository root: ``python bench/compare.py [--quick] [--peers] [--json]``.
``docs/performance.md`` has the latest results and how to read them.

What is measured
----------------
Latency. Each round runs the same tiny program once per path, in an order that
rotates from round to round (or is shuffled with ``--seed``), so no path always
follows the same neighbour. Warm-up rounds run first and are not counted. The
paths (``--paths``):

* ``docker``      -- ``docker run --rm -i`` on the *same image ID* pybox used,
  with the hardening flags and the limits that pybox's receipt says it applied,
  running ``/usr/bin/python3 -c 'print(6*7)'``. The baseline: it is always
  measured, and every ratio divides by its p50 (or p95) from the same run.
* ``pybox_cold``  -- ``pybox.run_container()``: a one-shot call, a new client
  and a box created, verified and started for this run; no warm pool.
* ``pybox_warm``  -- ``Client.run()`` on one long-lived ``Client`` with its warm
  pool (the default), warmed up before measuring. After each measured call the
  benchmark waits (unmeasured) until the pool is full again, as an agent's
  think-time between calls would allow, so a refill never overlaps another
  path's measurement. Every receipt's ``observed_by_pybox.box_source`` is
  counted: ``warm_pool`` is a hit, ``fresh`` a miss.
* ``pybox_mcp``   -- one ``tools/call`` of ``run_python`` to a ``pybox mcp``
  server over stdio (newline-delimited JSON-RPC), timed at the client. The
  server is started once and initialized before measuring; after each call the
  benchmark sleeps ``--think-s`` so the server's pool can refill. Skipped, with
  the reason printed, when ``pybox mcp`` is not available.
* ``llm_sandbox``, ``epicbox`` (``--peers``) -- each installed by this script
  into a throwaway virtual environment under a temporary folder (removed
  afterwards) and driven by ``bench/peer_worker.py``, a long-lived worker that
  makes one sandbox call per request; the time is the library call, timed in
  the worker, so interpreter start-up is not measured. Both use the same local
  image with the network disabled; llm-sandbox needs a ``python`` executable
  and a long-running command, so it gets a tiny derived image (built here with
  ``docker build --network none``, labelled, removed afterwards; nothing is
  pulled) and a container init so that its close does not wait 10 s.

Throughput (``--throughput-runs``): runs per second with 1, 2, 4 and 8 callers
at once (threads), for ``docker``, ``pybox_cold`` and ``pybox_warm``. The warm
client's pool is full when each level starts and there is no think-time, so
most runs at higher levels are misses; hits and misses are reported.

CPU per box (``--cpu-batches``): for each path, batches of sequential runs,
each between two idle windows. Two figures per box:

* ``machine`` -- the machine's busy CPU time (``/proc/stat``: everything but
  idle and iowait) over the batch, divided by the boxes. It counts everything a
  box costs (client, docker CLI, dockerd, containerd, shim, runc, the box, the
  kernel) and, for the warm pool, the background refill (each box is followed
  by the refill wait). It also counts whatever else runs on the machine:
  ``net`` subtracts the busy rate of the idle windows before and after the
  batch; when that rate exceeds 0.1 CPUs the verdict is NOISY, not PASS/MISS.
* ``attributed`` -- client (this process, the children it reaped such as the
  docker CLI, and the MCP server) + engine (dockerd and containerd with their
  reaped children) + boxes (the containers' parent cgroup, which keeps the CPU
  of removed containers). Other people's processes do not count (their
  containers would; hold the integration lock), and neither do the shim, runc
  and kernel work outside cgroups.

Every run's stdout must be exactly "42", and every container and image the
benchmark started (labels ``io.pybox.bench=<token>``, and pybox's owner label
for pybox boxes) must be gone at the end; otherwise the exit code is 1. The
targets are informational (PASS/MISS): the exit code is 0 either way.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

# Run as a script (`python bench/compare.py`), this file's folder is on the
# path, not the repository root that the `bench.` imports below need.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._api_path import recorded_box
from bench._calls import find_daemon_pids
from bench._cpu import measure_cpu
from bench._environment import machine_facts, run_then_check
from bench._mcp_path import start_mcp
from bench._peers import start_peers
from bench._report import build_report, markdown_lines, report_lines, rounded
from bench._rounds import measure_one, measure_rounds, measure_throughput, round_order
from bench._values import (
    ALL_PATHS,
    CONCURRENCY_LEVELS,
    DEFAULT_PATHS,
    PATH_DOCKER,
    PATH_MCP,
    PATH_WARM,
    PEER_PATHS,
    REFILL_WAIT_S,
    THROUGHPUT_PATHS,
    BenchFailure,
    Context,
    PathUnavailable,
)
from pybox import Client


def parse_paths(raw: str, peers: bool) -> list[str]:
    """The baseline first, then the chosen paths in the canonical order."""
    chosen = {name.strip() for name in raw.split(",") if name.strip()}
    unknown = chosen - set(ALL_PATHS)
    if unknown:
        raise ValueError(
            f"unknown path(s) {', '.join(sorted(unknown))}; choose from {', '.join(ALL_PATHS)}"
        )
    chosen |= {PATH_DOCKER}  # every ratio needs the baseline from the same run
    if peers:
        chosen |= set(PEER_PATHS)
    return [path for path in ALL_PATHS if path in chosen]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Compare pybox's paths with docker run --rm and peer libraries."
    )
    parser.add_argument("--rounds", type=int, default=40, help="measured rounds (default 40)")
    parser.add_argument("--warmup", type=int, default=3, help="uncounted rounds (default 3)")
    parser.add_argument(
        "--paths",
        default=",".join(DEFAULT_PATHS),
        help=f"comma-separated, from {', '.join(ALL_PATHS)} (docker is always measured)",
    )
    parser.add_argument("--peers", action="store_true", help="also measure the peer libraries")
    parser.add_argument(
        "--seed", type=int, default=None, help="shuffle each round's order (default: rotate)"
    )
    parser.add_argument(
        "--think-s", type=float, default=0.5, help="pause after each MCP call (default 0.5)"
    )
    parser.add_argument(
        "--throughput-runs", type=int, default=24, help="runs per level and path (0: skip)"
    )
    parser.add_argument("--cpu-batches", type=int, default=5, help="batches per path (0: skip)")
    parser.add_argument("--cpu-batch-size", type=int, default=10, help="runs per CPU batch")
    parser.add_argument(
        "--cpu-idle-s", type=float, default=2.0, help="idle window before each CPU batch"
    )
    parser.add_argument("--quick", action="store_true", help="a smoke run: few of everything")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--markdown", action="store_true", help="print the tables for docs/performance.md"
    )
    parser.add_argument(
        "--from-json", metavar="FILE", help="print a saved --json report again; measure nothing"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.warmup = min(args.rounds, 5), min(args.warmup, 1)
        args.throughput_runs = min(args.throughput_runs, 8)
        args.cpu_batches, args.cpu_batch_size = (
            min(args.cpu_batches, 1),
            min(args.cpu_batch_size, 4),
        )
        args.cpu_idle_s = min(args.cpu_idle_s, 1.0)
    if args.rounds < 1 or args.warmup < 0 or args.throughput_runs < 0 or args.cpu_batches < 0:
        parser.error("--rounds must be at least 1; --warmup and the counts at least 0")
    if args.cpu_batch_size < 1 or args.think_s < 0 or args.cpu_idle_s <= 0:
        parser.error("--cpu-batch-size must be at least 1, --think-s and --cpu-idle-s positive")
    try:
        args.paths = parse_paths(args.paths, args.peers)
    except ValueError as exc:
        parser.error(str(exc))
    return args


def set_up(ctx: Context, paths: list[str], scratch: Path, logs: IO[bytes]) -> dict[str, str]:
    """Record the image and limits pybox uses, start the long-lived clients; what is skipped."""
    ctx.image_id, ctx.limits = recorded_box(ctx)
    skipped: dict[str, str] = {}
    if PATH_WARM in paths:
        ctx.warm = Client()
        if not ctx.warm.warm_up(wait_s=REFILL_WAIT_S):
            raise BenchFailure("the warm pool was not full within the wait; see `pybox doctor`")
    if PATH_MCP in paths:
        try:
            ctx.mcp = start_mcp(ctx, logs)
        except PathUnavailable as exc:
            logs.flush()
            tail = Path(logs.name).read_text(errors="replace").strip().splitlines()[-3:]
            skipped[PATH_MCP] = f"`pybox mcp` is not available: {exc}; " + " | ".join(tail)
            paths.remove(PATH_MCP)
    peers = [p for p in paths if p in PEER_PATHS]
    if peers:
        for name, reason in start_peers(ctx, peers, scratch, logs).items():
            skipped[name] = f"could not be set up: {reason}"
            paths.remove(name)
    return skipped


def tear_down(ctx: Context) -> None:
    for worker in ctx.peers.values():
        worker.close()
    if ctx.mcp is not None:
        ctx.mcp.close()
    if ctx.warm is not None:
        ctx.warm.close()
    if ctx.peer_image:
        # Untags it and deletes the layers the build made; the base image stays.
        subprocess.run(["docker", "rmi", ctx.peer_image], capture_output=True, check=False)


def run_benchmark(args: argparse.Namespace, ctx: Context) -> dict[str, Any]:
    paths = list(args.paths)
    with tempfile.TemporaryDirectory(prefix="pybox-bench-") as scratch:
        logs_path = Path(scratch) / "logs.txt"
        with logs_path.open("w+b") as logs:
            try:
                machine = machine_facts()
                skipped = set_up(ctx, paths, Path(scratch), logs)
                rng = random.Random(args.seed) if args.seed is not None else None
                for index in range(args.warmup):
                    for path in round_order(paths, index, None):
                        measure_one(ctx, path)
                samples = measure_rounds(ctx, paths, args.rounds, rng)
                throughput = {}
                if args.throughput_runs:
                    chosen = [p for p in THROUGHPUT_PATHS if p in paths]
                    throughput = measure_throughput(
                        ctx, chosen, CONCURRENCY_LEVELS, args.throughput_runs
                    )
                cpu = {}
                if args.cpu_batches:
                    chosen = [p for p in paths if p not in PEER_PATHS]
                    cpu = measure_cpu(
                        ctx, chosen, args.cpu_batches, args.cpu_batch_size, args.cpu_idle_s
                    )
            except BenchFailure:
                logs.flush()
                tail = logs_path.read_text(errors="replace").strip().splitlines()[-20:]
                if tail:
                    print("\n".join(["log tail (servers and peers):", *tail]), file=sys.stderr)
                raise
            finally:
                tear_down(ctx)
    return build_report(args, ctx, samples, throughput, cpu, skipped, machine)


def print_report(report: Mapping[str, Any], args: argparse.Namespace) -> None:
    if args.json:
        print(json.dumps(rounded(report), indent=2))
    elif args.markdown:
        print("\n".join(markdown_lines(report)))
    else:
        print("\n".join(report_lines(report)))


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.from_json:
        try:
            saved = json.loads(Path(args.from_json).read_text())
        except (OSError, ValueError) as exc:
            print(f"compare: cannot read {args.from_json}: {exc}", file=sys.stderr)
            return 2
        print_report(saved, args)
        return 0
    ctx = Context(uuid.uuid4().hex[:12], find_daemon_pids(), think_s=args.think_s)
    report, problems = run_then_check("compare", ctx, lambda: run_benchmark(args, ctx))
    if report is None:
        return 1
    print_report(report, args)
    if not args.json:
        print(
            f"\nleftover containers and images: {'none' if not problems else '; '.join(problems)}"
        )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
