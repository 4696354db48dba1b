"""The MCP tools: run_python, start_run, get_result (alias get_run), stop_run.

Arguments that do not fit a tool's input schema (wrong types, unknown keys, a
missing `code`) are JSON-RPC errors (`-32602`). A request the policy refuses
(a limit above its ceiling, an image that is not allowed, too many bytes) and
a program that fails are normal results with `isError: true`, so the model
reads the reason and can try again.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from pybox._core.capture import HeadTailCapture
from pybox._core.display import escape_lines, escape_text, neutralise_text, plural, quoted
from pybox._core.errors import ConfigError, ImageError, InvalidRequest, LimitExceeded, PyboxError
from pybox._core.images import check_image_name
from pybox._core.limits import (
    FIELDS_BY_KEY,
    KIB,
    LIMIT_FIELDS,
    LIMIT_SYNONYMS,
    MIB,
    LimitRequest,
    Limits,
    canonical_limit_keys,
    parse_user_value,
)
from pybox._core.posture import INPUT_DIR, OUTPUT_DIR, WORK_DIR
from pybox._core.receipt import Status
from pybox._core.request import MAX_INPUTS, InputFile, RunRequest
from pybox._frontends.mcp._protocol import INVALID_PARAMS, ArgumentError, JSONObject, RpcError
from pybox._frontends.mcp._runs import Run, RunRegistry
from pybox._orchestration.session import Session

PROGRESS_INTERVAL_S = 1.0
WAIT_SLICE_S = 0.05
MAX_GET_WAIT_S = 60.0
DEFAULT_REPLY_BYTES = 8 * 1024
DEFAULT_MAX_RUNNING = 4
DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024 * 1024

Progress = Callable[[float, float | None, str], None]


class Cancelled(Exception):
    """The request was cancelled by the client: no response is sent for it."""


@dataclass(frozen=True)
class ServerOptions:
    """What the operator chose for this server, beyond the limit policy."""

    images: tuple[str, ...] | None = None  # None: every image pybox has recorded
    reply_bytes: int = DEFAULT_REPLY_BYTES  # per stream, head and tail, in a tool result
    max_running: int = DEFAULT_MAX_RUNNING  # runs going at once
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES  # one JSON-RPC message, as received
    # The engine machine's memory (engine-observed at start); None: not known. A run
    # asking for more is refused, as one asking for more CPUs than the engine has.
    machine_memory_bytes: int | None = None


@dataclass
class CallContext:
    """What a running tool call may use: progress reporting and its cancellation."""

    cancel: threading.Event
    progress: Progress | None = None


def run_uri(run_id: str, part: str = "") -> str:
    return f"pybox://runs/{run_id}{'/' + part if part else ''}"


# -- argument checking --------------------------------------------------------------


def _bad(message: str) -> ArgumentError:
    return ArgumentError(message)


def _check_keys(where: str, value: JSONObject, allowed: tuple[str, ...]) -> None:
    unknown = sorted(set(value) - set(allowed))
    if unknown:
        raise _bad(
            f"{where}: unknown argument(s) {', '.join(map(repr, unknown))}. "
            f"Known: {', '.join(allowed)}."
        )


def _typed(where: str, name: str, value: Any, kind: type | tuple[type, ...], what: str) -> Any:
    if isinstance(value, bool) and kind is not bool:
        raise _bad(f"{where}: {name} must be {what}, not a boolean.")
    if not isinstance(value, kind):
        raise _bad(f"{where}: {name} must be {what}, not {type(value).__name__}.")
    return value


def _input_file(where: str, index: int, item: Any) -> InputFile:
    place = f"{where}: files[{index}]"
    _typed(place, "the entry", item, dict, "an object with name and content")
    _check_keys(place, item, ("name", "content", "encoding"))
    if "name" not in item or "content" not in item:
        raise _bad(f"{place} needs both name and content.")
    name = _typed(place, "name", item["name"], str, "a string")
    content = _typed(place, "content", item["content"], str, "a string")
    encoding = _typed(place, "encoding", item.get("encoding", "utf-8"), str, "a string")
    if encoding == "utf-8":
        return InputFile(name, content.encode("utf-8", "surrogatepass"))
    if encoding == "base64":
        try:
            return InputFile(name, base64.b64decode(content, validate=True))
        except (binascii.Error, ValueError) as exc:
            raise _bad(f"{place}: content is not valid base64 ({exc}).") from None
    raise _bad(f"{place}: encoding must be 'utf-8' or 'base64', not {encoding!r}.")


def _limit_request(where: str, raw: Any) -> LimitRequest:
    _typed(where, "limits", raw, dict, "an object")
    try:
        # Keys agents bring from other sandboxes: converted when their unit is exact,
        # refused with pybox's key named when it is not (see LIMIT_SYNONYMS).
        canonical = canonical_limit_keys(raw, f"{where}: limits")
    except InvalidRequest as exc:
        raise _bad(str(exc)) from None
    _check_keys(f"{where}: limits", canonical, tuple(f.key for f in LIMIT_FIELDS))
    values: dict[str, float | int] = {}
    for key, value in canonical.items():
        _typed(where, f"limits.{key}", value, (int, float), "a number")
        try:
            values[FIELDS_BY_KEY[key].attr] = parse_user_value(key, value, f"limits.{key}")
        except ConfigError as exc:
            # Below a minimum or not whole: the agent reads why and asks again.
            raise InvalidRequest(str(exc)) from None
    return LimitRequest(**values)  # type: ignore[arg-type]


MAX_ENV_VARS = 256
ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


def _env_argument(where: str, raw: Any) -> tuple[tuple[str, str], ...]:
    """`env` as NAME -> VALUE strings. The form is checked here, as the schema says;
    which names are refused (credentials) is the run request's check, so every front
    end refuses the same ones."""
    _typed(where, "env", raw, dict, "an object of NAME: VALUE strings")
    if len(raw) > MAX_ENV_VARS:
        raise _bad(f"{where}: env has {len(raw)} variables; the most is {MAX_ENV_VARS}.")
    pairs = []
    for name, value in raw.items():
        if not ENV_NAME_RE.fullmatch(name):
            raise _bad(
                f"{where}: env name {name!r} is not usable: use letters, digits and '_', "
                "not starting with a digit."
            )
        _typed(where, f"env[{name!r}]", value, str, "a string")
        if "\x00" in value:
            raise _bad(f"{where}: env[{name!r}] contains a NUL character.")
        pairs.append((name, value))
    return tuple(pairs)


RUN_ARGUMENTS = ("code", "files", "image", "limits", "env", "return_files")


def parse_run_arguments(tool: str, args: JSONObject) -> RunRequest:
    """A run request from tool arguments; ArgumentError for arguments that do not fit
    the input schema, InvalidRequest for values pybox refuses (reported as `isError`)."""
    _check_keys(tool, args, RUN_ARGUMENTS)
    if "code" not in args:
        raise _bad(f"{tool}: the argument 'code' (the Python program, as a string) is missing.")
    code = _typed(tool, "code", args["code"], str, "a string of Python source")
    files_raw = _typed(tool, "files", args.get("files", []), list, "an array")
    if len(files_raw) > MAX_INPUTS:
        raise _bad(f"{tool}: {len(files_raw)} files were given; the most is {MAX_INPUTS}.")
    files = tuple(_input_file(tool, i, item) for i, item in enumerate(files_raw))
    image = _typed(tool, "image", args.get("image", "stdlib"), str, "a string")
    return_files = _typed(tool, "return_files", args.get("return_files", False), bool, "a boolean")
    limits = _limit_request(tool, args.get("limits", {}))
    env = _env_argument(tool, args.get("env", {}))
    return RunRequest(
        code=code.encode("utf-8", "surrogatepass"),
        inputs=files,
        limits=limits,
        image=image,
        collect_outputs=return_files,
        env=env,
    )


def _run_id_argument(tool: str, args: JSONObject, extra: tuple[str, ...] = ()) -> str:
    _check_keys(tool, args, ("run_id", *extra))
    if "run_id" not in args:
        raise _bad(f"{tool}: the argument 'run_id' (from start_run) is missing.")
    return str(_typed(tool, "run_id", args["run_id"], str, "a string"))


# -- results ----------------------------------------------------------------------------


def text_result(text: str, *, is_error: bool) -> JSONObject:
    return {"content": [{"type": "text", "text": text}], "isError": is_error}


def _shorten(data: bytes, limit_bytes: int) -> tuple[str, bool]:
    capture = HeadTailCapture(limit_bytes)
    capture.feed(data)
    return capture.kept().decode("utf-8", "replace"), capture.truncated


def user_limits(limits: Limits) -> JSONObject:
    """The effective limits in the user units the tools take (`memory_mib`, ...)."""
    values: JSONObject = {}
    for f in LIMIT_FIELDS:
        value = f.to_user(getattr(limits, f.attr))
        values[f.key] = int(value) if f.integral and float(value).is_integer() else value
    return values


def _common_result(
    *, stdout: str, stderr: str, exit_code: int | None, status: Status | None
) -> JSONObject:
    """The fields other sandboxes' run results have (stdout, stderr, exit_code, success,
    timed_out), so an agent written for them reads pybox's result unchanged."""
    return {
        "stdout": stdout,
        "stderr": stderr,
        "exit_code": exit_code,
        "success": status is Status.SUCCEEDED,
        "timed_out": status is Status.TIMED_OUT,
    }


