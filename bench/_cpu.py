"""CPU per box: batches of sequential runs, each between two idle windows."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bench._api_path import refill_pool
from bench._calls import busy_cpu_s, children_cpu_s, containers_cpu_s, process_cpu_s
from bench._rounds import PATHS, progress, round_order
from bench._stats import percentile
from bench._values import PATH_WARM, Context


@dataclass(frozen=True)
class CpuCounters:
    """Cumulative CPU seconds, read at one moment."""

    machine_s: float
    client_s: float  # this process, its reaped children (docker CLI), the MCP server
    engine_s: float | None  # dockerd and containerd, with their reaped children
    boxes_s: float | None  # every container's cgroup

    @classmethod
    def read(cls, ctx: Context) -> CpuCounters:
        client = time.process_time() + children_cpu_s()
        if ctx.mcp is not None:
            client += process_cpu_s([ctx.mcp.pid]) or 0.0
        engine = process_cpu_s(ctx.daemon_pids, reaped=True)
        return cls(busy_cpu_s(), client, engine, containers_cpu_s())


def batch_cpu(
    before: CpuCounters, after: CpuCounters, boxes: int, wall_s: float, background_cpus: float
) -> dict[str, float]:
    """Per-box CPU of one batch, in seconds.

    `net` subtracts the machine's background rate over the batch's duration;
    `attributed` adds up only what this benchmark's boxes cause (client,
    engine daemons, containers): it leaves out the shim, runc and kernel work
    outside cgroups, and other people's processes.
    """
    machine = after.machine_s - before.machine_s
    figures = {
        "gross_s": machine / boxes,
        "net_s": (machine - background_cpus * wall_s) / boxes,
        "background_cpus": background_cpus,
        "client_s": (after.client_s - before.client_s) / boxes,
    }
    if after.engine_s is not None and before.engine_s is not None:
        figures["engine_s"] = (after.engine_s - before.engine_s) / boxes
    if after.boxes_s is not None and before.boxes_s is not None:
        figures["boxes_s"] = (after.boxes_s - before.boxes_s) / boxes
    if "engine_s" in figures and "boxes_s" in figures:
        figures["attributed_s"] = figures["client_s"] + figures["engine_s"] + figures["boxes_s"]
    return figures


def idle_rate(idle_s: float) -> float:
    """How many CPUs the machine keeps busy while the benchmark does nothing."""
    before, start = busy_cpu_s(), time.perf_counter()
    time.sleep(idle_s)
    return (busy_cpu_s() - before) / (time.perf_counter() - start)


def measure_cpu(
    ctx: Context, paths: Sequence[str], batches: int, batch_size: int, idle_s: float
) -> dict[str, dict[str, Any]]:
    """CPU per box over batches of sequential runs, each between two idle windows."""
    per_path: dict[str, list[dict[str, float]]] = {path: [] for path in paths}
    order = [path for index in range(batches) for path in round_order(paths, index, None)]
    if PATH_WARM in paths:
        refill_pool(ctx)
    rate_before = idle_rate(idle_s)
    for done, path in enumerate(order, 1):
        spec = PATHS[path]
        before, start = CpuCounters.read(ctx), time.perf_counter()
        for _ in range(batch_size):
            spec.call(ctx)
            # Inside the batch: the warm pool's replacement box is part of what a
            # run costs (the idle part of the wait is subtracted as background).
            if spec.after is not None:
                spec.after(ctx)
        after, wall = CpuCounters.read(ctx), time.perf_counter() - start
        if PATH_WARM in paths:
            refill_pool(ctx)  # so that the idle window after the batch is idle
        rate_after = idle_rate(idle_s)
        background = (rate_before + rate_after) / 2
        per_path[path].append(batch_cpu(before, after, batch_size, wall, background))
        rate_before = rate_after
        progress("cpu batch", done, len(order))
    return {path: cpu_summary(found) for path, found in per_path.items()}


CPU_FIGURES = ("gross_s", "net_s", "client_s", "engine_s", "boxes_s", "attributed_s")


def cpu_summary(batches: Sequence[Mapping[str, float]]) -> dict[str, Any]:
    """Median over batches of each per-box figure, in ms, plus the batch count."""
    summary: dict[str, Any] = {"batches": len(batches)}
    for key in CPU_FIGURES:
        values = [b[key] for b in batches if key in b]
        if values:
            summary[key.removesuffix("_s") + "_ms"] = percentile(values, 50) * 1000
    background = [b["background_cpus"] for b in batches]
    if background:
        summary["background_cpus"] = percentile(background, 50)
        summary["background_cpus_max"] = max(background)
    return summary
