"""Runs the MCP server started: each in its own thread, findable by id until evicted.

A tool call cannot stay open for an hour, so a run lives here and the agent
polls it (`get_result`) or stops it (`stop_run`). The server keeps the most recent
finished runs (and their returned files, in a private temporary directory)
for the resources `pybox://runs/{run_id}`; nothing outlives the server.

While a run runs, its output arrives in `Run.live` (at most the run's output
cap per stream), so `get_result` and progress notifications can show it; once
the run has finished its outcome holds the output and the live bytes are let go.

Kept files have a byte budget (`--keep-files-mib`): when a finished run takes
the total above it, the oldest runs' files are deleted from disk first, and a
read of one of them says so. A read sends at most `--max-read-mib` of a file.
"""

from __future__ import annotations

import argparse
import os
import shutil
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pybox._boxes.outputs import stage_private
from pybox._boxes.record import RunInterrupted, RunOutcome
from pybox._core.errors import ConfigError, LimitExceeded, PyboxError
from pybox._core.limits import MIB, Limits
from pybox._core.request import PreparedRun, RunRequest
from pybox._frontends.mcp._live import LiveOutput
from pybox._orchestration.session import Session

KEEP_FINISHED_RUNS = 50
DEFAULT_KEEP_FILES_BYTES = 1024 * MIB
DEFAULT_READ_MAX_BYTES = 16 * MIB
STOP_WAIT_S = 30.0


@dataclass
class Run:
    """One run and, once it ended, its outcome (or the error that stopped it).

    Its id is the prepared run's, so the registry, the resources, every tool
    result and the receipt name the run the same way."""

    prepared: PreparedRun
    files_dir: Path | None
    started_at: float = field(default_factory=time.monotonic)
    started_wall: float = field(default_factory=time.time)
    cancel: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)
    outcome: RunOutcome | None = None
    error: PyboxError | None = None
    stop_requested: bool = False
    files_bytes: int = 0  # on disk, once finished
    files_evicted: bool = False  # deleted to keep the server's files within budget
    live: LiveOutput = field(init=False)  # the output so far, while it runs

    def __post_init__(self) -> None:
        self.live = LiveOutput(self.prepared.limits.output_bytes)

    @property
    def run_id(self) -> str:
        return self.prepared.run_id

    @property
    def request(self) -> RunRequest:
        return self.prepared.request

    @property
    def limits(self) -> Limits:
        return self.prepared.limits

    @property
    def running(self) -> bool:
        return not self.done.is_set()

    def elapsed_s(self) -> float:
        return time.monotonic() - self.started_at

    def wait(self, timeout_s: float | None) -> bool:
        return self.done.wait(timeout_s)


