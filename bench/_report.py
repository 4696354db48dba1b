"""The report: one dict (the `--json` form), rendered as text or as docs/performance.md tables."""

from __future__ import annotations

import argparse
import datetime
import sys
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from bench._stats import (
    box_sources,
    call_cpu_stats,
    ratio,
    ratios_to_baseline,
    targets,
    timeline_stats,
    wall_stats,
)
from bench._values import (
    CONCURRENCY_LEVELS,
    PATH_DOCKER,
    PYBOX_PATHS,
    REFILL_WAIT_S,
    REPORT_VERSION,
    Context,
    Sample,
)


def build_report(
    args: argparse.Namespace,
    ctx: Context,
    samples: Mapping[str, Sequence[Sample]],
    throughput: Mapping[str, Any],
    cpu: Mapping[str, Mapping[str, Any]],
    skipped: Mapping[str, str],
    machine: Mapping[str, Any],
) -> dict[str, Any]:
    wall = {path: wall_stats([s.wall_s for s in found]) for path, found in samples.items()}
    return {
        "report_version": REPORT_VERSION,
        "date": ctx.started_at,
        "finished_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": " ".join(["python", "bench/compare.py", *sys.argv[1:]]),
        "machine": dict(machine),
        "image_id": ctx.image_id,
        "limits": ctx.limits,
        "rounds": args.rounds,
        "warmup_rounds": args.warmup,
        "order": "random" if args.seed is not None else "rotate",
        "seed": args.seed,
        "think_s": ctx.think_s,
        "skipped": dict(skipped),
        "wall": wall,
        "ratio_vs_docker": ratios_to_baseline(wall),
        "box_source": {path: box_sources(found) for path, found in samples.items()},
        "pool_refill_timeouts": ctx.refill_timeouts,
        "call_cpu": {path: call_cpu_stats(found) for path, found in samples.items()},
        "cpu_per_box": dict(cpu),
        "throughput": dict(throughput),
        "targets": targets(wall, cpu),
        "pybox_timeline": {
            path: timeline_stats(found)
            for path, found in samples.items()
            if path in PYBOX_PATHS and any(s.marks for s in found)
        },
        "samples_wall_ms": {
            path: [round(s.wall_s * 1000, 2) for s in found] for path, found in samples.items()
        },
    }


def rounded(value: Any) -> Any:
    """Microsecond precision is plenty for JSON readers; the clocks are not better."""
    if isinstance(value, float):
        return round(value, 3)
    if isinstance(value, dict):
        return {key: rounded(item) for key, item in value.items()}
    if isinstance(value, list):
        return [rounded(item) for item in value]
    return value


def cell(value: float | None, spec: str = ".1f", suffix: str = "") -> str:
    return "n/a" if value is None else f"{value:{spec}}{suffix}"


def cpu_cell(value: Mapping[str, float] | None) -> str:
    return "n/a" if value is None else f"{value['mean_ms']:.1f} / {value['p50_ms']:.1f}"


