"""Statistics of the samples, ratios to the baseline, and the targets' verdicts.

`percentile` here is the one every benchmark in bench/ uses.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from bench._values import (
    CPU_TARGET,
    LATENCY_TARGETS,
    NOISY_BACKGROUND_CPUS,
    PATH_COLD,
    PATH_DOCKER,
    PATH_WARM,
    PEER_PATHS,
    PEER_SPEEDUP_TARGET,
    TIMELINE_MARKS,
    Sample,
)


def percentile(values: Sequence[float], pct: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    position = (len(ordered) - 1) * pct / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def wall_stats(walls_s: Sequence[float], upper_pct: int = 95) -> dict[str, float]:
    """n, p50, the upper percentile (p95 unless told), min and max, in ms."""
    walls = [w * 1000 for w in walls_s]
    return {
        "n": len(walls),
        "p50_ms": percentile(walls, 50),
        f"p{upper_pct}_ms": percentile(walls, upper_pct),
        "min_ms": min(walls),
        "max_ms": max(walls),
    }


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or not denominator:
        return None
    return numerator / denominator


def ratios_to_baseline(
    stats: Mapping[str, Mapping[str, float]], baseline: str = PATH_DOCKER
) -> dict[str, dict[str, float | None]]:
    base = stats[baseline]
    return {
        path: {
            "p50": ratio(row["p50_ms"], base["p50_ms"]),
            "p95": ratio(row["p95_ms"], base["p95_ms"]),
        }
        for path, row in stats.items()
        if path != baseline
    }


def _mean_p50_ms(values: Sequence[float | None]) -> dict[str, float] | None:
    known = [v * 1000 for v in values if v is not None]
    if not known:
        return None
    return {"mean_ms": sum(known) / len(known), "p50_ms": percentile(known, 50)}


def call_cpu_stats(samples: Sequence[Sample]) -> dict[str, dict[str, float] | None]:
    return {
        "client": _mean_p50_ms([s.client_cpu_s for s in samples]),
        "engine": _mean_p50_ms([s.daemon_cpu_s for s in samples]),
        "box": _mean_p50_ms([s.box_cpu_s for s in samples]),
    }


def timeline_stats(samples: Sequence[Sample]) -> dict[str, dict[str, float]]:
    """Median of each receipt mark and of each step between marks, in ms."""
    marks: dict[str, float] = {}
    steps: dict[str, float] = {}
    previous = ""
    for mark in TIMELINE_MARKS:
        with_mark = [s for s in samples if mark in s.marks]
        if not with_mark:
            continue
        marks[mark] = percentile([s.marks[mark] * 1000 for s in with_mark], 50)
        step = [s.marks[mark] - s.marks.get(previous, 0.0) for s in with_mark]
        steps[f"{previous or 'begin'} -> {mark}"] = percentile(step, 50) * 1000
        previous = mark
    ended = [s for s in samples if "removed_s" in s.marks]
    if ended:
        outside = [(s.wall_s - s.marks["removed_s"]) * 1000 for s in ended]
        steps["outside timeline (wall - removed_s)"] = percentile(outside, 50)
    return {"marks_p50_ms": marks, "steps_p50_ms": steps}


def box_sources(samples: Sequence[Sample]) -> dict[str, int]:
    return dict(Counter(s.box_source for s in samples if s.box_source))


def verdict(
    value: float | None, *, at_most: float | None = None, at_least: float | None = None
) -> str:
    """PASS or MISS against a bound; n/a when a path was not measured."""
    if value is None:
        return "n/a"
    passed = (at_most is None or value <= at_most) and (at_least is None or value >= at_least)
    return "PASS" if passed else "MISS"


def targets(
    wall: Mapping[str, Mapping[str, float]], cpu: Mapping[str, Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """Each target with the measured value and PASS, MISS or n/a (a path not measured)."""

    def p50(path: str) -> float | None:
        return wall[path]["p50_ms"] if path in wall else None

    found: list[dict[str, Any]] = []
    for path, limit, what in LATENCY_TARGETS:
        value = ratio(p50(path), p50(PATH_DOCKER))
        found.append(
            {
                "target": f"{what}: {path} p50 <= {limit}x docker run p50",
                "value": value,
                "verdict": verdict(value, at_most=limit),
            }
        )
    for peer in PEER_PATHS:
        for path in (PATH_WARM, PATH_COLD):
            value = ratio(p50(peer), p50(path))
            found.append(
                {
                    "target": f"{peer} p50 >= {PEER_SPEEDUP_TARGET:g}x {path} p50",
                    "value": value,
                    "verdict": verdict(value, at_least=PEER_SPEEDUP_TARGET),
                }
            )
    # Another engineer's work during a batch makes the machine figure meaningless;
    # say so rather than call it a pass or a miss.
    noisy = any(row.get("background_cpus_max", 0.0) > NOISY_BACKGROUND_CPUS for row in cpu.values())
    for figure, what in (("net_ms", "whole machine, net"), ("attributed_ms", "attributed")):
        for path in (PATH_WARM, PATH_COLD):
            value = ratio(cpu.get(path, {}).get(figure), cpu.get(PATH_DOCKER, {}).get(figure))
            found.append(
                {
                    "target": f"CPU per box ({what}): {path} <= {CPU_TARGET:g}x docker run's",
                    "value": value,
                    "verdict": "NOISY"
                    if figure == "net_ms" and noisy and value is not None
                    else verdict(value, at_most=CPU_TARGET),
                }
            )
    return found
