"""The machine's facts, and the check that nothing the benchmark started is left behind."""

from __future__ import annotations

import os
import platform
import socket
import subprocess
import sys
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import Any

import pybox
from bench._values import BENCH_LABEL, PYBOX_LABEL, PYBOX_OWNER_LABEL, BenchFailure, Context


def engine_lines(engine: str, *args: str) -> list[str]:
    """The lines `engine`'s own CLI (docker or podman) prints for `args`."""
    done = subprocess.run([engine, *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise BenchFailure(f"{engine} {' '.join(args)} failed: {done.stderr.strip()}")
    return [line for line in done.stdout.splitlines() if line.strip()]


def _owner_format(engine: str) -> str:
    # Podman's `ps` template has no `.Label`; Docker's `.Labels` is one joined string.
    if engine == "podman":
        return f'{{{{.ID}}}} {{{{index .Labels "{PYBOX_OWNER_LABEL}"}}}}'
    return f'{{{{.ID}}}} {{{{.Label "{PYBOX_OWNER_LABEL}"}}}}'


def owned_by(owner_label: str, pids: set[int], hostname: str) -> bool:
    """pybox labels each box with `host:pid:start-ticks` of the process that made it."""
    parts = owner_label.rsplit(":", 2)
    if len(parts) != 3:
        return False
    host, pid, _start_ticks = parts
    return host == hostname and pid.isdigit() and int(pid) in pids


def leftovers(ctx: Context) -> dict[str, list[str]]:
    """Containers and images this benchmark (or its pybox clients) made that still exist."""
    hostname = socket.gethostname()
    engine = ctx.engine
    managed = engine_lines(
        engine, "ps", "-a", "--no-trunc", "--filter", f"label={PYBOX_LABEL}",
        "--format", _owner_format(engine),
    )  # fmt: skip
    ours_pybox = sorted(
        line.split()[0]
        for line in managed
        if line.split()[0] in ctx.pybox_container_ids
        or (len(line.split()) > 1 and owned_by(line.split()[1], ctx.owner_pids, hostname))
    )
    label = f"label={BENCH_LABEL}={ctx.token}"
    return {
        "pybox_boxes": ours_pybox,
        "bench_containers": engine_lines(engine, "ps", "-aq", "--no-trunc", "--filter", label),
        "bench_images": engine_lines(engine, "images", "-q", "--no-trunc", "--filter", label),
    }


def clean_up(ctx: Context) -> list[str]:
    """What is still there after the tear-down: each is a problem, reported.

    Our own containers and images are removed on the way; pybox's boxes are
    pybox's to remove (a leftover is a pybox bug, swept by `pybox sweep` once
    this process has ended).
    """
    found = leftovers(ctx)
    if found["bench_containers"]:
        subprocess.run(
            [ctx.engine, "rm", "-f", *found["bench_containers"]], capture_output=True, check=False
        )
    if found["bench_images"]:
        subprocess.run(
            [ctx.engine, "rmi", *found["bench_images"]], capture_output=True, check=False
        )
    problems = [f"{kind}: {', '.join(ids)}" for kind, ids in found.items() if ids]
    still = leftovers(ctx)
    if any(still[kind] for kind in ("bench_containers", "bench_images")):
        problems.append(f"could not remove: {still}")
    return problems


def loadavg() -> list[str]:
    """The 1, 5 and 15 minute load averages, as the kernel prints them."""
    return Path("/proc/loadavg").read_text().split()[:3]


def machine_facts(engine: str = "docker") -> dict[str, Any]:
    cpu_model = "unknown"
    with suppress(OSError), open("/proc/cpuinfo") as cpuinfo:
        for line in cpuinfo:
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    versions = engine_lines(
        engine, "version", "--format", "{{.Server.Version}} {{.Server.APIVersion}}"
    )
    version, _, api = (versions[0] if versions else "unknown").partition(" ")
    return {
        "cpu_model": cpu_model,
        "cpu_count": os.cpu_count(),
        "kernel": platform.release(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "engine": engine,
        "engine_version": version,
        "engine_api": api,
        "pybox_version": pybox.__version__,
        "loadavg_at_start": loadavg(),
    }


def run_then_check(
    name: str, ctx: Context, run: Callable[[], dict[str, Any]], *, check: bool = True
) -> tuple[dict[str, Any] | None, list[str]]:
    """Run a benchmark, then (an interrupt too) remove and report what it left behind.

    The report (None when the run was aborted, which is said on stderr) gets the
    leftovers; with `check` False (nothing was started) there is no check.
    """
    report: dict[str, Any] | None = None
    try:
        report = run()
    except BenchFailure as exc:
        print(f"\n{name}: ABORTED: {exc}", file=sys.stderr)
    except pybox.PyboxError as exc:
        print(f"\n{name}: ABORTED: pybox: {exc}", file=sys.stderr)
    finally:  # nothing the benchmark started may outlive it
        problems = clean_up(ctx) if check else []
        for problem in problems:
            print(f"{name}: left behind: {problem}", file=sys.stderr)
    if report is not None:
        report["leftovers"] = problems
    return report, problems