def report_lines(report: Mapping[str, Any]) -> Iterator[str]:
    machine = report["machine"]
    yield f"compare  {report['date']}  pybox {machine['pybox_version']}"
    yield (
        f"  {machine['cpu_model']}, {machine['cpu_count']} CPUs; kernel {machine['kernel']}; "
        f"Docker {machine['engine_version']} (API {machine['engine_api']}); "
        f"load {' '.join(machine['loadavg_at_start'])}"
    )
    yield f"  image {report['image_id']}"
    yield (
        f"  {report['rounds']} rounds after {report['warmup_rounds']} warm-up; "
        f"order {report['order']}; think-time {report['think_s']} s (mcp), refill wait (warm)"
    )
    for path, reason in report["skipped"].items():
        yield f"  SKIPPED {path}: {reason}"
    yield ""
    columns = ("n", "p50", "p95", "min", "max", "p50/dk", "p95/dk")
    yield f"{'wall ms':<13}{'n':>4}" + "".join(f"{name:>9}" for name in columns[1:])
    for path, row in report["wall"].items():
        rel = report["ratio_vs_docker"].get(path, {"p50": 1.0, "p95": 1.0})
        yield (
            f"{path:<13}{row['n']:>4}{row['p50_ms']:>9.1f}{row['p95_ms']:>9.1f}"
            f"{row['min_ms']:>9.1f}{row['max_ms']:>9.1f}"
            f"{cell(rel['p50'], '.2f', 'x'):>9}{cell(rel['p95'], '.2f', 'x'):>9}"
        )
    for path, sources in report["box_source"].items():
        if sources:
            hits, misses = sources.get("warm_pool", 0), sources.get("fresh", 0)
            yield f"  {path} boxes: {hits} from the warm pool (hits), {misses} fresh (misses)"
    if report["pool_refill_timeouts"]:
        yield f"  warm pool not full again within {REFILL_WAIT_S:.0f} s: "
        yield f"{report['pool_refill_timeouts']} time(s)"
    yield ""
    yield "CPU per call, ms as mean / p50 (latency rounds)"
    yield "  client = this process + waited-for children (docker CLI); engine = dockerd +"
    yield "  containerd; box = the container's cgroup (receipt; warm: since the code arrived)"
    yield f"{'':<13}{'client':>16}{'engine':>16}{'box':>16}"
    for path, cpu in report["call_cpu"].items():
        cells = [cpu_cell(cpu[kind]) for kind in ("client", "engine", "box")]
        yield f"{path:<13}" + "".join(f"{cell:>16}" for cell in cells)
    if report["cpu_per_box"]:
        yield ""
        yield "CPU per box, ms, median over batches. machine = /proc/stat busy time (gross;"
        yield "  net = less the idle rate measured around each batch, bg = that rate in CPUs);"
        yield "  attributed = client + engine (dockerd, containerd) + boxes (containers' cgroup)"
        cpu_columns = ("gross", "net", "bg", "client", "engine", "boxes", "attrib")
        yield (
            f"{'':<13}{'batches':>8}"
            + "".join(f"{name:>8}" for name in cpu_columns)
            + f"{'net/dk':>9}{'attr/dk':>9}"
        )
        cpu = report["cpu_per_box"]
        for path, row in cpu.items():
            figures = [row.get(f"{name}_ms") for name in ("gross", "net")]
            figures += [row.get("background_cpus")]
            figures += [
                row.get(f"{name}_ms") for name in ("client", "engine", "boxes", "attributed")
            ]
            line = f"{path:<13}{row['batches']:>8}" + "".join(
                f"{cell(value, '.2f' if index == 2 else '.1f'):>8}"
                for index, value in enumerate(figures)
            )
            for figure in ("net_ms", "attributed_ms"):
                baseline = cpu.get(PATH_DOCKER, {}).get(figure)
                line += f"{cell(ratio(row.get(figure), baseline), '.2f', 'x'):>9}"
            yield line
    if report["throughput"]:
        yield ""
        levels = [str(level) for level in CONCURRENCY_LEVELS]
        yield "throughput, runs/s at N concurrent callers"
        yield f"{'':<13}" + "".join(f"{'N=' + level:>10}" for level in levels)
        for path, row in report["throughput"].items():
            cells = [
                cell(row[level]["runs_per_s"], ".2f") if level in row else "" for level in levels
            ]
            yield f"{path:<13}" + "".join(f"{cell:>10}" for cell in cells)
            sources = [row[level]["box_source"] for level in levels if level in row]
            if any(sources):
                hits = "/".join(str(s.get("warm_pool", 0)) for s in sources)
                yield f"{'':<13}hits per level: {hits}"
    yield ""
    yield "targets (informational)"
    for target in report["targets"]:
        yield f"  {target['verdict']:<5} {target['target']}  ({cell(target['value'], '.2f', 'x')})"
    for path, timeline in report["pybox_timeline"].items():
        yield ""
        yield f"{path} timeline, p50 ms (receipt observed_by_pybox)"
        for name, value in timeline["marks_p50_ms"].items():
            yield f"  mark {name:<40}{value:>8.1f}"
        for name, value in timeline["steps_p50_ms"].items():
            yield f"  step {name:<40}{value:>8.1f}"


