"""The benchmark's constants and values: what one call returned, one sample, the run's context.

Shared by every part of `bench/compare.py` (and by `bench/cli_startup.py` and
`bench/mcp_overhead.py`, which measure the same program).
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bench._mcp_client import McpClient
    from bench._peers import PeerWorker
    from pybox import Client


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


class BenchFailure(Exception):
    """A run did not print 42, or something was left behind: the numbers mean nothing."""


class PathUnavailable(Exception):
    """A path cannot be measured here (say why); the others still are."""


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
    engine: str = "docker"  # whose CLI lists and removes what the benchmark made
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


def check_stdout(path: str, stdout: str, detail: str = "") -> None:
    if stdout.rstrip("\n") != EXPECTED_STDOUT:
        raise BenchFailure(f"{path}: expected stdout {EXPECTED_STDOUT!r}, got {stdout!r} {detail}")
