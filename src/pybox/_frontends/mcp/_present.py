"""How a run is presented: its tool result, its structured content and their schema.

Every run tool (run_python, start_run, get_result, stop_run) and the run's
resource answer with `run_structure`, which conforms to `RUN_OUTPUT_SCHEMA`;
the text content (`run_text`) keeps pybox's own lines apart from the program's
untrusted output, which it shows in fenced sections (`_sections`).
"""

from __future__ import annotations

from collections.abc import Mapping

from pybox._core.capture import HeadTailCapture
from pybox._core.display import escape_lines, escape_text, plural, quoted
from pybox._core.errors import Busy
from pybox._core.limits import LIMIT_FIELDS, Limits
from pybox._core.receipt import Status
from pybox._frontends.mcp._live import STREAMS, Page, Stream, kept_from
from pybox._frontends.mcp._protocol import JSONObject
from pybox._frontends.mcp._runs import Run
from pybox._frontends.mcp._sections import Section, fenced_sections, output_sections
from pybox._frontends.mcp._toolbox import text_result

MAX_GET_WAIT_S = 60.0

Offsets = Mapping[Stream, int]  # a byte position per stream


def run_uri(run_id: str, part: str = "") -> str:
    return f"pybox://runs/{run_id}{'/' + part if part else ''}"


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


def run_structure(run: Run, reply_bytes: int, offsets: Offsets | None = None) -> JSONObject:
    """The structured result of a run, running or finished (see RUN_OUTPUT_SCHEMA).

    A running run shows its output so far from `offsets` (byte positions per
    stream, 0 when not given), at most `reply_bytes` per stream. A finished run
    shows its output from `offsets` too when they are given, else all of it,
    shortened to head and tail."""
    data: JSONObject = {
        "run_id": run.run_id,
        "state": "running",
        "status": "running",
        "elapsed_s": round(run.elapsed_s(), 3),
        "timeout_s": run.limits.timeout_s,
        "limits": user_limits(run.limits),
        "resource_uri": run_uri(run.run_id),
    }
    if run.running:
        asked = offsets or {}
        pages = [run.live.page(stream, asked.get(stream, 0), reply_bytes) for stream in STREAMS]
        if all(page is not None for page in pages):
            for page in pages:
                assert page is not None
                data.update(_page_fields(page))
            return data
        # The run ended while we looked: its outcome is there now.
    data["state"] = "finished"
    if run.error is not None:
        data.update(
            status="error",
            error=str(run.error),
            **_common_result(stdout="", stderr="", exit_code=None, status=None),
        )
        if isinstance(run.error, Busy):  # refused before a box: the same call may work later
            data["retry_after_s"] = run.error.retry_after_s
        return data
    outcome = run.outcome
    assert outcome is not None
    receipt = outcome.receipt
    program = receipt.reported_by_program
    reports = {"stdout": program.stdout, "stderr": program.stderr}
    shown: dict[str, tuple[str, bool]] = {}
    for stream in STREAMS:
        kept: bytes = getattr(outcome, stream)
        total = reports[stream].bytes_total
        if offsets is not None:
            start, kept = kept_from(kept, total, run.limits.output_bytes, offsets.get(stream, 0))
            data[f"{stream}_offset"] = start
            data[f"{stream}_next_offset"] = total
            data[f"{stream}_more"] = False
        shown[stream] = _shorten(kept, reply_bytes)
    (stdout, stdout_short), (stderr, stderr_short) = shown["stdout"], shown["stderr"]
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


def _page_fields(page: Page) -> JSONObject:
    stream = page.stream
    return {
        stream: page.data.decode("utf-8", "replace"),
        f"{stream}_offset": page.offset,
        f"{stream}_next_offset": page.next_offset,
        f"{stream}_more": page.more,
        f"{stream}_bytes_so_far": page.buffered,
    }


def run_text(run: Run, structure: JSONObject) -> str:
    """What the model reads: the outcome, what to do next, then what the box said.

    Two parts, in this order. First pybox's own lines: the summary, counts and
    links, with no word that came from inside the box (where a message quotes the
    box, a pointer to a note stands in its place). Then everything the box said,
    untrusted, in sections whose begin and end lines carry a tag derived from all
    the texts shown, which the box therefore cannot print: the returned and skipped
    files' names (with sizes, reasons and URIs), the box's words quoted in the
    receipt (the notes), and the program's output, stream by stream. Text inside a
    section that looks like pybox's is the box's, never pybox's.
    """
    if structure["state"] == "running":
        return _running_text(run, structure)
    if run.error is not None:
        return f"Run {run.run_id} did not run: {escape_lines(str(run.error))}"
    assert run.outcome is not None
    receipt = run.outcome.receipt
    lines = [f"run_id {run.run_id}"]  # the receipt's and the resources' id too
    notes: list[str] = []
    lines.extend(receipt.summary_lines(notes))
    files = structure["files"]
    skipped = receipt.reported_by_program.output_files_skipped
    if files:
        lines.append(
            f"returned files: {plural(len(files), 'file')}; names, sizes and URIs in the "
            "box-reported files section below and in structuredContent.files"
        )
    lines.append(f"receipt: {structure['resource_uri']}")
    file_lines = [
        f"returned {quoted(item['path'])} ({plural(item['size_bytes'], 'byte')}): "
        f"{escape_text(item['uri'])}"
        for item in files
    ]
    file_lines.extend(
        f"skipped {quoted(item.path)}: {escape_text(item.reason)}" for item in skipped
    )
    sections = [
        Section("box-reported files", "\n".join(file_lines)),
        Section(
            "box-reported notes",
            # One line each, so no note can pass for the next.
            "\n".join(f"note {n}: {escape_text(note)}" for n, note in enumerate(notes, start=1)),
        ),
    ]
    for stream in STREAMS:
        tags = []
        if f"{stream}_offset" in structure:
            tags.append(f"from offset {structure[f'{stream}_offset']}")
        if structure[f"{stream}_shortened"]:
            tags.append(f"shortened; full output: {structure[f'{stream}_uri']}")
        sections.append(Section(f"program {stream}", structure[stream], tags))
    lines.extend(fenced_sections(sections))
    return "\n".join(lines)