class RunRegistry:
    """Starts runs through the session and keeps them for later reads."""

    def __init__(
        self,
        session: Session,
        keep_finished: int = KEEP_FINISHED_RUNS,
        *,
        keep_files_bytes: int = DEFAULT_KEEP_FILES_BYTES,
        read_max_bytes: int = DEFAULT_READ_MAX_BYTES,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self._session = session
        self._log = log
        self.keep_finished = keep_finished
        self.keep_files_bytes = keep_files_bytes
        self.read_max_bytes = read_max_bytes
        self._runs: OrderedDict[str, Run] = OrderedDict()
        self._lock = threading.Lock()
        self._files_root: Path | None = None
        self._closed = False

    def start(
        self,
        prepared: PreparedRun,
        on_done: Callable[[Run], None] | None = None,
        *,
        max_running: int | None = None,
    ) -> Run:
        """Start `prepared` (from `Session.prepare`) in a new thread, under its run id.

        The cap on runs at once is checked under the same lock that registers
        the run, so simultaneous calls cannot exceed it.
        """
        with self._lock:
            if self._closed:
                raise PyboxError("The MCP server is shutting down; no new run is started.")
            running = sum(1 for run in self._runs.values() if run.running)
            if max_running is not None and running >= max_running:
                raise LimitExceeded(
                    f"{running} runs are going; this server runs at most {max_running} at "
                    "once. Wait for one (get_result with wait_s) or stop one (stop_run), then "
                    "try again."
                )
            run_id = prepared.run_id
            if run_id in self._runs:
                raise PyboxError(f"Run {run_id} was started already; prepare a new run.")
            # The one staging helper every front end uses, keeping the files here.
            keep_under = self._files_root_dir() if prepared.request.collect_outputs else None
            staging = self._session.stage_outputs(prepared, keep_under=keep_under)
            run = Run(prepared, staging.files_dir if staging is not None else None)
            self._runs[run_id] = run
        thread = threading.Thread(
            target=self._execute, args=(run, on_done), name=f"pybox-mcp-run-{run_id}", daemon=True
        )
        thread.start()
        return run

    def _files_root_dir(self) -> Path:
        if self._files_root is None:
            # Named after this server: one killed with files kept is swept by the next.
            staged = stage_private()
            self._files_root = staged.staging
            for stale in staged.swept:
                if self._log is not None:
                    self._log(f"removed {stale}: returned files of a pybox that was killed")
        return self._files_root

    def _execute(self, run: Run, on_done: Callable[[Run], None] | None) -> None:
        try:
            run.outcome = self._session.run(
                run.prepared, files_dir=run.files_dir, cancel=run.cancel, on_event=run.live.on_event
            )
        except RunInterrupted as stop:
            run.outcome = stop.outcome
        except PyboxError as exc:
            run.error = exc
        except Exception as exc:  # a bug must still end the run visibly, never hang a poller
            run.error = PyboxError(f"internal error: {type(exc).__name__}: {exc}")
        finally:
            if run.files_dir is not None:
                if run.outcome is None:  # nothing can name them: never readable
                    shutil.rmtree(run.files_dir, ignore_errors=True)
                run.files_bytes = _disk_bytes(run.files_dir)
            # Within budget before anyone hears the run ended (and counts its files).
            self._evict_finished(run)
            run.done.set()
            # After `done`: a reader that finds the live bytes gone knows the outcome is there.
            run.live.release()
            if on_done is not None:
                on_done(run)

    def add_finished(self, run: Run) -> None:
        """Keep a run made elsewhere (a sandbox's), so its resources and get_result
        answer for it like for any other."""
        with self._lock:
            self._runs[run.run_id] = run
        self._evict_finished(run)

    def get(self, run_id: str) -> Run | None:
        with self._lock:
            return self._runs.get(run_id)

    def running_count(self) -> int:
        with self._lock:
            return sum(1 for run in self._runs.values() if run.running)

    def recent(self) -> list[Run]:
        with self._lock:
            return list(reversed(self._runs.values()))

    def stop(self, run: Run, wait_s: float = STOP_WAIT_S) -> bool:
        """Ask the run to stop; True once it ended (its box removed)."""
        if run.running:
            run.stop_requested = True
            run.cancel.set()
        return run.wait(wait_s)

    def _evict_finished(self, ending: Run) -> None:
        """Forget the oldest finished runs past the count, then delete the oldest
        runs' files until the kept files fit the byte budget."""
        doomed: list[Path] = []
        with self._lock:
            finished = [r for r in self._runs.values() if not r.running or r is ending]
            for run in finished[: max(len(finished) - self.keep_finished, 0)]:
                del self._runs[run.run_id]
                finished.remove(run)
                if run.files_dir is not None:
                    doomed.append(run.files_dir)
            kept = sum(run.files_bytes for run in finished)
            for run in finished:  # oldest first
                if kept <= self.keep_files_bytes:
                    break
                if run.files_dir is not None and not run.files_evicted:
                    run.files_evicted = True
                    kept -= run.files_bytes
                    run.files_bytes = 0
                    doomed.append(run.files_dir)
        for path in doomed:
            shutil.rmtree(path, ignore_errors=True)

    def kept_files_bytes(self) -> int:
        with self._lock:
            return sum(run.files_bytes for run in self._runs.values() if not run.running)

    def close(self, wait_s: float = STOP_WAIT_S) -> None:
        """Stop every run still going (their boxes are removed), then drop the files."""
        with self._lock:
            self._closed = True
            runs = list(self._runs.values())
        for run in runs:
            if run.running:
                run.cancel.set()
        deadline = time.monotonic() + wait_s
        for run in runs:
            run.wait(max(deadline - time.monotonic(), 0.0))
        if self._files_root is not None:
            shutil.rmtree(self._files_root, ignore_errors=True)


def _disk_bytes(path: Path) -> int:
    total = 0
    for root, _, names in os.walk(path):
        for name in names:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


def add_registry_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--keep-files-mib",
        type=int,
        default=DEFAULT_KEEP_FILES_BYTES // MIB,
        metavar="MIB",
        help="returned files the server keeps for reading, in MiB over all runs; the oldest "
        "runs' files are deleted first (default: %(default)s)",
    )
    parser.add_argument(
        "--max-read-mib",
        type=int,
        default=DEFAULT_READ_MAX_BYTES // MIB,
        metavar="MIB",
        help="largest file or output sent by one resources/read, in MiB (default: %(default)s)",
    )


def registry_from_args(
    session: Session, args: argparse.Namespace, log: Callable[[str], None] | None = None
) -> RunRegistry:
    if args.keep_files_mib < 0:
        raise ConfigError(f"--keep-files-mib must be 0 or more, not {args.keep_files_mib}.")
    if args.max_read_mib < 1:
        raise ConfigError(f"--max-read-mib must be at least 1, not {args.max_read_mib}.")
    return RunRegistry(
        session,
        keep_files_bytes=args.keep_files_mib * MIB,
        read_max_bytes=args.max_read_mib * MIB,
        log=log,
    )
