"""The Python API: `run_container()`, `repair()` and a reusable `Client`."""

from __future__ import annotations

import inspect
import os
import threading
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict, TypeVar, Unpack

from pybox._boxes.record import RunOutcome
from pybox._core.errors import InvalidRequest
from pybox._core.limit_surfaces import api_limits_doc, limit_request_from_keywords
from pybox._core.limits import LIMIT_FIELDS
from pybox._core.receipt import Receipt
from pybox._core.repair import RepairBudget, RepairGoal, RepairModel, RepairReport
from pybox._core.request import InputFile, RunRequest
from pybox._features.repair.loop import RepairJob, RepairLoop
from pybox._orchestration.session import Session

InputLike = InputFile | tuple[str, bytes]
_F = TypeVar("_F", bound=Callable[..., object])
GoalLike = RepairGoal | str
ModelLike = RepairModel | str | Sequence[str]


class LimitOptions(TypedDict, total=False):
    """The per-run box limits, in base units (None: the operator's default).

    Written out for type checkers; `LIMIT_FIELDS` is the table it must match (a
    unit test says so), and the table is what parses them at run time.
    """

    timeout_s: float | None
    memory_bytes: int | None
    cpus: float | None
    pids: int | None
    open_files: int | None
    writable_bytes: int | None
    output_bytes: int | None
    output_files: int | None
    output_files_bytes: int | None
    input_bytes: int | None


class RunOptions(LimitOptions, total=False):
    """The keyword arguments of `Client.run` and `run_container`."""

    inputs: Iterable[InputLike]
    argv: Sequence[str]
    stdin: str | bytes | None
    env: Mapping[str, str] | Iterable[tuple[str, str]] | None
    collect_outputs: bool
    output_dir: str | os.PathLike[str] | None
    image: str
    code_name: str
    cancel: threading.Event | None


class RepairOptions(LimitOptions, total=False):
    """The optional keyword arguments of `Client.repair` and `repair`."""

    budget: RepairBudget | None
    code_name: str
    image: str
    cancel: threading.Event | None


def _limit_keywords(func: _F) -> _F:
    """Show `**limits` as the table's ten keyword-only parameters, first among the
    keywords (help(), IDEs; as in `RunOptions`), and list them with their units in
    the docstring. `Client.run` used to spell the ten out by hand."""
    signature = inspect.signature(func)
    params = [p for p in signature.parameters.values() if p.kind is not p.VAR_KEYWORD]
    at = next((i for i, p in enumerate(params) if p.kind is p.KEYWORD_ONLY), len(params))
    limits = [
        inspect.Parameter(
            f.attr,
            inspect.Parameter.KEYWORD_ONLY,
            default=None,
            annotation=f"{'int' if f.integral else 'float'} | None",
        )
        for f in LIMIT_FIELDS
    ]
    func.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[*params[:at], *limits, *params[at:]]
    )
    func.__doc__ = (
        f"{(func.__doc__ or '').rstrip()}\n\n"
        "        Per-run limits (keywords; None or left out: the operator's default):\n\n"
        f"{api_limits_doc(indent='        ')}\n"
    )
    return func


@dataclass(frozen=True)
class OutputFile:
    """A file the program left in its output folder."""

    path: str
    data: bytes
    sha256: str


@dataclass(frozen=True)
class RunResult:
    """What a run produced. A failing program is a result, not an exception."""

    status: str
    exit_code: int | None
    stdout: str
    stderr: str
    stdout_bytes: bytes
    stderr_bytes: bytes
    receipt: Receipt
    output_files: tuple[OutputFile, ...] = ()
    output_dir: Path | None = None
    # Staging folders of killed pybox processes removed beside `output_dir`.
    stale_staging_removed: tuple[Path, ...] = ()

    @property
    def ok(self) -> bool:
        return self.status == "succeeded"


def _inputs(inputs: Iterable[InputLike]) -> tuple[InputFile, ...]:
    converted: list[InputFile] = []
    for item in inputs:
        if isinstance(item, InputFile):
            converted.append(item)
        elif isinstance(item, tuple) and len(item) == 2:
            name, data = item
            if isinstance(data, str):
                data = data.encode("utf-8")
            converted.append(InputFile(name, data))
        else:
            raise InvalidRequest(
                f"Each input must be a (name, bytes) pair or an InputFile, not {item!r}."
            )
    return tuple(converted)


def _env(env: Mapping[str, str] | Iterable[tuple[str, str]] | None) -> tuple[tuple[str, str], ...]:
    if env is None:
        return ()
    pairs = env.items() if isinstance(env, Mapping) else env
    converted: list[tuple[str, str]] = []
    for pair in pairs:
        if not (isinstance(pair, tuple | list) and len(pair) == 2):
            raise InvalidRequest(f"env must be a mapping or (name, value) pairs, not {pair!r}.")
        converted.append((pair[0], pair[1]))
    return tuple(converted)


def _result(
    outcome: RunOutcome,
    files: tuple[OutputFile, ...],
    output_dir: Path | None,
    swept: tuple[Path, ...] = (),
) -> RunResult:
    receipt = outcome.receipt
    return RunResult(
        status=receipt.status.value,
        exit_code=receipt.exit_code,
        stdout=outcome.stdout.decode("utf-8", "replace"),
        stderr=outcome.stderr.decode("utf-8", "replace"),
        stdout_bytes=outcome.stdout,
        stderr_bytes=outcome.stderr,
        receipt=receipt,
        output_files=files,
        output_dir=output_dir,
        stale_staging_removed=swept,
    )


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
        """
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
        session = self._session
        prepared = session.prepare(request)  # refused before the file system is touched
        destination = Path(output_dir) if output_dir is not None else None
        staging = session.stage_outputs(prepared, destination)
        swept = staging.swept if staging is not None else ()
        try:
            files_dir = staging.files_dir if staging is not None else None
            outcome = session.run(prepared, files_dir=files_dir, cancel=cancel)
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
        return _result(outcome, files, destination, swept)

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
