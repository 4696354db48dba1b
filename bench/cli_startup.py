"""Benchmark: pybox's command line as whole processes, against baselines from the same run.

Each comparison is a pair of commands, each timed as a whole process: from
spawning it to its exit, with its output read. Two pairs (``--only`` picks one):

* ``version`` -- ``pybox version`` (this environment's console script, whose
  shebang is this environment's interpreter) against ``PYTHON -c pass`` with
  that same interpreter binary (``sys.executable``, or ``--python``; never a
  pyenv shim, which adds a shell and ~100 ms). What pybox's start-up and its
  imports cost on top of the interpreter's own. Target: p50 ratio <= 2.5x.
* ``exec`` -- ``pybox exec -`` with ``print(6*7)`` on stdin against
  ``docker run --rm -i`` with the same hardening flags and limits on the same
  recorded stdlib image (the image ID and limits come from one pybox run's
  receipt; the argv is bench/_docker.py's, as in bench/compare.py), running
  ``/usr/bin/python3 -`` with the same stdin. Target: p50 ratio <= 0.8x.

pybox's modules are byte-compiled first, as installing a wheel does: with
``PYTHONDONTWRITEBYTECODE`` set (as in some sandboxes) an editable install
would otherwise compile every module it imports in every timed run, and the
figures would be the compiler's. The report says what was compiled
(``bytecode``); ``--no-compile`` times the tree as it is.

This machine is shared and noisy, so every round runs each command once, in
an order that rotates from round to round, and each ratio divides by the
baseline measured in the same rounds. Warm-up rounds are not counted. The
report gives p50, p90, min and max per command and the p50 and p90 ratios
(text, or one JSON object with ``--json``). The targets are informational
(PASS/MISS): nothing is asserted, and the exit code is 0 either way. It is 1
when a command failed or printed something else ("42" for the exec pair), or
when a container this run started is left behind.

Run from the repository root: ``python bench/cli_startup.py [--rounds N] [--json]``
(``.venv/bin/python`` for the development environment).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Run as a script, this file's folder is on the path, not the repository root.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._api_path import recorded_box
from bench._docker import docker_argv
from bench._environment import loadavg, machine_facts, run_then_check
from bench._report import cell, rounded
from bench._rounds import progress, round_order
from bench._stats import ratio, verdict, wall_stats
from bench._values import CODE, EXPECTED_STDOUT, BenchFailure, Context

REPORT_VERSION = 1
UPPER_PCT = 90  # the upper percentile reported: with ~15 rounds p95 is one sample
PROCESS_TIMEOUT_S = 120.0
PAIRS = ("version", "exec")


@dataclass(frozen=True)
class Pair:
    """A command timed against its baseline, and the most their p50 ratio should be."""

    name: str
    command: str
    baseline: str
    target: float
    what: str


PAIR_SPECS = {
    "version": Pair(
        "version", "pybox_version", "python_pass", 2.5, "pybox version / python -c pass"
    ),
    "exec": Pair("exec", "pybox_exec", "docker_run", 0.8, "pybox exec - / docker run --rm -i"),
}


@dataclass(frozen=True)
class Command:
    """One whole process: its argv, its stdin, and what its stdout must start with."""

    argv: tuple[str, ...]
    stdin: bytes = b""
    stdout_starts: str = ""


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Time pybox's command line as whole processes against same-run baselines."
    )
    parser.add_argument("--rounds", type=int, default=15, help="measured rounds (default 15)")
    parser.add_argument("--warmup", type=int, default=2, help="uncounted rounds (default 2)")
    parser.add_argument(
        "--only", choices=PAIRS, default=None, help="measure one pair (default: both)"
    )
    parser.add_argument(
        "--python",
        default=sys.executable,
        help="the interpreter binary for `-c pass` (default: the one running this)",
    )
    parser.add_argument(
        "--pybox", default=None, help="the pybox console script (default: next to --python)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--no-compile",
        action="store_true",
        help="time the modules as found (default: byte-compile them first, as an install does)",
    )
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.warmup < 0:
        parser.error(f"--rounds must be at least 1 (got {args.rounds}), --warmup at least 0")
    args.pairs = [args.only] if args.only else list(PAIRS)
    args.pybox = args.pybox or str(Path(args.python).with_name("pybox"))
    problem = check_executables(Path(args.python), Path(args.pybox))
    if problem:
        parser.error(problem)
    return args


def check_executables(python: Path, pybox_script: Path) -> str | None:
    """Why these cannot be timed fairly (say how to fix it), or None."""
    if not _executable(python):
        return f"--python {python} is not an executable file; pass --python PATH"
    # A shim (pyenv's is a shell script) adds its own start-up to the baseline.
    with python.open("rb") as binary:
        if binary.read(2) == b"#!":
            return (
                f"--python {python} is a script (a pyenv shim?), not an interpreter binary; "
                "pass the environment's own interpreter, e.g. .venv/bin/python"
            )
    if not _executable(pybox_script):
        return f"--pybox {pybox_script} is not an executable file; pass --pybox PATH"
    return None


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def compile_pybox(python: str) -> dict[str, Any]:
    """Byte-compile the pybox package `python` imports, as installing a wheel does."""
    where = subprocess.run(
        [python, "-c", "import os, pybox; print(os.path.dirname(pybox.__file__))"],
        capture_output=True,
        text=True,
        check=False,
        timeout=PROCESS_TIMEOUT_S,
    )
    package = where.stdout.strip()
    if where.returncode != 0 or not package:
        raise BenchFailure(f"cannot find the pybox package of {python}: {where.stderr[-300:]!r}")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    done = subprocess.run(
        [python, "-m", "compileall", "-q", package],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=PROCESS_TIMEOUT_S,
    )
    if done.returncode != 0:
        raise BenchFailure(f"compileall {package} failed: {done.stdout[-300:]!r}")
    return {
        "compiled": package,
        "dont_write_bytecode_in_env": "PYTHONDONTWRITEBYTECODE" in os.environ,
    }


def commands(
    args: argparse.Namespace, image_id: str, limits: Mapping[str, float], token: str
) -> dict[str, Command]:
    """The commands of the chosen pairs, baseline first in each pair."""
    program = f"{CODE}\n".encode()
    found: dict[str, Command] = {}
    if "version" in args.pairs:
        found["python_pass"] = Command((args.python, "-c", "pass"))
        found["pybox_version"] = Command((args.pybox, "version"), stdout_starts="pybox ")
    if "exec" in args.pairs:
        docker = docker_argv(image_id, limits, token, command=("/usr/bin/python3", "-"))
        found["docker_run"] = Command(tuple(docker), program, EXPECTED_STDOUT)
        found["pybox_exec"] = Command((args.pybox, "exec", "-"), program, EXPECTED_STDOUT)
    return found


def run_once(ctx: Context, name: str, command: Command) -> float:
    """Start the process, feed its stdin, wait for its exit: the wall time in seconds."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        command.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    # pybox labels a box with the pid of the process that made it: the leftover
    # check knows this child's boxes by that pid.
    ctx.owner_pids.add(proc.pid)
    try:
        stdout, stderr = proc.communicate(command.stdin, timeout=PROCESS_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        proc.kill()
        proc.communicate()
        raise BenchFailure(f"{name}: no exit within {PROCESS_TIMEOUT_S:.0f} s") from exc
    wall = time.perf_counter() - start
    text = stdout.decode(errors="replace")
    if proc.returncode != 0 or not text.startswith(command.stdout_starts):
        raise BenchFailure(
            f"{name}: exit {proc.returncode}, stdout {text[:200]!r} (expected it to start with "
            f"{command.stdout_starts!r}), stderr {stderr.decode(errors='replace')[-300:]!r}"
        )
    return wall


def measure(
    ctx: Context, found: Mapping[str, Command], rounds: int, warmup: int
) -> dict[str, list[float]]:
    """Every command once per round, the order rotating by round; warm-up not kept."""
    names = list(found)
    walls: dict[str, list[float]] = {name: [] for name in names}
    for index in range(warmup + rounds):
        for name in round_order(names, index, None):
            wall = run_once(ctx, name, found[name])
            if index >= warmup:
                walls[name].append(wall)
        progress("round", index + 1, warmup + rounds)
    return walls


def comparisons(stats: Mapping[str, Mapping[str, float]]) -> list[dict[str, Any]]:
    """Each measured pair: its p50 and p90 ratios to its baseline, and the verdict."""
    upper = f"p{UPPER_PCT}_ms"
    found: list[dict[str, Any]] = []
    for pair in PAIR_SPECS.values():
        if pair.command not in stats or pair.baseline not in stats:
            continue
        command, baseline = stats[pair.command], stats[pair.baseline]
        p50 = ratio(command["p50_ms"], baseline["p50_ms"])
        found.append(
            {
                "pair": pair.name,
                "what": pair.what,
                "command": pair.command,
                "baseline": pair.baseline,
                "p50_ratio": p50,
                f"p{UPPER_PCT}_ratio": ratio(command[upper], baseline[upper]),
                "target_p50_ratio_at_most": pair.target,
                "verdict": verdict(p50, at_most=pair.target),
            }
        )
    return found


def build_report(
    args: argparse.Namespace,
    started_at: str,
    machine: Mapping[str, Any],
    box: tuple[str, Mapping[str, float]],
    found: Mapping[str, Command],
    walls: Mapping[str, Sequence[float]],
    bytecode: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    stats = {name: wall_stats(values, UPPER_PCT) for name, values in walls.items()}
    return {
        "report_version": REPORT_VERSION,
        "date": started_at,
        "finished_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": " ".join(["python", "bench/cli_startup.py", *sys.argv[1:]]),
        "machine": dict(machine),
        "loadavg_at_end": loadavg(),
        "python": args.python,
        "pybox": args.pybox,
        "image_id": box[0],
        "limits": dict(box[1]),
        "rounds": args.rounds,
        "warmup_rounds": args.warmup,
        "bytecode": dict(bytecode or {}),
        "argv": {name: list(command.argv) for name, command in found.items()},
        "wall": stats,
        "comparisons": comparisons(stats),
        "samples_wall_ms": {name: [round(w * 1000, 2) for w in ws] for name, ws in walls.items()},
    }


def report_lines(report: Mapping[str, Any]) -> Iterator[str]:
    machine = report["machine"]
    upper = f"p{UPPER_PCT}"
    yield f"cli_startup  {report['date']}  pybox {machine['pybox_version']}"
    yield (
        f"  {machine['cpu_model']}, {machine['cpu_count']} CPUs; kernel {machine['kernel']}; "
        f"load {' '.join(machine['loadavg_at_start'])} at start, "
        f"{' '.join(report['loadavg_at_end'])} at end"
    )
    yield f"  python {report['python']}; pybox {report['pybox']}"
    if report["image_id"]:
        yield f"  image {report['image_id']}"
    compiled = report["bytecode"].get("compiled")
    yield f"  bytecode: {'compiled first: ' + compiled if compiled else 'as found (--no-compile)'}"
    yield (
        f"  {report['rounds']} rounds after {report['warmup_rounds']} warm-up; "
        "order rotates each round; whole processes"
    )
    yield ""
    yield f"{'wall ms':<15}{'n':>4}" + "".join(f"{c:>9}" for c in ("p50", upper, "min", "max"))
    for name, row in report["wall"].items():
        yield (
            f"{name:<15}{row['n']:>4}{row['p50_ms']:>9.1f}{row[upper + '_ms']:>9.1f}"
            f"{row['min_ms']:>9.1f}{row['max_ms']:>9.1f}"
        )
    yield ""
    yield "ratios to the baseline of the same run (targets informational)"
    for row in report["comparisons"]:
        yield (
            f"  {row['verdict']:<5} {row['what']:<36} p50 {cell(row['p50_ratio'], '.2f', 'x')}"
            f"  {upper} {cell(row[upper + '_ratio'], '.2f', 'x')}"
            f"  (target p50 <= {row['target_p50_ratio_at_most']:g}x)"
        )


def run(args: argparse.Namespace, ctx: Context) -> dict[str, Any]:
    started_at = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    machine = machine_facts()
    bytecode = {} if args.no_compile else compile_pybox(args.python)
    box: tuple[str, Mapping[str, float]] = ("", {})
    if "exec" in args.pairs:
        box = recorded_box(ctx)  # the stdlib image and default limits, from a receipt
    found = commands(args, box[0], box[1], ctx.token)
    walls = measure(ctx, found, args.rounds, args.warmup)
    return build_report(args, started_at, machine, box, found, walls, bytecode)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    ctx = Context(uuid.uuid4().hex[:12], ())
    # Only the exec pair starts containers (and boxes) to check for afterwards.
    report, problems = run_then_check(
        "cli_startup", ctx, lambda: run(args, ctx), check="exec" in args.pairs
    )
    if report is None:
        return 1
    if args.json:
        print(json.dumps(rounded(report), indent=2))
    else:
        print("\n".join(report_lines(report)))
        print(f"\nleftover containers: {'none' if not problems else '; '.join(problems)}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
