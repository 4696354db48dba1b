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
import datetime
import json
import os
import platform
import queue
import random
import resource
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, TypeVar

import pybox
from pybox import Client, RunResult, run_container

REPORT_VERSION = 1
CODE = "print(6*7)"
EXPECTED_STDOUT = "42"
DOCKER_TIMEOUT_S = 60.0
REFILL_WAIT_S = 30.0
MCP_TIMEOUT_S = 60.0
MCP_PROTOCOL_VERSION = "2025-11-25"
PEER_SETUP_TIMEOUT_S = 600.0

PYBOX_LABEL = "io.pybox.managed"
PYBOX_OWNER_LABEL = "io.pybox.owner"
# Containers and images the benchmark itself starts (docker run, peers, the
# peers' derived image) carry this label with the run's token, so the cleanup
# check finds exactly those and nobody else's.
BENCH_LABEL = "io.pybox.bench"

PATH_DOCKER = "docker"
PATH_COLD = "pybox_cold"
PATH_WARM = "pybox_warm"
PATH_MCP = "pybox_mcp"
PEER_LLM_SANDBOX = "llm_sandbox"
PEER_EPICBOX = "epicbox"
PEER_PATHS = (PEER_LLM_SANDBOX, PEER_EPICBOX)
ALL_PATHS = (PATH_DOCKER, PATH_COLD, PATH_WARM, PATH_MCP, *PEER_PATHS)
DEFAULT_PATHS = (PATH_DOCKER, PATH_COLD, PATH_WARM, PATH_MCP)
PYBOX_PATHS = (PATH_COLD, PATH_WARM, PATH_MCP)
THROUGHPUT_PATHS = (PATH_DOCKER, PATH_COLD, PATH_WARM)
CONCURRENCY_LEVELS = (1, 2, 4, 8)

# Pinned so that a result names what it measured; the quirks are in the docstring.
PEER_PACKAGES: dict[str, tuple[str, ...]] = {
    PEER_LLM_SANDBOX: ("llm-sandbox[docker]==0.3.46",),
    PEER_EPICBOX: ("epicbox==1.1.0", "urllib3<2"),
}

# Ratio of a path's p50 to docker run's p50 (at most).
LATENCY_TARGETS = (
    (PATH_WARM, 0.2, "warm pool (issue 5)"),
    (PATH_COLD, 0.5, "cold path (issue 5)"),
    (PATH_COLD, 0.6, "cold path (engine issue)"),
)
PEER_SPEEDUP_TARGET = 3.0  # each peer's p50 / pybox's p50, at least
CPU_TARGET = 0.5  # pybox's CPU per box / docker run's, at most
NOISY_BACKGROUND_CPUS = 0.1  # busier than this while idle: the machine figure is not trusted

TIMELINE_MARKS = ("create_s", "verify_s", "start_s", "code_sent_s", "program_ended_s", "removed_s")
T = TypeVar("T")


class BenchFailure(Exception):
    """A run did not print 42, or something was left behind: the numbers mean nothing."""


class PathUnavailable(Exception):
    """A path cannot be measured here (say why); the others still are."""


# --- values -------------------------------------------------------------------


@dataclass
class Outcome:
    """What one call returned, beyond its stdout (already checked)."""

    box_source: str | None = None
    container_id: str | None = None
    box_cpu_s: float | None = None
    marks: dict[str, float] = field(default_factory=dict)
    inner_wall_s: float | None = None  # peers: the library call, timed in the worker


@dataclass
class Sample:
    """One measured call."""

    wall_s: float
    client_cpu_s: float | None
    daemon_cpu_s: float | None
    box_cpu_s: float | None = None
    box_source: str | None = None
    marks: dict[str, float] = field(default_factory=dict)


@dataclass
class Context:
    """What every run needs; filled in by the set-up."""

    token: str
    daemon_pids: tuple[int, ...]
    think_s: float = 0.5
    image_id: str = ""
    limits: dict[str, float] = field(default_factory=dict)
    warm: Client | None = None
    mcp: McpClient | None = None
    peers: dict[str, PeerWorker] = field(default_factory=dict)
    peer_image: str = ""
    owner_pids: set[int] = field(default_factory=lambda: {os.getpid()})
    pybox_container_ids: set[str] = field(default_factory=set)
    refill_timeouts: int = 0
    started_at: str = field(
        default_factory=lambda: datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    )


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


