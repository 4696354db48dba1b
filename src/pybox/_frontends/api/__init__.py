"""The Python API: `run_container()`, `stream_container()`, `repair()`, a reusable `Client`
and `Sandbox` (a sandbox that keeps its workspace between runs)."""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Unpack

from pybox._core.errors import InvalidRequest
from pybox._core.events import EventSink, OutputChunk, RunEvent
from pybox._core.limit_surfaces import limit_request_from_keywords
from pybox._core.repair import RepairBudget, RepairGoal, RepairModel, RepairReport
from pybox._core.request import PreparedRun, RunRequest
from pybox._features.repair.loop import RepairJob, RepairLoop
from pybox._frontends.api._experiment import Experiment, Job
from pybox._frontends.api._options import (
    EventCallback,
    GoalLike,
    InputLike,
    LimitOptions,
    ModelLike,
    OutputCallback,
    RepairOptions,
    RunOptions,
    StreamOptions,
    _env,
    _inputs,
    _limit_keywords,
)
from pybox._frontends.api._results import OutputFile, RunResult, _result
from pybox._frontends.api._sandbox import FileListing, Sandbox, SandboxFile, SandboxInfo
from pybox._orchestration.live import EventPump, EventStream
from pybox._orchestration.session import Session
from pybox._orchestration.staging import OutputStaging, check_destination

__all__ = [
    "Client",
    "EventCallback",
    "Experiment",
    "FileListing",
    "InputLike",
    "Job",
    "LimitOptions",
    "OutputCallback",
    "OutputFile",
    "RepairOptions",
    "RunOptions",
    "RunResult",
    "RunStream",
    "Sandbox",
    "SandboxFile",
    "SandboxInfo",
    "StreamOptions",
    "repair",
    "run_container",
    "stream_container",
]


class RunStream(EventStream[RunResult]):
    """A run's events as they happen (`Client.stream`), and its `RunResult` at the end.

    Iterate for `RunStarted`, `OutputChunk`, `FileReturned` and `RunEnded`; read
    `result` for the result (waits for the end); `close()` (or leaving a `with`
    block) stops a run that is still going and returns once its box is removed.
    """


@dataclass(frozen=True)
class _Job:
    """A run that was prepared, with its returned files' staging, not yet started."""

    prepared: PreparedRun
    staging: OutputStaging | None
    destination: Path | None


def _callbacks(
    on_output: OutputCallback | None, on_event: EventCallback | None
) -> EventSink | None:
    """One sink calling the caller's callbacks (None without any)."""
    if on_output is None and on_event is None:
        return None

    def sink(event: RunEvent) -> None:
        if on_output is not None and isinstance(event, OutputChunk):
            on_output(event.stream, event.data)
        if on_event is not None:
            on_event(event)

    return sink