def run_structure(run: Run, reply_bytes: int) -> JSONObject:
    """The structured result of a run, running or finished (see RUN_OUTPUT_SCHEMA)."""
    data: JSONObject = {
        "run_id": run.run_id,
        "state": "running" if run.running else "finished",
        "status": "running",
        "elapsed_s": round(run.elapsed_s(), 3),
        "timeout_s": run.limits.timeout_s,
        "limits": user_limits(run.limits),
        "resource_uri": run_uri(run.run_id),
    }
    if run.running:
        return data
    if run.error is not None:
        data.update(
            status="error",
            error=str(run.error),
            **_common_result(stdout="", stderr="", exit_code=None, status=None),
        )
        return data
    outcome = run.outcome
    assert outcome is not None
    receipt = outcome.receipt
    stdout, stdout_short = _shorten(outcome.stdout, reply_bytes)
    stderr, stderr_short = _shorten(outcome.stderr, reply_bytes)
    program = receipt.reported_by_program
    data.update(
        status=receipt.status.value,
        **_common_result(
            stdout=stdout, stderr=stderr, exit_code=receipt.exit_code, status=receipt.status
        ),
        cause=receipt.cause.summary,
        stdout_shortened=stdout_short,
        stderr_shortened=stderr_short,
        stdout_bytes_total=program.stdout.bytes_total,
        stderr_bytes_total=program.stderr.bytes_total,
        stdout_uri=run_uri(run.run_id, "stdout"),
        stderr_uri=run_uri(run.run_id, "stderr"),
        files=[
            {
                "path": f.path,
                "size_bytes": f.size_bytes,
                "sha256": f.sha256,
                "uri": run_uri(run.run_id, f"files/{f.path}"),
            }
            for f in outcome.output_files
        ],
        box_removed=receipt.observed_by_engine.removal_confirmed,
        receipt=receipt.to_dict(),
    )
    return data