def _daemon_cpu_s(pids: Sequence[int], *, reaped: bool = False) -> float | None:
    """CPU of these processes; with `reaped`, plus their children they waited for."""
    if not pids:
        return None
    ticks = 0
    try:
        for pid in pids:
            # Fields after the ")" that closes comm: utime, stime, cutime and cstime
            # are the 12th to 15th.
            stat = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
            ticks += sum(int(value) for value in stat[11 : 15 if reaped else 13])
    except OSError:
        return None
    return ticks / os.sysconf("SC_CLK_TCK")


# Where the engine puts its containers' cgroups with the cgroupfs driver. CPU is
# charged to every ancestor as it is used, so the parent keeps the CPU of
# containers that are gone.
CONTAINERS_CPU_FILES = (
    ("/sys/fs/cgroup/cpuacct/docker/cpuacct.usage", None, 1e-9),  # cgroup v1, ns
    ("/sys/fs/cgroup/docker/cpu.stat", "usage_usec", 1e-6),  # cgroup v2
)


def containers_cpu_s() -> float | None:
    """All containers' CPU so far (the engine's parent cgroup), if this host shows it."""
    for path, key, scale in CONTAINERS_CPU_FILES:
        try:
            text = Path(path).read_text()
        except OSError:
            continue
        if key is None:
            return int(text.strip()) * scale
        for line in text.splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value) * scale
    return None