class Client:
    """A long-lived handle on the engine; reuse it to run many boxes.

    With `warm_pool` (the default) the client keeps a few single-use boxes
    started and verified ahead of time for the kinds of run it has seen (the
    operator's `[pool]` settings), so later runs skip the box's start-up. Every
    run still gets a box nobody else used. `close()` (or leaving a `with`
    block, or the interpreter exiting) removes the waiting boxes.
    """

    def __init__(
        self,
        *,
        environ: Mapping[str, str] | None = None,
        config_path: str | None = None,
        warm_pool: bool = True,
    ) -> None:
        self._environ = os.environ if environ is None else environ
        self._session = Session.open(self._environ, config_path, warm_pool=warm_pool)
        self._finalizer = weakref.finalize(self, self._session.close)

    def close(self) -> None:
        """Remove the waiting boxes of the warm pool (confirmed against the engine)."""
        self._finalizer()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def warm_up(
        self,
        *,
        wait_s: float = 60.0,
        image: str = "stdlib",
        code_name: str = "main.py",
        **limits: Unpack[LimitOptions],
    ) -> bool:
        """Start warm boxes for runs with these settings (default: the default run).

        Waits up to `wait_s` until they are ready; True when they are. Runs with
        other limits, image or code name keep their own boxes once seen.
        """
        request = RunRequest(
            code=b"", code_name=code_name, image=image, limits=limit_request_from_keywords(limits)
        )
        return self._session.warm_up(request, wait_s=wait_s)

    @_limit_keywords
    def run(
        self,
        code: str | bytes,
        *,
        inputs: Iterable[InputLike] = (),
        argv: Sequence[str] = (),
        stdin: str | bytes | None = None,
        env: Mapping[str, str] | Iterable[tuple[str, str]] | None = None,
        collect_outputs: bool = False,
        output_dir: str | os.PathLike[str] | None = None,
        image: str = "stdlib",
        code_name: str = "main.py",
        cancel: threading.Event | None = None,
        on_output: OutputCallback | None = None,
        on_event: EventCallback | None = None,
        **limits: Unpack[LimitOptions],
    ) -> RunResult:
        """Run `code` in a fresh sealed box and return its output and receipt.

        Limits left as None take the operator's defaults; asking above a ceiling
        raises `LimitExceeded` before anything is created. With `collect_outputs`
        the files the program writes to `$PYBOX_OUTPUT_DIR` come back in
        `output_files`; with `output_dir` they are also written there, all at
        once (the directory must be new or empty).

        The program runs as `python3 <code_name> *argv`; `stdin` is what it reads
        on standard input (none: end-of-file at once); `env` adds environment
        variables (credential-shaped names need the operator's consent). Inputs
        sit next to the program: `open("data.csv")` and `import helper` work.

        While it runs, `on_output(stream, data)` gets each piece of output as it
        arrives (`stream` is "stdout" or "stderr"; `data` the program's bytes, untrusted)
        and `on_event(event)` every event (`RunStarted`, `OutputChunk`,
        `FileReturned`, `RunEnded`). Live output stops once a stream has
        delivered `output_bytes`; the result keeps the receipt's head and tail
        as always. Callbacks are called in order on a thread of pybox's, so a
        slow one never delays the box's deadline; `run` returns after the last
        one returned. A callback that raises is not called again: the run goes
        on to its end, its box is removed, and `run` raises that exception.
        """
        job = self._job(
            code,
            inputs=inputs,
            argv=argv,
            stdin=stdin,
            env=env,
            collect_outputs=collect_outputs,
            output_dir=output_dir,
            image=image,
            code_name=code_name,
            cancel=cancel,
            **limits,
        )
        sink = _callbacks(on_output, on_event)
        if sink is None:
            return self._finish(job, cancel, None)
        pump = EventPump(sink, name="pybox-callbacks")
        try:
            return self._finish(job, cancel, pump, pump)
        finally:
            pump.close()

    def stream(self, code: str | bytes, **options: Unpack[StreamOptions]) -> RunStream:
        """Start running `code` as `run` would, and iterate over its events as they happen.

        Options are `run`'s, but the callbacks. A request that is refused raises
        here, before anything is created. Iterating yields `RunStarted`, then
        `OutputChunk`s and `FileReturned`s as they come, then `RunEnded`, once the
        box is removed; `result` is the `RunResult` (it waits for the end).
        Leaving early stops the run and still removes its box: use a `with`
        block, or call `close()`; a `for` loop over a stream nobody else holds
        does it when left with `break`.

            with client.stream(code, timeout_s=60) as events:
                for event in events:
                    if isinstance(event, pybox.OutputChunk):
                        print(event.stream, event.data)
                result = events.result
        """
        return self._stream(self._job(code, **options), options.get("cancel"))

    def _stream(
        self, job: _Job, given: threading.Event | None, after: Callable[[], None] | None = None
    ) -> RunStream:
        def work(sink: EventSink, cancel: threading.Event) -> RunResult:
            try:
                return self._finish(job, cancel, sink)
            finally:
                if after is not None:
                    after()

        return RunStream(work, cancel=given, name=f"pybox-run-{job.prepared.run_id}")

    def _job(
        self,
        code: str | bytes,
        *,
        inputs: Iterable[InputLike] = (),
        argv: Sequence[str] = (),
        stdin: str | bytes | None = None,
        env: Mapping[str, str] | Iterable[tuple[str, str]] | None = None,
        collect_outputs: bool = False,
        output_dir: str | os.PathLike[str] | None = None,
        image: str = "stdlib",
        code_name: str = "main.py",
        cancel: threading.Event | None = None,
        **limits: Unpack[LimitOptions],
    ) -> _Job:
        """The run prepared and its files staged; a bad request is refused here."""
        if isinstance(code, str):
            code = code.encode("utf-8")
        if isinstance(stdin, str):
            stdin = stdin.encode("utf-8")
        if isinstance(argv, str):
            raise InvalidRequest("argv must be a sequence of strings, not one string.")
        request = RunRequest(
            code=code,
            code_name=code_name,
            inputs=_inputs(inputs),
            limits=limit_request_from_keywords(limits),
            image=image,
            collect_outputs=collect_outputs or output_dir is not None,
            argv=tuple(argv),
            env=_env(env),
            stdin_bytes=b"" if stdin is None else stdin,
        )
        destination = Path(output_dir) if output_dir is not None else None
        if destination is not None:
            check_destination(destination)  # bad input is named before the engine is asked
        session = self._session
        prepared = session.prepare(request)  # refused before anything is staged
        return _Job(prepared, session.stage_outputs(prepared, destination), destination)

    def _finish(
        self,
        job: _Job,
        cancel: threading.Event | None,
        on_event: EventSink | None,
        pump: EventPump | None = None,
    ) -> RunResult:
        """Run the prepared job; its returned files read, published or discarded."""
        staging = job.staging
        try:
            files_dir = staging.files_dir if staging is not None else None
            outcome = self._session.run(
                job.prepared, files_dir=files_dir, cancel=cancel, on_event=on_event
            )
            if pump is not None:
                pump.close()  # every callback has returned
                if pump.error is not None:
                    raise pump.error
            files: tuple[OutputFile, ...] = ()
            if staging is not None:
                files = tuple(
                    OutputFile(f.path, data, f.sha256)
                    for f, data in staging.read(outcome.output_files)
                )
        except BaseException:
            if staging is not None:
                staging.discard()
            raise
        if staging is not None and staging.destination is not None:
            staging.publish()
        elif staging is not None:
            staging.discard()
        swept = staging.swept if staging is not None else ()
        return _result(outcome, files, job.destination, swept)

    def repair(
        self,
        code: str | bytes,
        *,
        goal: GoalLike,
        model: ModelLike,
        budget: RepairBudget | None = None,
        code_name: str = "main.py",
        image: str = "stdlib",
        cancel: threading.Event | None = None,
        **run_limits: Unpack[LimitOptions],
    ) -> RepairReport:
        """Let `model` propose fixed versions of `code` until one meets `goal`.

        Every proposal runs in a fresh sealed box with the per-run limits given as
        keywords (`timeout_s`, `memory_bytes`, ... as for `run`);
        `budget` may only lower the operator's repair bounds (asking for more
        raises `LimitExceeded` before anything runs). `goal` is a `RepairGoal` or
        "exit0"; `model` a `RepairModel`, or a command line for a local command.
        The report's `fixed_code` holds the program that met the goal; nothing is
        written to disk.
        """
        if isinstance(code, str):
            code = code.encode("utf-8")
        limits = limit_request_from_keywords(run_limits)  # unknown keywords first
        job = RepairJob(
            code=code,
            goal=_goal(goal),
            model=model if isinstance(model, RepairModel) else RepairModel.command(model),
            code_name=code_name,
            budget=budget or RepairBudget(),
            run_limits=limits,
            image=image,
        )
        return RepairLoop(self._session, job, self._environ).run(cancel)