def run_text(run: Run, structure: JSONObject) -> str:
    """What the model reads: the outcome, what to do next, then the (shortened) output.

    Two parts, in this order. First pybox's own lines: the summary, the returned
    files and the links, every name in them escaped and quoted (see
    pybox._core.display). Then the program's output, untrusted, each stream in a
    section whose begin and end lines carry a tag derived from the output itself,
    which the program therefore cannot print: text inside a section that looks like
    pybox's is the program's, never pybox's.
    """
    if run.running:
        return (
            f"Run {run.run_id} is running ({structure['elapsed_s']:.1f} s so far; it is stopped "
            f"after {run.limits.timeout_s:g} s). Call get_result with run_id={run.run_id!r} "
            f"(and wait_s up to {MAX_GET_WAIT_S:g}) for the result, or stop_run to end it."
        )
    if run.error is not None:
        return f"Run {run.run_id} did not run: {escape_lines(str(run.error))}"
    assert run.outcome is not None
    receipt = run.outcome.receipt
    lines = [f"run_id {run.run_id} (its box and receipt use the id {receipt.run_id})"]
    lines.extend(receipt.summary_lines())
    for item in structure["files"]:
        lines.append(
            f"returned file {quoted(item['path'])} ({plural(item['size_bytes'], 'byte')}): "
            f"{escape_text(item['uri'])}"
        )
    lines.append(f"receipt: {structure['resource_uri']}")
    streams = [stream for stream in ("stdout", "stderr") if structure[stream]]
    if streams:
        tag = _section_tag(structure[stream] for stream in streams)
        lines.append(
            f"The program's output follows, untrusted: each stream between lines "
            f"'--- begin program <stream> (untrusted) {tag} ---' and "
            f"'--- end program <stream> {tag} ---'."
        )
    for stream in streams:
        note = ""
        if structure[f"{stream}_shortened"]:
            note = f", shortened; full output: {structure[f'{stream}_uri']}"
        lines.append(f"--- begin program {stream} (untrusted{note}) {tag} ---")
        lines.append(neutralise_text(structure[stream]).rstrip("\n"))
        lines.append(f"--- end program {stream} {tag} ---")
    return "\n".join(lines)


