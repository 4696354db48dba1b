"""The paths, and the rounds that measure them: latency (rotating order) and throughput."""

from __future__ import annotations

import random
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from bench._api_path import call_cold, call_warm, refill_pool
from bench._calls import measure_call
from bench._docker import call_docker
from bench._mcp_path import call_mcp, think
from bench._peers import call_peer
from bench._values import (
    PATH_COLD,
    PATH_DOCKER,
    PATH_MCP,
    PATH_WARM,
    PEER_EPICBOX,
    PEER_LLM_SANDBOX,
    Context,
    Outcome,
    Sample,
)


@dataclass(frozen=True)
class PathSpec:
    call: Callable[[Context], Outcome]
    after: Callable[[Context], None] | None = None  # unmeasured think-time


PATHS: dict[str, PathSpec] = {
    PATH_DOCKER: PathSpec(call_docker),
    PATH_COLD: PathSpec(call_cold),
    PATH_WARM: PathSpec(call_warm, refill_pool),
    PATH_MCP: PathSpec(call_mcp, think),
    PEER_LLM_SANDBOX: PathSpec(lambda ctx: call_peer(ctx, PEER_LLM_SANDBOX)),
    PEER_EPICBOX: PathSpec(lambda ctx: call_peer(ctx, PEER_EPICBOX)),
}


def measure_one(ctx: Context, path: str) -> Sample:
    spec = PATHS[path]
    sample, outcome = measure_call(ctx, lambda: spec.call(ctx))
    if outcome.inner_wall_s is not None:
        # A peer's call is timed in its worker, whose CPU is not this process's.
        sample.wall_s, sample.client_cpu_s = outcome.inner_wall_s, None
    sample.box_cpu_s = outcome.box_cpu_s
    sample.box_source = outcome.box_source
    sample.marks = outcome.marks
    if spec.after is not None:
        spec.after(ctx)
    return sample


# --- rounds -------------------------------------------------------------------


def round_order(paths: Sequence[str], index: int, rng: random.Random | None) -> list[str]:
    """Rotate by the round number (balanced: each path leads equally often), or shuffle."""
    if rng is not None:
        order = list(paths)
        rng.shuffle(order)
        return order
    shift = index % len(paths)
    return [*paths[shift:], *paths[:shift]]


def progress(label: str, done: int, total: int) -> None:
    if sys.stderr.isatty():  # a carriage-return counter only makes sense on a terminal
        end = "\n" if done == total else ""
        print(f"\r{label} {done}/{total}", end=end, file=sys.stderr, flush=True)


def measure_rounds(
    ctx: Context, paths: Sequence[str], rounds: int, rng: random.Random | None
) -> dict[str, list[Sample]]:
    samples: dict[str, list[Sample]] = {path: [] for path in paths}
    for index in range(rounds):
        for path in round_order(paths, index, rng):
            samples[path].append(measure_one(ctx, path))
        progress("latency round", index + 1, rounds)
    return samples


def measure_throughput(
    ctx: Context, paths: Sequence[str], levels: Sequence[int], runs: int
) -> dict[str, dict[str, dict[str, Any]]]:
    """Runs per second with `level` callers at once; `runs` (at least `level`) per cell."""
    table: dict[str, dict[str, dict[str, Any]]] = {path: {} for path in paths}
    for index, level in enumerate(levels):
        for path in round_order(paths, index, None):
            if path == PATH_WARM:
                refill_pool(ctx)
            total = max(runs, level)
            call = PATHS[path].call
            start = time.perf_counter()
            with ThreadPoolExecutor(max_workers=level) as pool:
                futures = [pool.submit(call, ctx) for _ in range(total)]
                outcomes = [future.result() for future in futures]
            wall = time.perf_counter() - start
            sources = Counter(o.box_source for o in outcomes if o.box_source)
            table[path][str(level)] = {
                "runs": total,
                "wall_s": wall,
                "runs_per_s": total / wall,
                "box_source": dict(sources),
            }
        progress("throughput level", index + 1, len(levels))
    return table