def _goal(goal: GoalLike) -> RepairGoal:
    if isinstance(goal, RepairGoal):
        return goal
    if goal == "exit0":
        return RepairGoal.exit0()
    raise InvalidRequest(
        f"goal must be a RepairGoal (exit0(), expect_stdout(text), tests(code)) or 'exit0', "
        f"not {goal!r}."
    )


def repair(
    code: str | bytes, *, goal: GoalLike, model: ModelLike, **options: Unpack[RepairOptions]
) -> RepairReport:
    """Repair `code` with a one-shot `Client` (no warm pool). See `Client.repair`."""
    with Client(warm_pool=False) as client:
        return client.repair(code, goal=goal, model=model, **options)


def run_container(code: str | bytes, **options: Unpack[RunOptions]) -> RunResult:
    """Run `code` once in a fresh sealed box. See `Client.run` for the options.

    A one-shot call: no warm pool. Reuse a `Client` to get one.
    """
    with Client(warm_pool=False) as client:
        return client.run(code, **options)


def stream_container(code: str | bytes, **options: Unpack[StreamOptions]) -> RunStream:
    """Run `code` once in a fresh sealed box and iterate over its events. See
    `Client.stream`; a one-shot call like `run_container` (no warm pool)."""
    client = Client(warm_pool=False)
    try:
        job = client._job(code, **options)
    except BaseException:
        client.close()
        raise
    return client._stream(job, options.get("cancel"), after=client.close)
