"""An experiment's commands and test runs, as jobs (docs/experiments.md).

A job is one program in the experiment's sandbox: an argument list, never a
shell string. It runs in the caller's thread, or in the background in a thread
of this process (the MCP server, an API user) or of a detached `pybox
experiment` worker (the CLI). Whoever runs it holds a lock file for its life,
so a job whose runner died is found out (`lost`), never left running forever.
`cancel_job` is a flag in the store that the runner polls: it stops the
program (the sandbox's PID 1 kills its whole process tree) and the experiment
stays usable. Output kept in the store is bounded.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from pybox._core.errors import InvalidRequest, PyboxError
from pybox._core.limits import LimitRequest
from pybox._core.receipt import Status
from pybox._features.experiments.ledger import JobRecord
from pybox._features.experiments.states import ExperimentState
from pybox._features.experiments.testing.registry import RUNNERS, detect_runner, parse_output

if TYPE_CHECKING:
    from pybox._boxes.record import RunOutcome
    from pybox._features.experiments.service import Experiments

JOB_PREFIX = "job-"
KEPT_OUTPUT_BYTES = 64 * 1024  # per stream, in the store: head and tail
CANCEL_POLL_S = 0.2
CANCEL_WAIT_S = 30.0
# Commands in an experiment leave no bytecode caches in the copy: they would show
# as changes no one made.
COMMAND_ENV = (("PYTHONDONTWRITEBYTECODE", "1"),)

# Who a test summary comes from: pybox parsed it, but from what the project's own
# test command printed (run through pybox's isolated exec wrapper): untrusted.
TESTS_SOURCE = (
    "parsed by pybox from the test command's output; the project's code printed it (untrusted)"
)


class Jobs:
    def __init__(self, experiments: Experiments) -> None:
        self.experiments = experiments
        self.ledger = experiments.ledger
        self._threads: dict[str, threading.Thread] = {}

    # -- start ------------------------------------------------------------------------

    def start(
        self,
        experiment_id: object,
        argv: object,
        *,
        kind: str = "command",
        timeout_s: float | None = None,
        background: bool = False,
        on_started: Callable[[JobRecord], None] | None = None,
    ) -> JobRecord:
        """Run `argv` in the experiment; with `background`, return at once (the job
        running) and let get_job_status / get_job_result follow it. `on_started`
        hears of the job once it is recorded (a CLI worker tells its caller)."""
        from pybox._features.sandboxes.operations import check_argv

        command = check_argv(argv)
        if timeout_s is not None and (
            isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float) or timeout_s <= 0
        ):
            raise InvalidRequest(
                f"timeout must be a positive number of seconds, not {timeout_s!r}."
            )
        record = self.experiments.usable(experiment_id, "a command")
        job_id = JOB_PREFIX + secrets.token_hex(6)
        # The move is checked in one transaction: of two commands started at once,
        # one is refused (running -> running is not a transition).
        self.ledger.move(record.experiment_id, ExperimentState.RUNNING, f"{kind} {job_id}")
        job = JobRecord(
            job_id=job_id,
            experiment_id=record.experiment_id,
            kind=kind,
            state="running",
            started_at=time.time(),
            finished_at=None,
            cancel_requested=False,
            doc={"argv": list(command), "timeout_s": timeout_s, "runner_pid": os.getpid()},
        )
        self.ledger.add_job(job)
        lock = self._hold(job_id)
        if on_started is not None:
            on_started(job)
        if not background:
            return self._run(job, lock)
        thread = threading.Thread(
            target=self._run_quietly, args=(job, lock), name=f"pybox {job_id}", daemon=True
        )
        self._threads[job_id] = thread
        thread.start()
        return job

    def run_tests(
        self,
        experiment_id: object,
        argv: object = None,
        *,
        background: bool = False,
        on_started: Callable[[JobRecord], None] | None = None,
    ) -> JobRecord:
        """The project's tests: `argv`, or the runner detected from its files."""
        record = self.experiments.usable(experiment_id, "run_tests")
        if argv is None:
            from pybox._features.experiments.workspace import baseline_reader

            paths, read = baseline_reader(self.experiments, record.experiment_id)
            found = detect_runner(paths, read)
            if found is None:
                raise InvalidRequest(
                    f"No test runner was detected in {record.project} (looked for: "
                    f"{', '.join(r.name for r in RUNNERS)}). Pass the command as argv, "
                    'for example ["python3", "-m", "unittest", "discover", "-v"] or '
                    '["go", "test", "./..."].'
                )
            argv = list(found[1])
        return self.start(
            record.experiment_id, argv, kind="tests", background=background, on_started=on_started
        )

    # -- run --------------------------------------------------------------------------

    def _run_quietly(self, job: JobRecord, lock: int) -> None:
        # _run records every end in the job itself; a thread has no caller to tell.
        with contextlib.suppress(Exception):
            self._run(job, lock)

    def _run(self, job: JobRecord, lock: int) -> JobRecord:
        experiments = self.experiments
        record = experiments.ledger.get(job.experiment_id)
        assert record is not None and record.sandbox_id is not None
        started = time.monotonic()
        cancel = threading.Event()
        watching = threading.Event()
        watcher = threading.Thread(
            target=self._watch_cancel, args=(job.job_id, cancel, watching), daemon=True
        )
        watcher.start()
        outcome: RunOutcome | None = None
        error: str | None = None
        try:
            request = self._request(job, experiments.env_of(job.experiment_id))
            outcome = experiments.sandboxes.run(
                record.sandbox_id, request, kind=f"experiment.{job.kind}", cancel=cancel
            )
        except PyboxError as exc:
            error = str(exc)[:2000]
        except BaseException:
            error = "the job was interrupted"
            raise
        finally:
            watching.set()
            done = self._finish(job, outcome, error, cancel.is_set())
            os.close(lock)
            experiments.event(
                job.kind, record, job=done, status=done.state, started=started,
                exit_code=done.doc.get("exit_code"),
            )  # fmt: skip
        return done

    def _request(self, job: JobRecord, env: dict[str, str]) -> Any:
        from pybox._features.sandboxes.fileops import exec_request

        request = exec_request(tuple(job.doc["argv"]))
        request = replace(request, env=(*COMMAND_ENV, *sorted(env.items())))
        timeout_s = job.doc.get("timeout_s")
        if timeout_s is not None:
            request = replace(request, limits=LimitRequest(timeout_s=float(timeout_s)))
        return request

    def _finish(
        self, job: JobRecord, outcome: RunOutcome | None, error: str | None, cancelled: bool
    ) -> JobRecord:
        doc: dict[str, Any] = {}
        if outcome is None:
            state = "cancelled" if cancelled else "failed"
            doc["error"] = error or "the job ended without a result"
        else:
            receipt = outcome.receipt
            doc.update(
                run_id=receipt.run_id,
                status=receipt.status.value,
                exit_code=receipt.exit_code,
                duration_s=receipt.observed_by_pybox.run_duration_s,
                stdout=bounded_text(outcome.stdout),
                stderr=bounded_text(outcome.stderr),
                stdout_bytes=len(outcome.stdout),
                stderr_bytes=len(outcome.stderr),
            )
            if cancelled:
                state = "cancelled"
            elif receipt.status == Status.TIMED_OUT:
                state = "timed_out"
            elif receipt.status == Status.SUCCEEDED:
                state = "completed"
            else:
                state = "failed"
            if job.kind == "tests":
                summary = parse_output(
                    tuple(job.doc["argv"]),
                    outcome.stdout.decode("utf-8", "replace"),
                    outcome.stderr.decode("utf-8", "replace"),
                    receipt.exit_code,
                )
                doc["tests"] = summary.to_dict() | {"source": TESTS_SOURCE}
        done = self.ledger.finish_job(job.job_id, state, doc)
        experiment_state = {
            "completed": ExperimentState.COMPLETED,
            "timed_out": ExperimentState.TIMED_OUT,
            "cancelled": ExperimentState.CANCELLED,
        }.get(state, ExperimentState.FAILED)
        extra: dict[str, Any] = {"last_job": job.job_id}
        if "tests" in doc:
            extra["tests"] = doc["tests"] | {"job_id": job.job_id}
        self._move_after(job, experiment_state, f"{job.kind} {job.job_id} {state}", extra)
        return done

    def _move_after(
        self, job: JobRecord, state: ExperimentState, reason: str, doc: dict[str, Any]
    ) -> None:
        from pybox._core.errors import IllegalTransition

        try:
            self.ledger.move(job.experiment_id, state, reason, doc=doc)
        except IllegalTransition:
            pass  # destroyed meanwhile (destroy_experiment cancels first, then destroys)

    def _watch_cancel(self, job_id: str, cancel: threading.Event, done: threading.Event) -> None:
        while not done.wait(CANCEL_POLL_S):
            try:
                current = self.ledger.get_job(job_id)
            except PyboxError:
                continue
            if current is not None and current.cancel_requested:
                cancel.set()
                return

    # -- follow -----------------------------------------------------------------------

    def status(self, job_id: object) -> JobRecord:
        """The job as recorded; a running job whose runner is gone becomes `lost`."""
        job = self._get(job_id)
        if job.finished or self._runner_alive(job.job_id):
            return job
        lost = self.ledger.finish_job(
            job.job_id, "lost", {"error": "its runner ended without recording a result"}
        )
        self._move_after(
            job, ExperimentState.FAILED, f"{job.kind} {job.job_id} lost", {"last_job": job.job_id}
        )
        return lost

    def wait(self, job_id: object, timeout_s: float) -> JobRecord:
        deadline = time.monotonic() + timeout_s
        job = self.status(job_id)
        while not job.finished and time.monotonic() < deadline:
            time.sleep(CANCEL_POLL_S)
            job = self.status(job.job_id)
        return job

    def cancel(self, job_id: object) -> JobRecord:
        """Stop a running job and wait (a while) for it to end; an ended job is
        returned as it is."""
        job = self.status(job_id)
        if job.finished:
            return job
        self.ledger.request_cancel(job.job_id)
        return self.wait(job.job_id, CANCEL_WAIT_S)

    def running(self, experiment_id: str) -> JobRecord | None:
        for job in reversed(self.ledger.jobs(experiment_id)):
            if not job.finished:
                return self.status(job.job_id)
        return None

    def _get(self, job_id: object) -> JobRecord:
        if not isinstance(job_id, str) or not job_id.startswith(JOB_PREFIX):
            raise InvalidRequest(
                f"{str(job_id)[:80]!r} is not a job id; ids look like '{JOB_PREFIX}0123456789ab' "
                "(execute_experiment and run_tests return them)."
            )
        job = self.ledger.get_job(job_id)
        if job is None:
            from pybox._features.experiments.service import ExperimentNotFound

            raise ExperimentNotFound(f"There is no job {job_id!r}.")
        return job

    # -- the runner's lock ------------------------------------------------------------

    def _lock_path(self, job_id: str) -> str:
        folder = self.experiments.folder / "jobs"
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        return str(folder / f"{job_id}.lock")

    def _hold(self, job_id: str) -> int:
        fd = os.open(self._lock_path(job_id), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        return fd

    def _runner_alive(self, job_id: str) -> bool:
        fd = os.open(self._lock_path(job_id), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)
        return False


def bounded_text(data: bytes, keep: int = KEPT_OUTPUT_BYTES) -> str:
    """Output as text for the store: all of it, or its head and tail with a marker."""
    if len(data) <= keep:
        return data.decode("utf-8", "replace")
    half = keep // 2
    cut = len(data) - 2 * half
    return (
        data[:half].decode("utf-8", "replace")
        + f"\n[pybox: {cut} bytes cut here]\n"
        + data[-half:].decode("utf-8", "replace")
    )
