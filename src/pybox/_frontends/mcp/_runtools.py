"""The `runs` tool group: run_python, start_run, get_result (alias get_run), stop_run.

Arguments that do not fit a tool's input schema (wrong types, unknown keys, a
missing `code`) are argument errors (see `_schema`). A request the policy
refuses (a limit above its ceiling, an image that is not allowed, too many
bytes) and a program that fails are normal results with `isError: true`, so
the model reads the reason and can try again.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from pybox._core.errors import ImageError, LimitExceeded, PyboxError
from pybox._core.images import check_image_name
from pybox._core.limits import KIB, MIB
from pybox._core.request import PreparedRun
from pybox._frontends.mcp._live import STREAMS
from pybox._frontends.mcp._present import (
    MAX_GET_WAIT_S,
    RUN_OUTPUT_SCHEMA,
    Offsets,
    run_result,
)
from pybox._frontends.mcp._progress import OutputProgress
from pybox._frontends.mcp._protocol import JSONObject
from pybox._frontends.mcp._runargs import RUN_CHECKS, run_input_schema, run_request
from pybox._frontends.mcp._runs import Run
from pybox._frontends.mcp._toolbox import (
    CallContext,
    Cancelled,
    Handler,
    Hints,
    Tool,
    Toolbox,
    alias,
    text_result,
)

GROUP = "runs"
WAIT_SLICE_S = 0.05  # how often a waiting call looks for the end, a cancel and new output

RUN_ID_SCHEMA: JSONObject = {
    "type": "string",
    "description": "The run_id that start_run (or run_python) returned.",
}


# -- what the tools say ---------------------------------------------------------------


def _run_schema(toolbox: Toolbox) -> JSONObject:
    policy = toolbox.session.policy
    return run_input_schema(policy.defaults, policy.ceilings, toolbox.allowed_images())


def _about_runs(toolbox: Toolbox) -> str:
    """The box and the real limits of this server, for the descriptions."""
    policy = toolbox.session.policy
    d, c = policy.defaults, policy.ceilings
    images = toolbox.allowed_images()
    return (
        "Each run gets a fresh, sealed box: no network, no host files, read-only root, "
        "non-root user; it is removed afterwards and nothing persists between runs. "
        f"Images: {', '.join(images) or 'none recorded (run `pybox setup`)'}. "
        f"Default limits: {d.timeout_s:g} s wall clock, {d.memory_bytes // MIB} MiB memory "
        f"(no swap), {d.cpus:g} CPU, {d.pids} processes, "
        f"{d.output_bytes // KIB} KiB output per stream. Ceilings: {c.timeout_s:g} s, "
        f"{c.memory_bytes // MIB} MiB, {c.cpus:g} CPUs; asking for more is refused."
    )


def _run_python_text(toolbox: Toolbox) -> str:
    reply_kib = toolbox.options.reply_bytes / 1024
    return (
        "Run a Python program in a fresh sandbox box and wait for it to end. "
        + _about_runs(toolbox)
        + f" Returns stdout and stderr (each shortened to {reply_kib:g} KiB, "
        "head and tail, with the full text in the run's resources) and the "
        "receipt. A failing program is a result with isError true. For runs "
        "longer than a minute use start_run and get_result."
    )


def _start_run_text(toolbox: Toolbox) -> str:
    return (
        "Start a Python program in a fresh sandbox box and return its run_id at "
        "once, without waiting. " + _about_runs(toolbox) + " Next: call get_result "
        "with the run_id until state is 'finished' (while it runs it shows the output so far; "
        "pass stdout_next_offset and stderr_next_offset back as stdout_offset and "
        "stderr_offset for newer output only), or stop_run to end it."
    )


WAIT_TEXT = (
    f"wait_s (0 to {MAX_GET_WAIT_S:g}, default 0) waits for the end first. While the run "
    "runs, the result has its output so far from stdout_offset and stderr_offset (byte "
    "positions, default 0), a page per stream, with the next offsets to pass back for newer "
    "output only. Changes nothing."
)

RESULT_SCHEMA: JSONObject = {
    "type": "object",
    "additionalProperties": False,
    "required": ["run_id"],
    "properties": {
        "run_id": RUN_ID_SCHEMA,
        "wait_s": {
            "type": "number",
            "minimum": 0,
            "maximum": MAX_GET_WAIT_S,
            "description": "seconds to wait for the run to finish",
        },
        **{
            f"{stream}_offset": {
                "type": "integer",
                "minimum": 0,
                "description": f"show {stream} from this byte on (default 0): pass the "
                f"{stream}_next_offset of the last result to read only newer output",
            }
            for stream in STREAMS
        },
    },
}


# -- the calls --------------------------------------------------------------------------


def _admit(toolbox: Toolbox, tool: str, args: JSONObject) -> PreparedRun | JSONObject:
    """The run prepared once (limits resolved, image checked, its one run id), or an
    isError result saying why not: a limit above its ceiling is refused, never lowered."""
    try:
        request = run_request(tool, args)
        allowed = toolbox.allowed_images()
        check_image_name(request.image)
        if request.image not in allowed:
            raise ImageError(
                f"The image {request.image!r} is not available here; use one of: "
                f"{', '.join(allowed) or 'none (the operator must run `pybox setup`)'}."
            )
        prepared = toolbox.session.prepare(request)
        memory = prepared.limits.memory_bytes
        machine = toolbox.options.machine_memory_bytes
        if machine is not None and memory > machine:
            raise LimitExceeded(
                f"Requested {memory // MIB} MiB of memory; the engine's machine has only "
                f"{machine // MIB} MiB (engine-observed). Ask for at most {machine // MIB} MiB."
            )
    except PyboxError as exc:
        return text_result(f"{tool} refused: {exc}", is_error=True)
    return prepared


def _start(toolbox: Toolbox, prepared: PreparedRun) -> Run | JSONObject:
    try:
        return toolbox.registry.start(prepared, max_running=toolbox.options.max_running)
    except LimitExceeded as exc:
        return text_result(f"The run was refused: {exc}", is_error=True)
    except PyboxError as exc:
        return text_result(f"The run was not started: {exc}", is_error=True)


def run_python(toolbox: Toolbox, args: JSONObject, ctx: CallContext) -> JSONObject:
    admitted = _admit(toolbox, ctx.tool, args)
    if isinstance(admitted, dict):
        return admitted
    if ctx.cancel.is_set():
        raise Cancelled
    run = _start(toolbox, admitted)
    if isinstance(run, dict):
        return run
    _wait(toolbox, run, ctx, run.limits.timeout_s, stop_on_cancel=True)
    return run_result(run, toolbox.options.reply_bytes)


def start_run(toolbox: Toolbox, args: JSONObject, ctx: CallContext) -> JSONObject:
    admitted = _admit(toolbox, ctx.tool, args)
    if isinstance(admitted, dict):
        return admitted
    run = _start(toolbox, admitted)
    if isinstance(run, dict):
        return run
    return run_result(run, toolbox.options.reply_bytes)


def _find(toolbox: Toolbox, tool: str, run_id: str) -> Run | JSONObject:
    run = toolbox.registry.get(run_id)
    if run is None:
        known = ", ".join(r.run_id for r in toolbox.registry.recent()[:10]) or "none"
        return text_result(
            f"{tool}: no run {run_id!r} is known to this server (recent runs: {known}). "
            "Runs are kept while this server runs, the most recent ones only.",
            is_error=True,
        )
    return run


def get_result(toolbox: Toolbox, args: JSONObject, ctx: CallContext) -> JSONObject:
    found = _find(toolbox, ctx.tool, args["run_id"])
    if isinstance(found, dict):
        return found
    wait_s = args.get("wait_s", 0)
    offsets = _offsets(args)
    if wait_s > 0:
        _wait(
            toolbox,
            found,
            ctx,
            found.limits.timeout_s,
            stop_on_cancel=False,
            budget_s=wait_s,
            offsets=offsets,
        )
    return run_result(found, toolbox.options.reply_bytes, offsets=offsets)


def _offsets(args: JSONObject) -> Offsets | None:
    """The byte positions asked for, or None when none was (a finished run then shows
    all of its output, as before offsets existed)."""
    asked = {s: int(args[f"{s}_offset"]) for s in STREAMS if f"{s}_offset" in args}
    return asked or None


def stop_run(toolbox: Toolbox, args: JSONObject, ctx: CallContext) -> JSONObject:
    run_id = args["run_id"]
    found = _find(toolbox, ctx.tool, run_id)
    if isinstance(found, dict):
        return found
    if not toolbox.registry.stop(found):
        return text_result(
            f"{ctx.tool}: run {run_id} was asked to stop but has not ended yet; call get_result "
            "to see when its box is gone.",
            is_error=True,
        )
    return run_result(found, toolbox.options.reply_bytes, stop_asked=True)


def _wait(
    toolbox: Toolbox,
    run: Run,
    ctx: CallContext,
    total_s: float,
    *,
    stop_on_cancel: bool,
    budget_s: float | None = None,
    offsets: Offsets | None = None,
) -> None:
    """Wait for the run, sending progress with its output (from `offsets`) if asked.
    On cancellation stop the run (run_python) or only stop waiting (get_result), then
    raise Cancelled."""
    deadline = None if budget_s is None else time.monotonic() + budget_s
    reporter = None
    if ctx.progress is not None:
        reporter = OutputProgress(run, ctx.progress, total_s, offsets)
    while True:
        if reporter is not None:
            reporter.tick()
        if run.wait(WAIT_SLICE_S):
            return
        if ctx.cancel.is_set():
            if stop_on_cancel:
                toolbox.registry.stop(run)
            raise Cancelled
        if deadline is not None and time.monotonic() >= deadline:
            return


# -- the declarations ---------------------------------------------------------------------


def _run_tool(
    name: str, title: str, description: Callable[[Toolbox], str], handler: Handler
) -> Tool:
    """run_python and start_run: the same arguments, checks and result."""
    return Tool(
        name=name,
        group=GROUP,
        title=title,
        description=description,
        input_schema=_run_schema,
        checks=RUN_CHECKS,
        handler=handler,
        output_schema=RUN_OUTPUT_SCHEMA,
        hints=Hints(read_only=False, destructive=False, idempotent=False),
    )


RUN_PYTHON = _run_tool("run_python", "Run Python in a fresh sandbox", _run_python_text, run_python)
START_RUN = _run_tool("start_run", "Start a long Python run", _start_run_text, start_run)
GET_RESULT = Tool(
    name="get_result",
    group=GROUP,
    title="Get a run's state or result",
    description="Return a run's state: status 'running' with its output so far, or its "
    "result (stdout, stderr, exit_code, success, timed_out, and the receipt) once it "
    "finished. " + WAIT_TEXT,
    input_schema=RESULT_SCHEMA,
    handler=get_result,
    output_schema=RUN_OUTPUT_SCHEMA,
    hints=Hints(read_only=True, destructive=False, idempotent=True),
)
GET_RUN = alias(
    GET_RESULT,
    "get_run",
    "The same as get_result (kept for clients written before get_result). " + WAIT_TEXT,
)
STOP_RUN = Tool(
    name="stop_run",
    group=GROUP,
    title="Stop a run",
    description="Stop a run: its program is killed and its box removed; returns the final "
    "result (status 'stopped', with the output so far). Safe to call on a finished run: "
    "it returns the result unchanged.",
    input_schema={
        "type": "object",
        "additionalProperties": False,
        "required": ["run_id"],
        "properties": {"run_id": RUN_ID_SCHEMA},
    },
    handler=stop_run,
    output_schema=RUN_OUTPUT_SCHEMA,
    hints=Hints(read_only=False, destructive=True, idempotent=True),
)

RUN_TOOLS: tuple[Tool, ...] = (RUN_PYTHON, START_RUN, GET_RESULT, GET_RUN, STOP_RUN)