def _section_tag(texts: Iterable[str]) -> str:
    """A tag the program cannot print: a digest of the very output it would appear in."""
    digest = hashlib.sha256()
    for text in texts:
        digest.update(text.encode("utf-8", "surrogatepass") + b"\0")
    return digest.hexdigest()[:16]


def run_result(run: Run, reply_bytes: int, *, stop_asked: bool = False) -> JSONObject:
    """The tool result for a run. Anything but success is `isError`, except a run that
    `stop_run` stopped: stopping it is what was asked."""
    structure = run_structure(run, reply_bytes)
    status = run.outcome.receipt.status if run.outcome is not None else None
    stopped_as_asked = stop_asked and run.stop_requested and status is Status.STOPPED
    failed = run.error is not None or (
        status is not None and status is not Status.SUCCEEDED and not stopped_as_asked
    )
    result = text_result(run_text(run, structure), is_error=failed)
    result["structuredContent"] = structure
    return result


# -- schemas ----------------------------------------------------------------------------


def _limits_schema(defaults: Limits, ceilings: Limits) -> JSONObject:
    properties: JSONObject = {}
    for f in LIMIT_FIELDS:
        default = f.describe(getattr(defaults, f.attr))
        ceiling = f.describe(getattr(ceilings, f.attr))
        properties[f.key] = {
            "type": "integer" if f.integral else "number",
            "minimum": f.minimum,
            "description": f"{f.what} in {f.unit}: default {default}, at most {ceiling}",
        }
    for synonym in LIMIT_SYNONYMS:
        if synonym.divisor is None:
            continue  # refused keys are not offered; a call with one is told the right key
        target = FIELDS_BY_KEY[synonym.canonical]
        properties[synonym.key] = {
            "type": "integer" if synonym.divisor > 1 else "number",
            "description": f"{synonym.canonical} given in {synonym.note}; prefer "
            f"{synonym.canonical} ({target.unit})",
        }
    return {
        "type": "object",
        "additionalProperties": False,
        "properties": properties,
        "description": "Ask for less than the defaults, or more up to the ceilings. "
        "Asking above a ceiling is refused (never lowered silently).",
    }


def run_input_schema(defaults: Limits, ceilings: Limits, images: list[str]) -> JSONObject:
    return {
        "type": "object",
        "additionalProperties": False,
        "required": ["code"],
        "properties": {
            "code": {
                "type": "string",
                "description": f"The Python program (saved as {WORK_DIR}/main.py, run with "
                "the image's python3).",
            },
            "files": {
                "type": "array",
                "maxItems": MAX_INPUTS,
                "description": f"Files the program can read, read-only, in {INPUT_DIR} "
                "($PYBOX_INPUT_DIR).",
                "items": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["name", "content"],
                    "properties": {
                        "name": {"type": "string", "description": "a plain file name"},
                        "content": {"type": "string"},
                        "encoding": {"type": "string", "enum": ["utf-8", "base64"]},
                    },
                },
            },
            "image": {
                "type": "string",
                "description": f"The image to run in; one of: {', '.join(images) or 'none'}. "
                "Default stdlib.",
            },
            "limits": _limits_schema(defaults, ceilings),
            "env": {
                "type": "object",
                "maxProperties": MAX_ENV_VARS,
                "propertyNames": {"pattern": f"^{ENV_NAME_RE.pattern}$"},
                "additionalProperties": {"type": "string"},
                "description": "Environment variables for the program (NAME: VALUE). "
                "Names that look like credentials are refused: the box is for "
                "untrusted code.",
            },
            "return_files": {
                "type": "boolean",
                "description": f"Return the files the program leaves in {OUTPUT_DIR} "
                "($PYBOX_OUTPUT_DIR) as resources. Default false.",
            },
        },
    }


