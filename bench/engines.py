"""Benchmark: pybox on Docker and on Podman, each against that engine's own `run --rm`.

For each engine, ``bench/cli_pool.py --engine NAME`` runs, in rotating order in
the same rounds, a cold ``pybox exec -`` (no pool service), a warm one (a
``pybox pool start`` service holding boxes) and the engine's own ``run --rm -i``
of the same box on the same image (``docker run`` or ``podman --runtime runc
run``, bench/_docker.py). Each engine's ratios are against its own baseline
from its own rounds, so the two engines' figures never mix. Nothing is
asserted; a run that left anything behind exits 1.

Podman needs its API service (docs/engines.md, "Starting Podman for pybox"),
its socket (``--podman-host``, default ``$CONTAINER_HOST``), a pybox state
directory whose image records are Podman's (``--podman-state-dir``, default
``$PYBOX_STATE_DIR_PODMAN``), and the same ``CONTAINERS_CONF`` for its CLI as
for its service (taken from the environment).

Run from the repository root: ``python bench/engines.py [--rounds N] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

REPORT_VERSION = 1
ENGINES = ("docker", "podman")
CLI_POOL = Path(__file__).resolve().with_name("cli_pool.py")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10, help="measured rounds per engine")
    parser.add_argument("--warmup", type=int, default=2, help="uncounted rounds per engine")
    parser.add_argument("--python", default=sys.executable, help="the interpreter binary")
    parser.add_argument("--engines", default=",".join(ENGINES), help="comma-separated")
    parser.add_argument("--podman-host", default=os.environ.get("CONTAINER_HOST"))
    parser.add_argument("--podman-state-dir", default=os.environ.get("PYBOX_STATE_DIR_PODMAN"))
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    args.engines = [name.strip() for name in args.engines.split(",") if name.strip()]
    unknown = [name for name in args.engines if name not in ENGINES]
    if unknown:
        parser.error(f"--engines: {', '.join(unknown)} is not one of {', '.join(ENGINES)}")
    if "podman" in args.engines and not (args.podman_host and args.podman_state_dir):
        parser.error(
            "Podman needs --podman-host (its API socket, unix:///...) and --podman-state-dir "
            "(a pybox state directory with Podman's image records; `pybox image build "
            "stdlib` with PYBOX_ENGINE=podman fills one)"
        )
    return args


def engine_environ(args: argparse.Namespace, engine: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYBOX_ENGINE", "CONTAINER_HOST")}
    if engine == "podman":
        env.pop("DOCKER_HOST", None)
        env.update(
            PYBOX_ENGINE="podman",
            CONTAINER_HOST=args.podman_host,
            PYBOX_STATE_DIR=args.podman_state_dir,
        )
    return env


def one_engine(args: argparse.Namespace, engine: str) -> dict[str, Any]:
    argv = [
        args.python, str(CLI_POOL), "--json", "--engine", engine,
        "--rounds", str(args.rounds), "--warmup", str(args.warmup), "--python", args.python,
    ]  # fmt: skip
    done = subprocess.run(
        argv, env=engine_environ(args, engine), capture_output=True, text=True, check=False
    )
    if done.returncode != 0 or not done.stdout.strip():
        return {"engine": engine, "failed": done.stderr.strip()[-600:] or f"exit {done.returncode}"}
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def summary_lines(reports: Mapping[str, Mapping[str, Any]]) -> list[str]:
    lines = [f"{'engine':<8}{'path':<14}{'p50 ms':>9}{'p90 ms':>9}{'x own run':>11}"]
    for engine, report in reports.items():
        if "failed" in report:
            lines.append(f"{engine:<8}FAILED: {report['failed']}")
            continue
        machine = report["machine"]
        base = report["baseline"]
        for name, row in report["wall"].items():
            comparison = report["comparisons"].get(name)
            times = f"{comparison['p50_ratio']:.2f}x" if comparison else "1.00x"
            lines.append(
                f"{engine:<8}{name:<14}{row['p50_ms']:>9.1f}{row['p90_ms']:>9.1f}{times:>11}"
            )
        pool = report["pool"]
        lines.append(
            f"{'':<8}{engine} {machine['engine_version']}; baseline {base}; "
            f"pool hits {pool['hits']} of {pool['hits'] + pool['misses']}; "
            f"leftovers: {', '.join(report.get('leftovers') or []) or 'none'}"
        )
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    reports = {engine: one_engine(args, engine) for engine in args.engines}
    if args.json:
        print(json.dumps({"report_version": REPORT_VERSION, "engines": reports}, indent=2))
    else:
        print("\n".join(summary_lines(reports)))
    failed = any("failed" in r or r.get("leftovers") for r in reports.values())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