def busy_cpu_s(stat_line: str | None = None) -> float:
    """The machine's busy CPU time so far: every /proc/stat column but idle and iowait.

    guest and guest_nice are already inside user and nice, so they are not added.
    """
    if stat_line is None:
        with open("/proc/stat") as stat:
            stat_line = stat.readline()
    fields = [int(value) for value in stat_line.split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


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


# --- docker run ---------------------------------------------------------------


def docker_hardening(limits: Mapping[str, float]) -> list[str]:
    """`docker run` flags for pybox's posture (src/pybox/_core/posture.py) and these limits."""
    memory = int(limits["memory_bytes"])
    writable = int(limits["writable_bytes"])
    open_files = int(limits["open_files"])
    return [
        "--network", "none",
        "--read-only",
        "--cap-drop", "ALL",
        "--security-opt", "no-new-privileges",
        "--user", "1000:1000",
        "--memory", f"{memory}b",
        "--memory-swap", f"{memory}b",
        "--cpus", f"{limits['cpus']:g}",
        "--pids-limit", str(int(limits["pids"])),
        "--ulimit", f"nofile={open_files}:{open_files}",
        "--ulimit", "core=0:0",
        "--ipc", "private",
        "--log-driver", "none",
        "--tmpfs", f"/pybox:rw,nosuid,nodev,noexec,size={writable},uid=1000,gid=1000,mode=0755",
        "--tmpfs", f"/tmp:rw,nosuid,nodev,noexec,size={writable},mode=1777",
        "--shm-size", f"{writable}b",
        "--hostname", "pybox",
        # pybox asks for a private cgroup namespace; docker's default on a cgroup v1
        # host is the host's, so say it explicitly to keep the boxes equivalent.
        "--cgroupns", "private",
    ]  # fmt: skip


def docker_argv(image_id: str, limits: Mapping[str, float], token: str) -> list[str]:
    return [
        "docker", "run", "--rm", "-i",
        *docker_hardening(limits),
        "--label", f"{BENCH_LABEL}={token}",
        image_id,
        "/usr/bin/python3", "-c", CODE,
    ]  # fmt: skip


def check_stdout(path: str, stdout: str, detail: str = "") -> None:
    if stdout.rstrip("\n") != EXPECTED_STDOUT:
        raise BenchFailure(f"{path}: expected stdout {EXPECTED_STDOUT!r}, got {stdout!r} {detail}")


def call_docker(ctx: Context) -> Outcome:
    # stdin is /dev/null: `-i` still attaches it, as pybox attaches stdin, and the
    # program sees end-of-file at once.
    try:
        done = subprocess.run(
            docker_argv(ctx.image_id, ctx.limits, ctx.token),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=DOCKER_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise BenchFailure(f"docker: no result within {DOCKER_TIMEOUT_S:.0f} s") from exc
    check_stdout(PATH_DOCKER, done.stdout, f"(exit {done.returncode}, {done.stderr[-500:]!r})")
    return Outcome()


# --- pybox, through the Python API --------------------------------------------


def pybox_outcome(ctx: Context, path: str, result: RunResult) -> Outcome:
    receipt = result.receipt
    if result.status != "succeeded":
        raise BenchFailure(
            f"{path}: status {result.status}, stderr {result.stderr[-500:]!r}, "
            f"cause {receipt.cause.summary!r}"
        )
    check_stdout(path, result.stdout)
    timeline = receipt.observed_by_pybox
    container_id = receipt.observed_by_engine.container_id
    if container_id:
        ctx.pybox_container_ids.add(container_id)
    marks = {m: v for m in TIMELINE_MARKS if (v := getattr(timeline, m)) is not None}
    return Outcome(
        box_source=timeline.box_source,
        container_id=container_id,
        box_cpu_s=receipt.observed_by_kernel.cpu_usage_s,
        marks=marks,
    )


def call_cold(ctx: Context) -> Outcome:
    return pybox_outcome(ctx, PATH_COLD, run_container(CODE))


def call_warm(ctx: Context) -> Outcome:
    assert ctx.warm is not None
    return pybox_outcome(ctx, PATH_WARM, ctx.warm.run(CODE))


def refill_pool(ctx: Context) -> None:
    """The think-time between an agent's calls: wait until the pool is full again."""
    assert ctx.warm is not None
    if not ctx.warm.warm_up(wait_s=REFILL_WAIT_S):
        ctx.refill_timeouts += 1


# --- pybox, through `pybox mcp` -----------------------------------------------


def end_child(proc: subprocess.Popen[Any], wait_s: float = 30.0) -> int | None:
    """Close a child's input and let it finish; end it if it hangs. Its exit code,
    or None when it had to be ended."""
    with suppress(OSError):
        if proc.stdin is not None:
            proc.stdin.close()
    try:
        return proc.wait(timeout=wait_s)
    except subprocess.TimeoutExpired:
        proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    return None


class McpClient:
    """The client side of MCP's stdio transport: one JSON-RPC message per line."""

    def __init__(self, argv: Sequence[str], stderr: IO[bytes]) -> None:
        self._proc = subprocess.Popen(
            list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr
        )
        self.pid = self._proc.pid
        self._lines: queue.Queue[bytes] = queue.Queue()
        self._next_id = 0
        threading.Thread(target=self._read, name="mcp-reader", daemon=True).start()

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            self._lines.put(line)
        self._lines.put(b"")  # end of stream

    def _send(self, message: dict[str, Any]) -> None:
        assert self._proc.stdin is not None
        try:
            self._proc.stdin.write(json.dumps(message).encode() + b"\n")
            self._proc.stdin.flush()
        except OSError as exc:
            raise PathUnavailable(f"the MCP server closed its input ({exc})") from exc

    def request(self, method: str, params: dict[str, Any], timeout_s: float) -> Any:
        """Send a request and wait for its response; answer the server's own requests."""
        self._next_id += 1
        request_id = self._next_id
        self._send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                line = self._lines.get(timeout=max(deadline - time.monotonic(), 0.001))
            except queue.Empty:
                raise PathUnavailable(f"no answer to {method} within {timeout_s:.0f} s") from None
            if not line:
                code = self._proc.wait(timeout=5)
                raise PathUnavailable(f"the MCP server exited (code {code}) before answering")
            message = json.loads(line)
            if message.get("id") == request_id and "method" not in message:
                if "error" in message:
                    raise PathUnavailable(f"{method} failed: {message['error']}")
                return message.get("result")
            if "method" in message and "id" in message:  # a request from the server
                self._answer_server_request(message)
            # Notifications (logging, progress) are not needed here.

    def _answer_server_request(self, message: dict[str, Any]) -> None:
        if message["method"] == "ping":
            self._send({"jsonrpc": "2.0", "id": message["id"], "result": {}})
        else:
            self._send(
                {
                    "jsonrpc": "2.0",
                    "id": message["id"],
                    "error": {"code": -32601, "message": "not supported by the benchmark"},
                }
            )

    def initialize(self) -> dict[str, Any]:
        result = self.request(
            "initialize",
            {
                "protocolVersion": MCP_PROTOCOL_VERSION,
                "capabilities": {},
                "clientInfo": {"name": "pybox-bench", "version": pybox.__version__},
            },
            MCP_TIMEOUT_S,
        )
        self._send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return dict(result or {})

    def run_python(self, code: str) -> dict[str, Any]:
        result = self.request(
            "tools/call", {"name": "run_python", "arguments": {"code": code}}, MCP_TIMEOUT_S
        )
        return dict(result or {})

    def close(self) -> int | None:
        """Close its input (the stdio transport's shutdown); its exit code, if it exited."""
        return end_child(self._proc)


def _find_key(value: Any, key: str, depth: int = 3) -> Any:
    """`key` in a JSON object or one of its nested objects (breadth first)."""
    level = [value]
    for _ in range(depth):
        nested: list[Any] = []
        for item in level:
            if isinstance(item, dict):
                if key in item:
                    return item[key]
                nested.extend(v for v in item.values() if isinstance(v, dict))
        level = nested
    return None


def mcp_outcome(ctx: Context, result: Mapping[str, Any]) -> Outcome:
    """Check a `run_python` tool result and read what the receipt says, if it is there."""
    text = " ".join(
        str(part.get("text", "")) for part in result.get("content") or [] if isinstance(part, dict)
    )
    structured = result.get("structuredContent")
    if not isinstance(structured, dict):
        # The specification asks a tool with structured content to repeat it as
        # JSON text for older clients; accept that form too.
        with suppress(ValueError):
            structured = json.loads(text)
    if result.get("isError") or not isinstance(structured, dict):
        raise BenchFailure(f"{PATH_MCP}: tool error or no structuredContent: {text[:500]!r}")
    status = _find_key(structured, "status")
    if status not in (None, "succeeded"):
        raise BenchFailure(f"{PATH_MCP}: status {status!r}: {text[:500]!r}")
    check_stdout(PATH_MCP, str(_find_key(structured, "stdout") or ""), f"({text[:300]!r})")
    receipt = _find_key(structured, "receipt", depth=2)
    if not isinstance(receipt, dict):
        return Outcome()
    timeline = receipt.get("observed_by_pybox") or {}
    container_id = (receipt.get("observed_by_engine") or {}).get("container_id")
    if container_id:
        ctx.pybox_container_ids.add(container_id)
    return Outcome(
        box_source=timeline.get("box_source"),
        container_id=container_id,
        box_cpu_s=(receipt.get("observed_by_kernel") or {}).get("cpu_usage_s"),
        marks={m: float(timeline[m]) for m in TIMELINE_MARKS if timeline.get(m) is not None},
    )


def start_mcp(ctx: Context, stderr: IO[bytes]) -> McpClient:
    """A `pybox mcp` server of this environment's pybox, initialized; or why not."""
    client = McpClient([sys.executable, "-m", "pybox", "mcp"], stderr)
    try:
        client.initialize()
    except PathUnavailable:
        client.close()
        raise
    ctx.owner_pids.add(client.pid)
    return client


def call_mcp(ctx: Context) -> Outcome:
    assert ctx.mcp is not None
    try:
        return mcp_outcome(ctx, ctx.mcp.run_python(CODE))
    except PathUnavailable as exc:
        raise BenchFailure(f"{PATH_MCP}: {exc}") from exc


def think(ctx: Context) -> None:
    time.sleep(ctx.think_s)


# --- peers --------------------------------------------------------------------


class PeerWorker:
    """`bench/peer_worker.py` in a peer's throwaway environment: one call per request."""

    def __init__(self, python: Path, config: dict[str, Any], stderr: IO[bytes]) -> None:
        worker = Path(__file__).with_name("peer_worker.py")
        self._proc = subprocess.Popen(
            [str(python), str(worker), json.dumps(config)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
        self.name = str(config["peer"])
        try:
            self._expect_line()  # {"ready": true} once the library is loaded
        except BenchFailure as exc:
            end_child(self._proc)
            raise PathUnavailable(f"its worker did not start: {exc}") from exc

    def _expect_line(self) -> dict[str, Any]:
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline()
        if not line:
            raise BenchFailure(f"{self.name}: the worker exited (code {self._proc.wait()})")
        answer: dict[str, Any] = json.loads(line)
        if "error" in answer:
            raise BenchFailure(f"{self.name}: {answer['error']}")
        return answer

    def call(self) -> tuple[float, str]:
        assert self._proc.stdin is not None
        self._proc.stdin.write("run\n")
        self._proc.stdin.flush()
        answer = self._expect_line()
        return float(answer["wall_s"]), str(answer["stdout"])

    def close(self) -> None:
        end_child(self._proc)


def call_peer(ctx: Context, name: str) -> Outcome:
    wall_s, stdout = ctx.peers[name].call()
    check_stdout(name, stdout)
    return Outcome(inner_wall_s=wall_s)


def install_peer(name: str, root: Path) -> Path:
    """A throwaway virtual environment with the peer in it (the host's pip configuration)."""
    venv = root / name
    steps = [
        [sys.executable, "-m", "venv", str(venv)],
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", *PEER_PACKAGES[name]],
    ]
    for argv in steps:
        try:
            done = subprocess.run(
                argv, capture_output=True, text=True, timeout=PEER_SETUP_TIMEOUT_S, check=False
            )
        except subprocess.TimeoutExpired as exc:
            raise PathUnavailable(f"{argv[2]} took over {PEER_SETUP_TIMEOUT_S:.0f} s") from exc
        if done.returncode != 0:
            why = " ".join(done.stderr.split())[-500:]
            raise PathUnavailable(f"{' '.join(argv[2:])} failed: {why}")
    return venv / "bin" / "python"


def build_peer_image(image_id: str, token: str) -> str:
    """pybox's image plus a `python` command and a long-running CMD (for llm-sandbox).

    Built from the local image with no network; nothing is pulled. Labelled
    with the run's token so the cleanup removes it.
    """
    tag = f"pybox-bench-peer:{token}"
    dockerfile = (
        f"FROM {image_id}\n"
        "USER 0:0\n"
        'RUN ["/bin/ln", "-s", "python3", "/usr/bin/python"]\n'
        "USER 1000:1000\n"
        'CMD ["/bin/sleep", "infinity"]\n'
    )
    argv = ["docker", "build", "-q", "--network", "none", "--force-rm"]
    argv += ["--label", f"{BENCH_LABEL}={token}", "-t", tag, "-"]
    try:
        done = subprocess.run(
            argv,
            input=dockerfile,
            capture_output=True,
            text=True,
            timeout=PEER_SETUP_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise PathUnavailable(f"building its image took over {PEER_SETUP_TIMEOUT_S:.0f} s") from exc
    if done.returncode != 0:
        raise PathUnavailable(f"building its image failed: {' '.join(done.stderr.split())[-500:]}")
    return tag


def start_peers(
    ctx: Context, names: Sequence[str], root: Path, stderr: IO[bytes]
) -> dict[str, str]:
    """A worker per peer; the peers that could not be set up here, and why."""
    skipped: dict[str, str] = {}
    for name in names:
        try:
            if name == PEER_LLM_SANDBOX:
                ctx.peer_image = build_peer_image(ctx.image_id, ctx.token)
            python = install_peer(name, root)
            config = {
                "peer": name,
                "image": ctx.peer_image if name == PEER_LLM_SANDBOX else ctx.image_id,
                "label": BENCH_LABEL,
                "token": ctx.token,
                "code": CODE,
                "memory_mib": int(ctx.limits["memory_bytes"]) // (1024 * 1024),
                "pids": int(ctx.limits["pids"]),
            }
            ctx.peers[name] = PeerWorker(python, config, stderr)
        except PathUnavailable as exc:
            skipped[name] = str(exc)
    return skipped


# --- the paths ----------------------------------------------------------------


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
    sample, outcome = _measure(ctx, lambda: spec.call(ctx))
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


def _progress(label: str, done: int, total: int) -> None:
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
        _progress("latency round", index + 1, rounds)
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
        _progress("throughput level", index + 1, len(levels))
    return table


@dataclass(frozen=True)
class CpuCounters:
    """Cumulative CPU seconds, read at one moment."""

    machine_s: float
    client_s: float  # this process, its reaped children (docker CLI), the MCP server
    engine_s: float | None  # dockerd and containerd, with their reaped children
    boxes_s: float | None  # every container's cgroup

    @classmethod
    def read(cls, ctx: Context) -> CpuCounters:
        client = time.process_time() + _children_cpu_s()
        if ctx.mcp is not None:
            client += _daemon_cpu_s([ctx.mcp.pid]) or 0.0
        engine = _daemon_cpu_s(ctx.daemon_pids, reaped=True)
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
        _progress("cpu batch", done, len(order))
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


# --- statistics ---------------------------------------------------------------


def percentile(values: Sequence[float], pct: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    position = (len(ordered) - 1) * pct / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def wall_stats(walls_s: Sequence[float]) -> dict[str, float]:
    walls = [w * 1000 for w in walls_s]
    return {
        "n": len(walls),
        "p50_ms": percentile(walls, 50),
        "p95_ms": percentile(walls, 95),
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


# --- environment and cleanup --------------------------------------------------


def _docker_lines(*args: str) -> list[str]:
    done = subprocess.run(["docker", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise BenchFailure(f"docker {' '.join(args)} failed: {done.stderr.strip()}")
    return [line for line in done.stdout.splitlines() if line.strip()]


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
    managed = _docker_lines(
        "ps", "-a", "--no-trunc", "--filter", f"label={PYBOX_LABEL}",
        "--format", f'{{{{.ID}}}} {{{{.Label "{PYBOX_OWNER_LABEL}"}}}}',
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
        "bench_containers": _docker_lines("ps", "-aq", "--no-trunc", "--filter", label),
        "bench_images": _docker_lines("images", "-q", "--no-trunc", "--filter", label),
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
            ["docker", "rm", "-f", *found["bench_containers"]], capture_output=True, check=False
        )
    if found["bench_images"]:
        subprocess.run(["docker", "rmi", *found["bench_images"]], capture_output=True, check=False)
    problems = [f"{kind}: {', '.join(ids)}" for kind, ids in found.items() if ids]
    still = leftovers(ctx)
    if any(still[kind] for kind in ("bench_containers", "bench_images")):
        problems.append(f"could not remove: {still}")
    return problems


def machine_facts() -> dict[str, Any]:
    cpu_model = "unknown"
    with suppress(OSError), open("/proc/cpuinfo") as cpuinfo:
        for line in cpuinfo:
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    versions = _docker_lines("version", "--format", "{{.Server.Version}} {{.Server.APIVersion}}")
    engine, _, api = (versions[0] if versions else "unknown").partition(" ")
    return {
        "cpu_model": cpu_model,
        "cpu_count": os.cpu_count(),
        "kernel": platform.release(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "engine_version": engine,
        "engine_api": api,
        "pybox_version": pybox.__version__,
        "loadavg_at_start": Path("/proc/loadavg").read_text().split()[:3],
    }


# --- report -------------------------------------------------------------------


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


def _cell(value: float | None, spec: str = ".1f", suffix: str = "") -> str:
    return "n/a" if value is None else f"{value:{spec}}{suffix}"


def _cpu_cell(value: Mapping[str, float] | None) -> str:
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
            f"{_cell(rel['p50'], '.2f', 'x'):>9}{_cell(rel['p95'], '.2f', 'x'):>9}"
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
        cells = [_cpu_cell(cpu[kind]) for kind in ("client", "engine", "box")]
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
                f"{_cell(value, '.2f' if index == 2 else '.1f'):>8}"
                for index, value in enumerate(figures)
            )
            for figure in ("net_ms", "attributed_ms"):
                baseline = cpu.get(PATH_DOCKER, {}).get(figure)
                line += f"{_cell(ratio(row.get(figure), baseline), '.2f', 'x'):>9}"
            yield line
    if report["throughput"]:
        yield ""
        levels = [str(level) for level in CONCURRENCY_LEVELS]
        yield "throughput, runs/s at N concurrent callers"
        yield f"{'':<13}" + "".join(f"{'N=' + level:>10}" for level in levels)
        for path, row in report["throughput"].items():
            cells = [
                _cell(row[level]["runs_per_s"], ".2f") if level in row else "" for level in levels
            ]
            yield f"{path:<13}" + "".join(f"{cell:>10}" for cell in cells)
            sources = [row[level]["box_source"] for level in levels if level in row]
            if any(sources):
                hits = "/".join(str(s.get("warm_pool", 0)) for s in sources)
                yield f"{'':<13}hits per level: {hits}"
    yield ""
    yield "targets (informational)"
    for target in report["targets"]:
        yield f"  {target['verdict']:<5} {target['target']}  ({_cell(target['value'], '.2f', 'x')})"
    for path, timeline in report["pybox_timeline"].items():
        yield ""
        yield f"{path} timeline, p50 ms (receipt observed_by_pybox)"
        for name, value in timeline["marks_p50_ms"].items():
            yield f"  mark {name:<40}{value:>8.1f}"
        for name, value in timeline["steps_p50_ms"].items():
            yield f"  step {name:<40}{value:>8.1f}"


def _ms(value: float | None) -> str:
    return _cell(value, ".1f", " ms")


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
            f"| {path} | {row['n']} | {_ms(row['p50_ms'])} | {_ms(row['p95_ms'])} "
            f"| {_ms(row['min_ms'])} | {_ms(row['max_ms'])} | {_cell(rel['p50'], '.2f', 'x')} "
            f"| {_cell(rel['p95'], '.2f', 'x')} | {hits} |"
        )
    if report["throughput"]:
        levels = [str(level) for level in CONCURRENCY_LEVELS]
        yield ""
        yield "| runs/s | " + " | ".join(f"N={level}" for level in levels) + " |"
        yield "| --- |" + " ---: |" * len(levels)
        for path, row in report["throughput"].items():
            cells = [_cell(row[lv]["runs_per_s"], ".2f") if lv in row else "" for lv in levels]
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
            cells = [_ms(row.get(f"{name}_ms")) for name in names]
            cells.insert(2, _cell(row.get("background_cpus"), ".2f"))
            for figure in ("net_ms", "attributed_ms"):
                baseline = cpu.get(PATH_DOCKER, {}).get(figure)
                cells.append(_cell(ratio(row.get(figure), baseline), ".2f", "x"))
            yield f"| {path} | " + " | ".join(cells) + " |"
    yield ""
    yield "| target | measured | verdict |"
    yield "| --- | ---: | --- |"
    for target in report["targets"]:
        yield (
            f"| {target['target']} | {_cell(target['value'], '.2f', 'x')} | {target['verdict']} |"
        )
    for path, timeline in report["pybox_timeline"].items():
        yield ""
        yield f"| {path} step (receipt timeline) | p50 |"
        yield "| --- | ---: |"
        for name, value in timeline["steps_p50_ms"].items():
            yield f"| {name} | {_ms(value)} |"


# --- main ---------------------------------------------------------------------


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
    first = run_container(CODE)
    pybox_outcome(ctx, "set-up", first)
    ctx.image_id = first.receipt.configured.image.id
    ctx.limits = {key: float(value) for key, value in first.receipt.configured.limits.items()}
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
    ctx = Context(uuid.uuid4().hex[:12], _find_daemon_pids(), think_s=args.think_s)
    report: dict[str, Any] | None = None
    try:
        report = run_benchmark(args, ctx)
    except BenchFailure as exc:
        print(f"\ncompare: ABORTED: {exc}", file=sys.stderr)
    except pybox.PyboxError as exc:
        print(f"\ncompare: ABORTED: pybox: {exc}", file=sys.stderr)
    finally:  # an interrupt too: nothing the benchmark started may outlive it
        problems = clean_up(ctx)
        for problem in problems:
            print(f"compare: left behind: {problem}", file=sys.stderr)
    if report is None:
        return 1
    report["leftovers"] = problems
    print_report(report, args)
    if not args.json:
        print(
            f"\nleftover containers and images: {'none' if not problems else '; '.join(problems)}"
        )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