RUN_ID_SCHEMA: JSONObject = {
    "type": "string",
    "description": "The run_id that start_run (or run_python) returned.",
}

# Present in every finished run's result, as other sandboxes name them.
COMMON_RESULT_FIELDS = ("stdout", "stderr", "exit_code", "success", "timed_out")

RUN_OUTPUT_SCHEMA: JSONObject = {
    "type": "object",
    "required": ["run_id", "state", "status", "elapsed_s", "timeout_s", "limits", "resource_uri"],
    "if": {"properties": {"state": {"const": "finished"}}},
    "then": {"required": list(COMMON_RESULT_FIELDS)},
    "properties": {
        "run_id": {"type": "string"},
        "state": {"type": "string", "enum": ["running", "finished"]},
        "elapsed_s": {"type": "number"},
        "timeout_s": {"type": "number"},
        "limits": {
            "type": "object",
            "description": "the run's effective limits, in the units the tools take "
            "(timeout_s, memory_mib, cpus, ...)",
            "properties": {
                f.key: {"type": "integer" if f.integral else "number"} for f in LIMIT_FIELDS
            },
            "required": [f.key for f in LIMIT_FIELDS],
        },
        "resource_uri": {"type": "string", "description": "the run's receipt resource"},
        "status": {
            "type": "string",
            "enum": ["running"] + [s.value for s in Status] + ["error"],
            "description": "'running'; once finished the receipt's status; 'error' when "
            "pybox could not run the box",
        },
        "success": {
            "type": "boolean",
            "description": "true only when the program exited with code 0 (status succeeded)",
        },
        "timed_out": {
            "type": "boolean",
            "description": "true when the run hit its timeout (status timed_out)",
        },
        "exit_code": {"type": ["integer", "null"]},
        "cause": {"type": "string"},
        "error": {"type": "string"},
        "stdout": {"type": "string"},
        "stderr": {"type": "string"},
        "stdout_shortened": {"type": "boolean"},
        "stderr_shortened": {"type": "boolean"},
        "stdout_bytes_total": {"type": "integer"},
        "stderr_bytes_total": {"type": "integer"},
        "stdout_uri": {"type": "string"},
        "stderr_uri": {"type": "string"},
        "files": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["path", "size_bytes", "sha256", "uri"],
                "properties": {
                    "path": {"type": "string"},
                    "size_bytes": {"type": "integer"},
                    "sha256": {"type": "string"},
                    "uri": {"type": "string"},
                },
            },
        },
        "box_removed": {"type": "boolean"},
        "receipt": {
            "type": "object",
            "description": "the full receipt (receipt_version 1; see docs/receipt.md)",
            "required": ["receipt_version", "run_id", "status"],
        },
    },
}


def _result_tool(name: str, what: str) -> JSONObject:
    title = "Get a run's state or result"
    return {
        "name": name,
        "title": title if name == "get_result" else f"{title} (alias of get_result)",
        "description": what
        + f"wait_s (0 to {MAX_GET_WAIT_S:g}, default 0) waits for the end first. Changes "
        "nothing.",
        "inputSchema": {
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
            },
        },
        "outputSchema": RUN_OUTPUT_SCHEMA,
        "annotations": {
            "title": title,
            "readOnlyHint": True,
            "destructiveHint": False,
            "idempotentHint": True,
            "openWorldHint": False,
        },
    }


# -- the toolbox --------------------------------------------------------------------------


