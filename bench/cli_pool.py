"""Benchmark: `pybox exec -` as a whole process with the CLI pool service, without it,
and `docker run --rm -i`, side by side in the same rounds.

* ``pybox_pool`` -- ``pybox exec -`` of ``print(6*7)`` while a pool service
  (``pybox pool start``, started by this benchmark on a state directory of its
  own) holds warm boxes. Target (issue 19): p50 at most 0.4x ``docker_run``.
* ``pybox_cold`` -- the same command on another state directory, where no
  service listens: the client finds no socket and the run is cold, exactly as
  without a service. Target (issue 13): p50 at most 0.8x ``docker_run``.
* ``docker_run`` -- ``docker run --rm -i`` with pybox's hardening and limits on
  the same image ID, running ``/usr/bin/python3 -`` with the same stdin (the
  argv of bench/_docker.py, as bench/cli_startup.py and bench/compare.py use).
  With ``--engine podman`` (pybox on Podman: ``PYBOX_ENGINE=podman`` and
  ``CONTAINER_HOST`` in the environment) the baseline is ``podman_run``, the
  same box by ``podman run --rm -i`` (``bench/engines.py`` runs both engines).

Every round runs each once, in an order that rotates from round to round.
Before each measured process the benchmark waits, unmeasured, until the
service's pool is full again (an agent's think-time between calls), so a refill
never overlaps a measurement; hits and misses are the service's own counts.
Every run must print ``42``; at the end the service is stopped and nothing it
or the runs made may be left (exit code 1 otherwise). Targets are reported,
never asserted.

``--throughput`` adds runs per second with N callers at once (N = 1, 2, 4, 8,
``--throughput-runs`` runs per level, no think-time within a level), for the
pool path and docker run, with the service's hits per level.

Run from the repository root: ``python bench/cli_pool.py [--rounds N] [--json]``
(``.venv/bin/python`` for the development environment).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._api_path import recorded_box
from bench._docker import engine_run_argv
from bench._environment import loadavg, machine_facts, run_then_check
from bench._report import rounded
from bench._rounds import progress, round_order
from bench._stats import ratio, verdict, wall_stats
from bench._values import CODE, EXPECTED_STDOUT, BenchFailure, Context
from bench.cli_startup import PROCESS_TIMEOUT_S, check_executables, compile_pybox
from pybox._adapters.state import default_state_dir
from pybox._core.poolwire import PREFIX, WIRE_VERSION, decode_header, encode_frame, frame_lengths

REPORT_VERSION = 1
UPPER_PCT = 90
REFILL_WAIT_S = 30.0
TARGETS = {"pybox_pool": 0.4, "pybox_cold": 0.8}
LEVELS = (1, 2, 4, 8)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15, help="measured rounds (default 15)")
    parser.add_argument("--warmup", type=int, default=2, help="uncounted rounds (default 2)")
    parser.add_argument("--python", default=sys.executable, help="the interpreter binary")
    parser.add_argument("--pybox", default=None, help="the console script (default: beside it)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--engine",
        choices=("docker", "podman"),
        default="docker",
        help="the engine pybox drives (from the environment) and whose own run is the baseline",
    )
    parser.add_argument("--throughput", action="store_true", help="add N = 1, 2, 4, 8 callers")
    parser.add_argument("--throughput-runs", type=int, default=24, help="runs per level")
    args = parser.parse_args(argv)
    args.pybox = args.pybox or str(Path(args.python).with_name("pybox"))
    problem = check_executables(Path(args.python), Path(args.pybox))
    if problem:
        parser.error(problem)
    return args


def _state_dir(root: Path, name: str) -> dict[str, str]:
    """A state directory with the machine's image records, and the env that uses it."""
    state = root / name
    state.mkdir(mode=0o700)
    shutil.copy(default_state_dir(os.environ) / "images.json", state / "images.json")
    env = {k: v for k, v in os.environ.items() if k not in ("PYBOX_POOL", "PYBOX_CONFIG")}
    env["PYBOX_STATE_DIR"] = str(state)
    return env


def _status(socket_path: str) -> dict[str, Any]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(5)
    try:
        sock.connect(socket_path)
        sock.sendall(encode_frame({"t": "status", "wire": WIRE_VERSION}))
        header_len, _ = frame_lengths(sock.recv(PREFIX.size, socket.MSG_WAITALL), 1 << 20)
        header = decode_header(sock.recv(header_len, socket.MSG_WAITALL))
    finally:
        sock.close()
    status = header.get("status")
    if not isinstance(status, dict):
        raise BenchFailure(f"the pool service answered {header!r}")
    return status