def ms_cell(value: float | None) -> str:
    return cell(value, ".1f", " ms")


def markdown_lines(report: Mapping[str, Any]) -> Iterator[str]:
    """The tables of docs/performance.md, from a report (`--markdown`, or `--from-json`)."""
    machine = report["machine"]
    yield f"- **Date:** {report['date']} to {report.get('finished_at', '?')}"
    yield (
        f"- **Machine:** {machine['cpu_model']}, {machine['cpu_count']} CPUs; kernel "
        f"{machine['kernel']}; Docker {machine['engine_version']} (API {machine['engine_api']}); "
        f"Python {machine['python']}; pybox {machine['pybox_version']}; "
        f"load average at start {' '.join(machine['loadavg_at_start'])}"
    )
    yield f"- **Command:** `{report['command']}`"
    for path, reason in report["skipped"].items():
        yield f"- **Skipped** `{path}`: {reason}"
    yield ""
    yield "| path | n | p50 | p95 | min | max | p50 / docker | p95 / docker | pool hits |"
    yield "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    for path, row in report["wall"].items():
        rel = report["ratio_vs_docker"].get(path, {"p50": 1.0, "p95": 1.0})
        sources = report["box_source"].get(path) or {}
        hits = f"{sources.get('warm_pool', 0)} of {sum(sources.values())}" if sources else ""
        yield (
            f"| {path} | {row['n']} | {ms_cell(row['p50_ms'])} | {ms_cell(row['p95_ms'])} "
            f"| {ms_cell(row['min_ms'])} | {ms_cell(row['max_ms'])} "
            f"| {cell(rel['p50'], '.2f', 'x')} | {cell(rel['p95'], '.2f', 'x')} | {hits} |"
        )
    if report["throughput"]:
        levels = [str(level) for level in CONCURRENCY_LEVELS]
        yield ""
        yield "| runs/s | " + " | ".join(f"N={level}" for level in levels) + " |"
        yield "| --- |" + " ---: |" * len(levels)
        for path, row in report["throughput"].items():
            cells = [cell(row[lv]["runs_per_s"], ".2f") if lv in row else "" for lv in levels]
            yield f"| {path} | " + " | ".join(cells) + " |"
            if any(row[lv]["box_source"] for lv in levels if lv in row):
                pool_hits = [
                    f"{row[lv]['box_source'].get('warm_pool', 0)} of {row[lv]['runs']}"
                    for lv in levels
                    if lv in row
                ]
                yield f"| {path} pool hits | " + " | ".join(pool_hits) + " |"
    if report["cpu_per_box"]:
        names = ("gross", "net", "client", "engine", "boxes", "attributed")
        yield ""
        yield (
            "| CPU per box | machine gross | machine net | idle rate (CPUs) | client | engine "
            "| boxes | attributed | net / docker | attributed / docker |"
        )
        yield "| --- |" + " ---: |" * 9
        cpu = report["cpu_per_box"]
        for path, row in cpu.items():
            cells = [ms_cell(row.get(f"{name}_ms")) for name in names]
            cells.insert(2, cell(row.get("background_cpus"), ".2f"))
            for figure in ("net_ms", "attributed_ms"):
                baseline = cpu.get(PATH_DOCKER, {}).get(figure)
                cells.append(cell(ratio(row.get(figure), baseline), ".2f", "x"))
            yield f"| {path} | " + " | ".join(cells) + " |"
    yield ""
    yield "| target | measured | verdict |"
    yield "| --- | ---: | --- |"
    for target in report["targets"]:
        yield (
            f"| {target['target']} | {cell(target['value'], '.2f', 'x')} | {target['verdict']} |"
        )
    for path, timeline in report["pybox_timeline"].items():
        yield ""
        yield f"| {path} step (receipt timeline) | p50 |"
        yield "| --- | ---: |"
        for name, value in timeline["steps_p50_ms"].items():
            yield f"| {name} | {ms_cell(value)} |"