class Toolbox:
    """The tools of one server: their descriptions and their calls."""

    def __init__(self, session: Session, registry: RunRegistry, options: ServerOptions) -> None:
        self.session = session
        self.registry = registry
        self.options = options

    def allowed_images(self) -> list[str]:
        recorded = sorted(self.session.recorded_images())
        if self.options.images is None:
            return recorded
        return [name for name in self.options.images if name in recorded]

    def tools(self) -> list[JSONObject]:
        policy = self.session.policy
        d, c = policy.defaults, policy.ceilings
        images = self.allowed_images()
        run_schema = run_input_schema(d, c, images)
        limits_text = (
            f"Default limits: {d.timeout_s:g} s wall clock, {d.memory_bytes // MIB} MiB memory "
            f"(no swap), {d.cpus:g} CPU, {d.pids} processes, "
            f"{d.output_bytes // KIB} KiB output per stream. Ceilings: {c.timeout_s:g} s, "
            f"{c.memory_bytes // MIB} MiB, {c.cpus:g} CPUs; asking for more is refused."
        )
        box_text = (
            "Each run gets a fresh, sealed box: no network, no host files, read-only root, "
            "non-root user; it is removed afterwards and nothing persists between runs. "
            f"Images: {', '.join(images) or 'none recorded (run `pybox setup`)'}. "
        )
        reply_kib = self.options.reply_bytes / 1024
        return [
            {
                "name": "run_python",
                "title": "Run Python in a fresh sandbox",
                "description": (
                    "Run a Python program in a fresh sandbox box and wait for it to end. "
                    + box_text
                    + limits_text
                    + f" Returns stdout and stderr (each shortened to {reply_kib:g} KiB, "
                    "head and tail, with the full text in the run's resources) and the "
                    "receipt. A failing program is a result with isError true. For runs "
                    "longer than a minute use start_run and get_result."
                ),
                "inputSchema": run_schema,
                "outputSchema": RUN_OUTPUT_SCHEMA,
                "annotations": {
                    "title": "Run Python in a fresh sandbox",
                    "readOnlyHint": False,
                    "destructiveHint": False,
                    "idempotentHint": False,
                    "openWorldHint": False,
                },
            },
            {
                "name": "start_run",
                "title": "Start a long Python run",
                "description": (
                    "Start a Python program in a fresh sandbox box and return its run_id at "
                    "once, without waiting. " + box_text + limits_text + " Next: call get_result "
                    "with the run_id until state is 'finished', or stop_run to end it."
                ),
                "inputSchema": run_schema,
                "outputSchema": RUN_OUTPUT_SCHEMA,
                "annotations": {
                    "title": "Start a long Python run",
                    "readOnlyHint": False,
                    "destructiveHint": False,
                    "idempotentHint": False,
                    "openWorldHint": False,
                },
            },
            _result_tool(
                "get_result",
                "Return a run's state: status 'running', or its result (stdout, stderr, "
                "exit_code, success, timed_out, and the receipt) once it finished. ",
            ),
            _result_tool(
                "get_run",
                "The same as get_result (kept for clients written before get_result). ",
            ),
            {
                "name": "stop_run",
                "title": "Stop a run",
                "description": (
                    "Stop a run: its program is killed and its box removed; returns the "
                    "final result (status 'stopped', with the output so far). Safe to call "
                    "on a finished run: it returns the result unchanged."
                ),
                "inputSchema": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["run_id"],
                    "properties": {"run_id": RUN_ID_SCHEMA},
                },
                "outputSchema": RUN_OUTPUT_SCHEMA,
                "annotations": {
                    "title": "Stop a run",
                    "readOnlyHint": False,
                    "destructiveHint": True,
                    "idempotentHint": True,
                    "openWorldHint": False,
                },
            },
        ]

    def call(self, name: str, args: JSONObject, ctx: CallContext) -> JSONObject:
        if name == "run_python":
            return self._run_python(args, ctx)
        if name == "start_run":
            return self._start_run(args)
        if name in ("get_result", "get_run"):  # get_run: the name before get_result
            return self._get_result(name, args, ctx)
        if name == "stop_run":
            return self._stop_run(args)
        known = ", ".join(t["name"] for t in self.tools())
        raise RpcError(INVALID_PARAMS, f"Unknown tool {name!r}. Tools: {known}.")

    # -- the calls --

    def _admit(self, tool: str, args: JSONObject) -> tuple[RunRequest, Limits] | JSONObject:
        """The checked request and its limits, or an isError result saying why not."""
        try:
            request = parse_run_arguments(tool, args)
            allowed = self.allowed_images()
            check_image_name(request.image)
            if request.image not in allowed:
                raise ImageError(
                    f"The image {request.image!r} is not available here; use one of: "
                    f"{', '.join(allowed) or 'none (the operator must run `pybox setup`)'}."
                )
            limits = self.session.resolve(request)
            machine = self.options.machine_memory_bytes
            if machine is not None and limits.memory_bytes > machine:
                raise LimitExceeded(
                    f"Requested {limits.memory_bytes // MIB} MiB of memory; the engine's "
                    f"machine has only {machine // MIB} MiB (engine-observed). Ask for at "
                    f"most {machine // MIB} MiB."
                )
            self.session.image(request.image)
        except PyboxError as exc:
            return text_result(f"{tool} refused: {exc}", is_error=True)
        return request, limits

    def _run_python(self, args: JSONObject, ctx: CallContext) -> JSONObject:
        admitted = self._admit("run_python", args)
        if isinstance(admitted, dict):
            return admitted
        if ctx.cancel.is_set():
            raise Cancelled
        run = self._start(*admitted)
        if isinstance(run, dict):
            return run
        self._wait(run, ctx, run.limits.timeout_s, stop_on_cancel=True)
        return run_result(run, self.options.reply_bytes)

    def _start(self, request: RunRequest, limits: Limits) -> Run | JSONObject:
        try:
            return self.registry.start(request, limits, max_running=self.options.max_running)
        except LimitExceeded as exc:
            return text_result(f"The run was refused: {exc}", is_error=True)
        except PyboxError as exc:
            return text_result(f"The run was not started: {exc}", is_error=True)

    def _start_run(self, args: JSONObject) -> JSONObject:
        admitted = self._admit("start_run", args)
        if isinstance(admitted, dict):
            return admitted
        run = self._start(*admitted)
        if isinstance(run, dict):
            return run
        return run_result(run, self.options.reply_bytes)

    def _find(self, tool: str, run_id: str) -> Run | JSONObject:
        run = self.registry.get(run_id)
        if run is None:
            known = ", ".join(r.run_id for r in self.registry.recent()[:10]) or "none"
            return text_result(
                f"{tool}: no run {run_id!r} is known to this server (recent runs: {known}). "
                "Runs are kept while this server runs, the most recent ones only.",
                is_error=True,
            )
        return run

    def _get_result(self, tool: str, args: JSONObject, ctx: CallContext) -> JSONObject:
        run_id = _run_id_argument(tool, args, ("wait_s",))
        wait_s = _typed(tool, "wait_s", args.get("wait_s", 0), (int, float), "a number")
        if not 0 <= wait_s <= MAX_GET_WAIT_S:
            raise _bad(f"{tool}: wait_s must be between 0 and {MAX_GET_WAIT_S:g}, not {wait_s}.")
        found = self._find(tool, run_id)
        if isinstance(found, dict):
            return found
        if wait_s > 0:
            self._wait(found, ctx, found.limits.timeout_s, stop_on_cancel=False, budget_s=wait_s)
        return run_result(found, self.options.reply_bytes)

    def _stop_run(self, args: JSONObject) -> JSONObject:
        run_id = _run_id_argument("stop_run", args)
        found = self._find("stop_run", run_id)
        if isinstance(found, dict):
            return found
        if not self.registry.stop(found):
            return text_result(
                f"stop_run: run {run_id} was asked to stop but has not ended yet; call get_result "
                "to see when its box is gone.",
                is_error=True,
            )
        return run_result(found, self.options.reply_bytes, stop_asked=True)

    def _wait(
        self,
        run: Run,
        ctx: CallContext,
        total_s: float,
        *,
        stop_on_cancel: bool,
        budget_s: float | None = None,
    ) -> None:
        """Wait for the run, sending progress. On cancellation stop the run (run_python)
        or only stop waiting (get_result), then raise Cancelled."""
        deadline = None if budget_s is None else time.monotonic() + budget_s
        next_progress = 0.0
        last_progress = -1.0
        while True:
            now = time.monotonic()
            if ctx.progress is not None and now >= next_progress:
                elapsed = round(run.elapsed_s(), 1)
                if elapsed > last_progress:  # progress must grow with every notification
                    last_progress = elapsed
                    ctx.progress(
                        elapsed,
                        total_s,
                        f"run {run.run_id}: {elapsed:.0f} s of at most {total_s:g} s",
                    )
                next_progress = now + PROGRESS_INTERVAL_S
            if run.wait(WAIT_SLICE_S):
                return
            if ctx.cancel.is_set():
                if stop_on_cancel:
                    self.registry.stop(run)
                raise Cancelled
            if deadline is not None and time.monotonic() >= deadline:
                return
