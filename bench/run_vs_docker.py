"""Benchmark: one `print(6*7)` box through pybox versus `docker run --rm -i`.

What is measured
----------------
Each round runs the same tiny program once per path, in an order that changes
from round to round (so neither path always benefits from a warm cache or
suffers from the other's cleanup):

* ``pybox``        -- ``Client.run(...)`` on one `Client` made up front and reused.
* ``pybox_fresh``  -- ``run_container(...)``, a new client per call (only with
  ``--with-run-container``).
* ``docker``       -- ``docker run --rm -i`` through `subprocess` on the *same image
  ID* pybox used (taken from a warm-up receipt), with the same hardening flags
  and limits pybox applies, running ``/usr/bin/python3 -c 'print(6*7)'``.

Warm-up rounds run first and are not counted. Every run's stdout must be
exactly "42"; any other result aborts the benchmark with exit code 1.

How to read the output
----------------------
``wall`` is the wall-clock time of the whole call as the caller sees it, in ms
(n, p50, p95, min, max; percentiles interpolate linearly between ranks). The
ratio lines divide pybox by docker; the issue's target is pybox p50 at most
0.6x docker's p50, reported as PASS or MISS. That verdict is informational: the
exit code is 0 either way unless a run failed or left a container behind.

CPU columns (per box, mean and p50 in ms; kernel CPU clocks tick at 10 ms so
the mean is the more trustworthy of the two):

* ``client``  -- this Python process plus any child processes it waited for
  during the call: for pybox that is pybox's own client code; for docker it is
  the docker CLI process (``RUSAGE_CHILDREN``) plus spawning it.
* ``daemon``  -- dockerd + containerd CPU during the call, read from /proc.
  It excludes the per-container shim and runc, and includes anything else using
  the engine at the same moment, so treat it as a rough indication.
* ``box``     -- CPU charged to the container's cgroup, from pybox's receipt
  (``observed_by_kernel.cpu_usage_s``; bootstrap plus program). Not available
  for ``docker run``, whose container is gone before it could be read.

The pybox timeline section gives the median of each receipt mark
(``observed_by_pybox``: seconds since pybox began the box) and of the step
between consecutive marks, plus ``after removal``: wall time the caller saw
that falls outside the receipt's timeline.

Run from the repository root: ``python bench/run_vs_docker.py [--rounds N] [--json]``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import random
import resource
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pybox
from pybox import Client, RunResult, run_container

CODE = "print(6*7)"
EXPECTED_STDOUT = "42"
TARGET_RATIO = 0.6  # from the issue: pybox p50 <= 0.6 x docker run p50
DOCKER_TIMEOUT_S = 60.0

# The limits pybox is asked for, spelled out so both paths get the same ones
# whatever the operator's defaults are.
MEMORY_BYTES = 512 * 1024 * 1024
WRITABLE_BYTES = 64 * 1024 * 1024
CPUS = 1.0
PIDS = 128
OPEN_FILES = 256
PYBOX_TIMEOUT_S = 30.0

PYBOX_LABEL = "io.pybox.managed"
# docker-run boxes get their own label so the leftover check finds exactly
# the containers this invocation started and nobody else's.
BENCH_LABEL = "io.pybox.bench"

# The flags mirror pybox's create body (src/pybox/_core/posture.py).
DOCKER_HARDENING = (
    "--network", "none",
    "--read-only",
    "--cap-drop", "ALL",
    "--security-opt", "no-new-privileges",
    "--user", "1000:1000",
    "--memory", "512m",
    "--memory-swap", "512m",
    "--cpus", "1",
    "--pids-limit", "128",
    "--ulimit", "nofile=256:256",
    "--ulimit", "core=0:0",
    "--ipc", "private",
    "--log-driver", "none",
    "--tmpfs", "/pybox:rw,nosuid,nodev,noexec,size=64m,uid=1000,gid=1000,mode=0755",
    "--tmpfs", "/tmp:rw,nosuid,nodev,noexec,size=64m,mode=1777",
    "--shm-size", "64m",
    "--hostname", "pybox",
    # pybox asks for a private cgroup namespace; docker's default on a cgroup v1
    # host is the host's, so say it explicitly to keep the boxes equivalent.
    "--cgroupns", "private",
)  # fmt: skip

TIMELINE_MARKS = ("create_s", "verify_s", "start_s", "code_sent_s", "program_ended_s", "removed_s")
PATH_PYBOX = "pybox"
PATH_FRESH = "pybox_fresh"
PATH_DOCKER = "docker"


class BenchFailure(Exception):
    """A run did not print 42, or something was left behind: the numbers mean nothing."""


@dataclass
class Sample:
    """One measured call."""

    wall_s: float
    client_cpu_s: float
    daemon_cpu_s: float | None
    box_cpu_s: float | None = None
    marks: dict[str, float] = field(default_factory=dict)


@dataclass
class Context:
    """What every run needs; filled in by the warm-up."""

    client: Client
    bench_token: str
    daemon_pids: tuple[int, ...]
    image_id: str = ""
    pybox_container_ids: set[str] = field(default_factory=set)


Runner = Callable[[Context], Sample]
T = TypeVar("T")


# --- measuring one call -------------------------------------------------------


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _find_daemon_pids() -> tuple[int, ...]:
    """dockerd and containerd, if this host can see them (it cannot for a remote engine)."""
    pids: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            comm = (entry / "comm").read_text().strip()
        except OSError:
            continue  # the process ended while we looked
        if comm in ("dockerd", "containerd"):
            pids.append(int(entry.name))
    return tuple(pids)


def _daemon_cpu_s(pids: Sequence[int]) -> float | None:
    if not pids:
        return None
    ticks = 0
    try:
        for pid in pids:
            # Fields after the ")" that closes comm; utime and stime are the 12th and 13th.
            stat = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
            ticks += int(stat[11]) + int(stat[12])
    except OSError:
        return None
    return ticks / os.sysconf("SC_CLK_TCK")


def _measure(ctx: Context, call: Callable[[], T]) -> tuple[Sample, T]:
    """Time `call` and charge it the CPU of this process, its children and the daemons."""
    daemon_before = _daemon_cpu_s(ctx.daemon_pids)
    cpu_before = time.process_time() + _children_cpu_s()
    start = time.perf_counter()
    outcome = call()
    wall = time.perf_counter() - start
    client_cpu = time.process_time() + _children_cpu_s() - cpu_before
    daemon_after = _daemon_cpu_s(ctx.daemon_pids)
    daemon = None if daemon_before is None or daemon_after is None else daemon_after - daemon_before
    return Sample(wall, client_cpu, daemon), outcome


# --- the paths ----------------------------------------------------------------


def _pybox_kwargs() -> dict[str, Any]:
    return {
        "timeout_s": PYBOX_TIMEOUT_S,
        "memory_bytes": MEMORY_BYTES,
        "cpus": CPUS,
        "pids": PIDS,
        "open_files": OPEN_FILES,
        "writable_bytes": WRITABLE_BYTES,
    }


def _check_pybox(path: str, result: RunResult) -> None:
    if result.status != "succeeded" or result.stdout.rstrip("\n") != EXPECTED_STDOUT:
        raise BenchFailure(
            f"{path}: expected stdout {EXPECTED_STDOUT!r}, got status={result.status} "
            f"stdout={result.stdout!r} stderr={result.stderr[-500:]!r} "
            f"cause={result.receipt.cause.summary!r}"
        )


def _pybox_sample(ctx: Context, path: str, call: Callable[[], RunResult]) -> Sample:
    sample, outcome = _measure(ctx, call)
    _check_pybox(path, outcome)
    receipt = outcome.receipt
    if receipt.observed_by_engine.container_id:
        ctx.pybox_container_ids.add(receipt.observed_by_engine.container_id)
    sample.box_cpu_s = receipt.observed_by_kernel.cpu_usage_s
    timeline = receipt.observed_by_pybox
    for mark in TIMELINE_MARKS:
        value = getattr(timeline, mark)
        if value is not None:
            sample.marks[mark] = value
    return sample


def run_pybox(ctx: Context) -> Sample:
    return _pybox_sample(ctx, PATH_PYBOX, lambda: ctx.client.run(CODE, **_pybox_kwargs()))


def run_pybox_fresh(ctx: Context) -> Sample:
    return _pybox_sample(ctx, PATH_FRESH, lambda: run_container(CODE, **_pybox_kwargs()))


def docker_argv(image_id: str, bench_token: str) -> list[str]:
    return [
        "docker", "run", "--rm", "-i",
        *DOCKER_HARDENING,
        "--label", f"{BENCH_LABEL}={bench_token}",
        image_id,
        "/usr/bin/python3", "-c", CODE,
    ]  # fmt: skip


def _docker_call(argv: list[str]) -> str:
    # stdin is /dev/null: `-i` still attaches it, as pybox attaches stdin, and the
    # program sees end-of-file at once.
    try:
        done = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=DOCKER_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise BenchFailure(f"docker: no result within {DOCKER_TIMEOUT_S:.0f} s") from exc
    if done.returncode != 0 or done.stdout.rstrip("\n") != EXPECTED_STDOUT:
        raise BenchFailure(
            f"docker: expected stdout {EXPECTED_STDOUT!r}, got exit {done.returncode} "
            f"stdout={done.stdout!r} stderr={done.stderr[-500:]!r}"
        )
    return done.stdout


def run_docker(ctx: Context) -> Sample:
    argv = docker_argv(ctx.image_id, ctx.bench_token)
    sample, _ = _measure(ctx, lambda: _docker_call(argv))
    return sample


RUNNERS: dict[str, Runner] = {
    PATH_PYBOX: run_pybox,
    PATH_FRESH: run_pybox_fresh,
    PATH_DOCKER: run_docker,
}


# --- rounds -------------------------------------------------------------------


def round_order(paths: Sequence[str], index: int, rng: random.Random | None) -> list[str]:
    """Rotate by the round number (balanced: each path leads equally often), or shuffle."""
    if rng is not None:
        order = list(paths)
        rng.shuffle(order)
        return order
    shift = index % len(paths)
    return [*paths[shift:], *paths[:shift]]


def warm_up(ctx: Context, paths: Sequence[str], rounds: int) -> None:
    """Record the image pybox uses, then run uncounted rounds so caches settle."""
    result = ctx.client.run(CODE, **_pybox_kwargs())
    _check_pybox("warm-up", result)
    ctx.image_id = result.receipt.configured.image.id
    for index in range(rounds):
        for path in round_order(paths, index, None):
            RUNNERS[path](ctx)


def measure_rounds(
    ctx: Context, paths: Sequence[str], rounds: int, rng: random.Random | None
) -> dict[str, list[Sample]]:
    samples: dict[str, list[Sample]] = {path: [] for path in paths}
    progress = sys.stderr.isatty()  # a carriage-return counter only makes sense on a terminal
    for index in range(rounds):
        for path in round_order(paths, index, rng):
            samples[path].append(RUNNERS[path](ctx))
        if progress:
            print(f"\rround {index + 1}/{rounds}", end="", file=sys.stderr, flush=True)
    if progress:
        print(file=sys.stderr)
    return samples


# --- statistics ---------------------------------------------------------------


def percentile(values: Sequence[float], pct: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    ordered = sorted(values)
    position = (len(ordered) - 1) * pct / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def wall_stats(samples: Sequence[Sample]) -> dict[str, float]:
    walls = [s.wall_s * 1000 for s in samples]
    return {
        "n": len(walls),
        "p50_ms": percentile(walls, 50),
        "p95_ms": percentile(walls, 95),
        "min_ms": min(walls),
        "max_ms": max(walls),
    }


def _mean_p50_ms(values: Sequence[float | None]) -> dict[str, float] | None:
    known = [v * 1000 for v in values if v is not None]
    if not known:
        return None
    return {"mean_ms": sum(known) / len(known), "p50_ms": percentile(known, 50)}


def cpu_stats(samples: Sequence[Sample]) -> dict[str, dict[str, float] | None]:
    return {
        "client": _mean_p50_ms([s.client_cpu_s for s in samples]),
        "daemon": _mean_p50_ms([s.daemon_cpu_s for s in samples]),
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


def ratios(stats: dict[str, dict[str, float]], path: str) -> dict[str, float]:
    docker = stats[PATH_DOCKER]
    return {
        "p50": stats[path]["p50_ms"] / docker["p50_ms"],
        "p95": stats[path]["p95_ms"] / docker["p95_ms"],
    }


# --- environment and cleanup --------------------------------------------------


def _docker_lines(*args: str) -> list[str]:
    done = subprocess.run(["docker", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise BenchFailure(f"docker {' '.join(args)} failed: {done.stderr.strip()}")
    return [line for line in done.stdout.splitlines() if line.strip()]


def engine_version() -> str:
    lines = _docker_lines("version", "--format", "{{.Server.Version}}")
    return lines[0] if lines else "unknown"


def leftovers(ctx: Context) -> dict[str, list[str]]:
    """Containers still present that this benchmark started, plus any pybox box at all.

    Other people may be running pybox on this engine at the same time, so
    pybox-labelled boxes that are not ours are reported but do not fail the run.
    """
    managed = _docker_lines("ps", "-aq", "--no-trunc", "--filter", f"label={PYBOX_LABEL}")
    ours_docker = _docker_lines(
        "ps", "-aq", "--no-trunc", "--filter", f"label={BENCH_LABEL}={ctx.bench_token}"
    )
    return {
        "pybox_ours": sorted(ctx.pybox_container_ids.intersection(managed)),
        "pybox_others": sorted(set(managed) - ctx.pybox_container_ids),
        "docker_run_ours": ours_docker,
    }


def remove_our_docker_boxes(ids: Sequence[str]) -> None:
    # Only after a failure (e.g. a CLI timeout) can `--rm` leave one of ours behind.
    if ids:
        subprocess.run(["docker", "rm", "-f", *ids], capture_output=True, check=False)


def machine_facts() -> dict[str, Any]:
    return {
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "engine_version": engine_version(),
        "pybox_version": pybox.__version__,
    }


# --- report -------------------------------------------------------------------


def build_report(
    args: argparse.Namespace, ctx: Context, samples: dict[str, list[Sample]]
) -> dict[str, Any]:
    stats = {path: wall_stats(found) for path, found in samples.items()}
    pybox_paths = [p for p in samples if p != PATH_DOCKER]
    ratio = {path: ratios(stats, path) for path in pybox_paths}
    return {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": machine_facts(),
        "image_id": ctx.image_id,
        "rounds": args.rounds,
        "warmup_rounds": args.warmup,
        "order": "random" if args.seed is not None else "rotate",
        "seed": args.seed,
        "wall": stats,
        "cpu": {path: cpu_stats(found) for path, found in samples.items()},
        "ratio_vs_docker": ratio,
        "target": {
            "rule": f"pybox p50 <= {TARGET_RATIO} x docker run p50",
            "p50_ratio": ratio[PATH_PYBOX]["p50"],
            "verdict": "PASS" if ratio[PATH_PYBOX]["p50"] <= TARGET_RATIO else "MISS",
        },
        "pybox_timeline": {path: timeline_stats(samples[path]) for path in pybox_paths},
        "samples_wall_ms": {
            path: [round(s.wall_s * 1000, 2) for s in found] for path, found in samples.items()
        },
    }


def _rounded(value: Any) -> Any:
    """Microsecond precision is plenty for JSON readers; the clocks are not better."""
    if isinstance(value, float):
        return round(value, 3)
    if isinstance(value, dict):
        return {key: _rounded(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_rounded(item) for item in value]
    return value


def _cpu_cell(value: dict[str, float] | None) -> str:
    return "n/a" if value is None else f"{value['mean_ms']:.1f} / {value['p50_ms']:.1f}"


def print_report(report: dict[str, Any]) -> None:
    machine = report["machine"]
    print(f"run_vs_docker  {report['date']}  pybox {machine['pybox_version']}")
    print(
        f"  {machine['platform']}; {machine['cpu_count']} CPUs; engine {machine['engine_version']}"
    )
    print(f"  image {report['image_id']}")
    print(
        f"  {report['rounds']} rounds after {report['warmup_rounds']} warm-up; "
        f"order {report['order']}"
    )
    print()
    print(f"{'wall ms':<12}{'n':>4}{'p50':>9}{'p95':>9}{'min':>9}{'max':>9}")
    for path, row in report["wall"].items():
        print(
            f"{path:<12}{row['n']:>4}{row['p50_ms']:>9.1f}{row['p95_ms']:>9.1f}"
            f"{row['min_ms']:>9.1f}{row['max_ms']:>9.1f}"
        )
    print()
    print("CPU per box, ms as mean / p50")
    print("  client = this process + waited-for children (docker CLI); daemon = dockerd +")
    print("  containerd, excl. shim/runc; box = container cgroup (pybox receipt)")
    print(f"{'':<12}{'client':>16}{'daemon':>16}{'box':>16}")
    for path, cpu in report["cpu"].items():
        cells = [_cpu_cell(cpu[kind]) for kind in ("client", "daemon", "box")]
        print(f"{path:<12}" + "".join(f"{cell:>16}" for cell in cells))
    print()
    for path, ratio in report["ratio_vs_docker"].items():
        print(f"{path} / docker:  p50 {ratio['p50']:.2f}x   p95 {ratio['p95']:.2f}x")
    target = report["target"]
    print(f"target: {target['rule']}: {target['verdict']} ({target['p50_ratio']:.2f}x)")
    for path, timeline in report["pybox_timeline"].items():
        print()
        print(f"{path} timeline, p50 ms (receipt observed_by_pybox)")
        for name, value in timeline["marks_p50_ms"].items():
            print(f"  mark {name:<40}{value:>8.1f}")
        for name, value in timeline["steps_p50_ms"].items():
            print(f"  step {name:<40}{value:>8.1f}")


# --- main ---------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=30, help="measured rounds (default 30)")
    parser.add_argument("--warmup", type=int, default=3, help="uncounted rounds (default 3)")
    parser.add_argument(
        "--with-run-container",
        action="store_true",
        help="also measure run_container(), which makes a new Client each call",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=None,
        help="shuffle the order each round with this seed (default: rotate it)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.warmup < 0:
        parser.error("--rounds must be at least 1 and --warmup at least 0")
    return args


def check_clean(ctx: Context) -> list[str]:
    """What this benchmark left behind; our own docker-run boxes are removed on the way."""
    found = leftovers(ctx)
    remove_our_docker_boxes(found["docker_run_ours"])
    if found["pybox_others"]:
        print(
            f"note: {len(found['pybox_others'])} pybox box(es) present that this run did "
            "not create (someone else using the engine?)",
            file=sys.stderr,
        )
    return [
        f"{kind}: {', '.join(found[kind])}"
        for kind in ("pybox_ours", "docker_run_ours")
        if found[kind]
    ]


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    paths = [PATH_PYBOX, *([PATH_FRESH] if args.with_run_container else []), PATH_DOCKER]
    ctx = Context(Client(), uuid.uuid4().hex[:12], _find_daemon_pids())
    rng = random.Random(args.seed) if args.seed is not None else None
    report: dict[str, Any] | None = None
    try:
        warm_up(ctx, paths, args.warmup)
        samples = measure_rounds(ctx, paths, args.rounds, rng)
        report = build_report(args, ctx, samples)
    except BenchFailure as exc:
        print(f"\nrun_vs_docker: ABORTED: {exc}", file=sys.stderr)
    problems = check_clean(ctx)
    for problem in problems:
        print(f"run_vs_docker: left behind: {problem}", file=sys.stderr)
    if report is None:
        return 1
    report["leftovers"] = problems
    if args.json:
        print(json.dumps(_rounded(report), indent=2))
    else:
        print_report(report)
        print(f"\nleftover containers: {'none' if not problems else '; '.join(problems)}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