def _running_text(run: Run, structure: JSONObject) -> str:
    """A running run: how far it is, its output so far (a page), how to read on."""
    so_far = ", ".join(f"{s} {structure[f'{s}_bytes_so_far']} B" for s in STREAMS)
    next_offsets = ", ".join(f"{s}_offset={structure[f'{s}_next_offset']}" for s in STREAMS)
    lines = [
        f"Run {run.run_id} is running ({structure['elapsed_s']:.1f} s so far; it is stopped "
        f"after {run.limits.timeout_s:g} s). Call get_result with run_id={run.run_id!r} "
        f"(and wait_s up to {MAX_GET_WAIT_S:g}) for the result, or stop_run to end it.",
        f"Output so far: {so_far}. For newer output call get_result with {next_offsets}"
        + (" (more is buffered: call again at once)." if _any_more(structure) else "."),
    ]
    cap = run.limits.output_bytes
    full = [s for s in STREAMS if structure[f"{s}_bytes_so_far"] >= cap]
    if full:
        lines.append(
            f"{' and '.join(full)} reached the output cap ({cap} bytes, limits.output_kib): "
            "nothing more of it is shown while the run runs; the result keeps its head and tail."
        )
    sections = [
        (
            s,
            structure[s],
            [
                f"offset {structure[f'{s}_offset']}, "
                f"{plural(structure[f'{s}_next_offset'] - structure[f'{s}_offset'], 'byte')}"
            ],
        )
        for s in STREAMS
    ]
    lines.extend(output_sections(sections))
    return "\n".join(lines)


def _any_more(structure: JSONObject) -> bool:
    return any(structure[f"{s}_more"] for s in STREAMS)


def run_result(
    run: Run, reply_bytes: int, *, stop_asked: bool = False, offsets: Offsets | None = None
) -> JSONObject:
    """The tool result for a run. Anything but success is `isError`, except a run that
    `stop_run` stopped: stopping it is what was asked."""
    structure = run_structure(run, reply_bytes, offsets)
    status = run.outcome.receipt.status if run.outcome is not None else None
    stopped_as_asked = stop_asked and run.stop_requested and status is Status.STOPPED
    failed = run.error is not None or (
        status is not None and status is not Status.SUCCEEDED and not stopped_as_asked
    )
    failed = failed and structure["state"] == "finished"
    result = text_result(run_text(run, structure), is_error=failed)
    result["structuredContent"] = structure
    return result


# Present in every finished run's result, as other sandboxes name them.
COMMON_RESULT_FIELDS = ("stdout", "stderr", "exit_code", "success", "timed_out")

# Where the output shown starts and how to read on (a running run; a finished one
# when get_result was given offsets).
PAGE_PROPERTIES: JSONObject = {
    "offset": {
        "type": "integer",
        "description": "the byte position in the stream where the text shown starts",
    },
    "next_offset": {
        "type": "integer",
        "description": "pass it back to get_result (stdout_offset / stderr_offset) for newer "
        "output only",
    },
    "more": {
        "type": "boolean",
        "description": "more output is buffered from next_offset on: call get_result again",
    },
    "bytes_so_far": {
        "type": "integer",
        "description": "bytes of the stream buffered while it runs (at most limits.output_kib)",
    },
}

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
        "retry_after_s": {
            "type": "number",
            "description": "with status 'error' when every box slot was taken: nothing ran; "
            "call again after this many seconds",
        },
        "stdout": {"type": "string"},
        "stderr": {"type": "string"},
        "stdout_shortened": {"type": "boolean"},
        "stderr_shortened": {"type": "boolean"},
        "stdout_bytes_total": {"type": "integer"},
        "stderr_bytes_total": {"type": "integer"},
        "stdout_uri": {"type": "string"},
        "stderr_uri": {"type": "string"},
        **{
            f"{stream}_{key}": schema
            for stream in STREAMS
            for key, schema in PAGE_PROPERTIES.items()
        },
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
            "description": "the full receipt (receipt_version 2; see docs/receipt.md)",
            "required": ["receipt_version", "run_id", "status"],
        },
    },
}