def wait_full(socket_path: str, boxes: int) -> bool:
    deadline = time.monotonic() + REFILL_WAIT_S
    while time.monotonic() < deadline:
        profiles = _status(socket_path)["profiles"]
        if profiles and all(p["waiting"] >= boxes and p["in_use"] == 0 for p in profiles):
            return True
        time.sleep(0.01)
    return False


def run_once(ctx: Context, name: str, argv: Sequence[str], env: Mapping[str, str]) -> float:
    start = time.perf_counter()
    proc = subprocess.Popen(
        list(argv),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=dict(env),
    )
    ctx.owner_pids.add(proc.pid)
    try:
        stdout, stderr = proc.communicate(f"{CODE}\n".encode(), timeout=PROCESS_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        proc.kill()
        proc.communicate()
        raise BenchFailure(f"{name}: no exit within {PROCESS_TIMEOUT_S:.0f} s") from exc
    wall = time.perf_counter() - start
    if proc.returncode != 0 or stdout.decode(errors="replace").strip() != EXPECTED_STDOUT:
        raise BenchFailure(
            f"{name}: exit {proc.returncode}, stdout {stdout[:200]!r}, stderr {stderr[-300:]!r}"
        )
    return wall


def baseline_environ(engine: str) -> Mapping[str, str]:
    """The engine's own CLI as a user types it: `podman run` in its local mode
    (with CONTAINER_HOST it would go through the API service, where `--runtime`
    is not offered)."""
    if engine != "podman":
        return os.environ
    return {k: v for k, v in os.environ.items() if k != "CONTAINER_HOST"}


class Setup:
    def __init__(self, args: argparse.Namespace, ctx: Context, root: Path) -> None:
        self.args, self.ctx = args, ctx
        self.pool_env = _state_dir(root, "with-service")
        self.cold_env = _state_dir(root, "without-service")
        self.socket = str(Path(self.pool_env["PYBOX_STATE_DIR"]) / "pool" / "cli.sock")
        self.boxes = int(os.environ.get("PYBOX_POOL_BOXES", "2"))
        image_id, limits = recorded_box(ctx)
        self.baseline = f"{args.engine}_run"
        engine_run = engine_run_argv(
            args.engine, image_id, limits, ctx.token, command=("/usr/bin/python3", "-")
        )
        self.image_id, self.limits = image_id, limits
        exec_argv = [args.pybox, "exec", "-"]
        self.paths: dict[str, tuple[list[str], Mapping[str, str]]] = {
            self.baseline: (engine_run, baseline_environ(args.engine)),
            "pybox_pool": (exec_argv, self.pool_env),
            "pybox_cold": (exec_argv, self.cold_env),
        }

    def start_service(self) -> None:
        started = subprocess.run(
            [self.args.pybox, "pool", "start"], env=self.pool_env, capture_output=True, check=False
        )
        if started.returncode != 0:
            raise BenchFailure(f"pybox pool start failed: {started.stderr.decode()[-300:]}")
        self.service_pid = int(_status(self.socket)["pid"])
        self.ctx.owner_pids.add(self.service_pid)
        if not wait_full(self.socket, self.boxes):
            raise BenchFailure("the pool service did not fill its pool within 30 s")

    def stop_service(self) -> None:
        subprocess.run(
            [self.args.pybox, "pool", "stop"], env=self.pool_env, capture_output=True, check=False
        )


def latency(setup: Setup) -> tuple[dict[str, list[float]], dict[str, int]]:
    names = list(setup.paths)
    walls: dict[str, list[float]] = {name: [] for name in names}
    counts = {"hits": 0, "misses": 0, "refill_timeouts": 0}
    for index in range(setup.args.warmup + setup.args.rounds):
        for name in round_order(names, index, None):
            if not wait_full(setup.socket, setup.boxes):
                counts["refill_timeouts"] += 1
            before = _status(setup.socket)
            argv, env = setup.paths[name]
            wall = run_once(setup.ctx, name, argv, env)
            after = _status(setup.socket)
            if index >= setup.args.warmup:
                walls[name].append(wall)
                if name == "pybox_pool":
                    counts["hits"] += after["hits"] - before["hits"]
                    counts["misses"] += after["misses"] - before["misses"]
        progress("round", index + 1, setup.args.warmup + setup.args.rounds)
    return walls, counts


def throughput(setup: Setup) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    for name in (setup.baseline, "pybox_pool"):
        argv, env = setup.paths[name]
        for level in LEVELS:
            wait_full(setup.socket, setup.boxes)
            before = _status(setup.socket)
            start = time.perf_counter()
            with concurrent.futures.ThreadPoolExecutor(level) as workers:
                runs = [
                    workers.submit(run_once, setup.ctx, name, argv, env)
                    for _ in range(setup.args.throughput_runs)
                ]
                for done in runs:
                    done.result()
            elapsed = time.perf_counter() - start
            after = _status(setup.socket)
            found.setdefault(name, {})[str(level)] = {
                "runs_per_s": setup.args.throughput_runs / elapsed,
                "hits": after["hits"] - before["hits"] if name == "pybox_pool" else None,
                "runs": setup.args.throughput_runs,
            }
            progress(f"throughput {name}", level, LEVELS[-1])
    return found


def run(args: argparse.Namespace, ctx: Context) -> dict[str, Any]:
    started_at = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    machine = machine_facts(args.engine)
    bytecode = compile_pybox(args.python)
    root = Path(tempfile.mkdtemp(prefix="pybox-bench-pool-"))
    setup: Setup | None = None
    try:
        setup = Setup(args, ctx, root)
        setup.start_service()
        walls, counts = latency(setup)
        rates = throughput(setup) if args.throughput else {}
    finally:
        if setup is not None:
            setup.stop_service()
        shutil.rmtree(root, ignore_errors=True)
    stats = {name: wall_stats(values, UPPER_PCT) for name, values in walls.items()}
    baseline = setup.baseline
    base = stats[baseline]["p50_ms"]
    comparisons = {
        name: {
            "p50_ratio": ratio(stats[name]["p50_ms"], base),
            f"p{UPPER_PCT}_ratio": ratio(
                stats[name][f"p{UPPER_PCT}_ms"], stats[baseline][f"p{UPPER_PCT}_ms"]
            ),
            "target_p50_ratio_at_most": target,
            "verdict": verdict(ratio(stats[name]["p50_ms"], base), at_most=target),
        }
        for name, target in TARGETS.items()
    }
    return {
        "report_version": REPORT_VERSION,
        "date": started_at,
        "finished_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": " ".join(["python", "bench/cli_pool.py", *sys.argv[1:]]),
        "machine": dict(machine),
        "loadavg_at_end": loadavg(),
        "pybox": args.pybox,
        "engine": args.engine,
        "baseline": baseline,
        "image_id": setup.image_id,
        "limits": dict(setup.limits),
        "rounds": args.rounds,
        "warmup_rounds": args.warmup,
        "bytecode": bytecode,
        "argv": {name: list(argv) for name, (argv, _) in setup.paths.items()},
        "wall": stats,
        "comparisons": comparisons,
        "pool": counts,
        "throughput": rates,
        "samples_wall_ms": {name: [round(w * 1000, 2) for w in ws] for name, ws in walls.items()},
    }


def report_lines(report: Mapping[str, Any]) -> list[str]:
    machine = report["machine"]
    upper = f"p{UPPER_PCT}"
    lines = [
        f"cli_pool  {report['date']}  pybox {machine['pybox_version']}",
        f"  {machine['cpu_model']}, {machine['cpu_count']} CPUs; kernel {machine['kernel']}; "
        f"load {' '.join(machine['loadavg_at_start'])} at start, "
        f"{' '.join(report['loadavg_at_end'])} at end",
        f"  image {report['image_id']}; {report['rounds']} rounds after "
        f"{report['warmup_rounds']} warm-up; order rotates each round; whole processes",
        "",
        f"{'wall ms':<12}{'n':>4}" + "".join(f"{c:>9}" for c in ("p50", upper, "min", "max")),
    ]
    for name, row in report["wall"].items():
        lines.append(
            f"{name:<12}{row['n']:>4}{row['p50_ms']:>9.1f}{row[upper + '_ms']:>9.1f}"
            f"{row['min_ms']:>9.1f}{row['max_ms']:>9.1f}"
        )
    lines.append("")
    for name, row in report["comparisons"].items():
        lines.append(
            f"  {row['verdict']:<5} {name} / {report['baseline']}: p50 {row['p50_ratio']:.2f}x, "
            f"{upper} {row[upper + '_ratio']:.2f}x "
            f"(target p50 <= {row['target_p50_ratio_at_most']}x)"
        )
    pool = report["pool"]
    lines.append(
        f"  pool hits {pool['hits']} of {pool['hits'] + pool['misses']}; "
        f"refill timeouts {pool['refill_timeouts']}"
    )
    for name, levels in report["throughput"].items():
        cells = ", ".join(
            f"N={n}: {row['runs_per_s']:.2f}/s"
            + ("" if row["hits"] is None else f" ({row['hits']} of {row['runs']} hits)")
            for n, row in levels.items()
        )
        lines.append(f"  throughput {name}: {cells}")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    ctx = Context(uuid.uuid4().hex[:12], (), engine=args.engine)
    report, problems = run_then_check("cli_pool", ctx, lambda: run(args, ctx), check=True)
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
