"""The `sandboxes` tool group: sandboxes that keep their files and packages
between runs (the names agents know from Hyperbox).

create_sandbox, run, exec, read_sandbox_file, write_sandbox_file,
list_sandbox_files, destroy_sandbox, list_sandboxes. Every run is a fresh
process under the same seal as a one-shot box, with its own receipt; a failing
program is a result with isError true. Everything the box said (output, file
contents, listed names) is shown only inside fenced, untrusted sections.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from pybox._core.boxquote import BoxQuote
from pybox._core.egress import MODES as EGRESS_MODES
from pybox._core.errors import InvalidRequest, PyboxError, RequestRejected
from pybox._core.limits import LimitRequest
from pybox._core.receipt import LibraryFact
from pybox._core.request import PreparedRun, RunRequest
from pybox._features.sandboxes.records import RUN_PROGRAM, SandboxInfo, persists
from pybox._frontends.mcp._present import (
    RUN_OUTPUT_SCHEMA,
    Section,
    fenced_sections,
    run_result,
    user_limits,
)
from pybox._frontends.mcp._protocol import ArgumentError, JSONObject
from pybox._frontends.mcp._runargs import limit_request
from pybox._frontends.mcp._runs import Run
from pybox._frontends.mcp._toolbox import (
    CallContext,
    Handler,
    Hints,
    Tool,
    Toolbox,
    text_result,
)

GROUP = "sandboxes"
MAX_LIBRARIES = 32
MAX_TIMEOUT_S = 86400

SANDBOX_ID: JSONObject = {
    "type": "string",
    "description": "The sandbox_id create_sandbox returned.",
}
EXPERIMENT_ID: JSONObject = {
    "type": "string",
    "description": "The experiment_id create_experiment returned (instead of sandbox_id).",
}
PATH: JSONObject = {
    "type": "string",
    "description": "A path inside the sandbox's workspace (/pybox/work), relative to it or "
    "absolute under it. '..' and links are refused.",
}
LIBRARIES: JSONObject = {
    "type": "array",
    "maxItems": MAX_LIBRARIES,
    "items": {"type": "string"},
    "description": "Packages to install from the operator's package index: names and version "
    "specifiers only (for example 'requests' or 'attrs>=23'); no URLs, paths or options. They "
    "are installed by a separate box; the sandbox itself never gets a network.",
}


def egress_schema(toolbox: Toolbox) -> JSONObject:
    """The `egress` argument: every mode, and the ones the operator allows, in words
    (a mode beyond them is refused by name, never narrowed)."""
    allowed = [mode for mode in EGRESS_MODES if mode == "none" or mode in toolbox.egress_modes()]
    return {
        "type": "string",
        "enum": list(EGRESS_MODES),
        "description": "What the box may reach: 'none' (nothing; the default), 'packages' "
        "(only the operator's package registries, through pybox's allowlisting proxy: pip "
        "and npm work, nothing else does), 'open' (general egress). This server allows: "
        f"{', '.join(allowed)}.",
    }


TIMEOUT: JSONObject = {
    "type": "number",
    "minimum": 0.001,
    "maximum": MAX_TIMEOUT_S,
    "description": "Seconds this run may take (at most the sandbox's own timeout limit).",
}


def _sandbox_dict(info: SandboxInfo) -> JSONObject:
    described = info.to_dict()
    described["limits"] = user_limits(info.limits)
    described["persists"] = persists()
    return described


def _info_result(info: SandboxInfo, text: str) -> JSONObject:
    result = text_result(text + "\n" + json.dumps(_sandbox_dict(info), indent=2), is_error=False)
    result["structuredContent"] = _sandbox_dict(info)
    return result


def _outcome_result(
    toolbox: Toolbox,
    sandbox_id: str,
    request: RunRequest,
    outcome: object,
    extra: JSONObject | None = None,
) -> JSONObject:
    from pybox._boxes.record import RunOutcome

    assert isinstance(outcome, RunOutcome)
    sandboxes = toolbox.session.sandboxes()
    info = sandboxes.get(sandbox_id)
    image = toolbox.session.verified_image(info.image)
    run = Run(PreparedRun(request, info.limits, image, outcome.receipt.run_id), None)
    run.outcome = outcome
    run.done.set()
    run.live.release()
    toolbox.registry.add_finished(run)
    result = run_result(run, toolbox.options.reply_bytes)
    structure = result["structuredContent"]
    structure["sandbox_id"] = sandbox_id
    if extra:
        structure.update(extra)
    return result


# -- handlers -----------------------------------------------------------------------


def guarded(handler: Handler) -> Handler:
    """A refused or failed operation is an isError result the agent reads, never a
    protocol error. Words from inside the box (pip's, for one) stay in a fenced
    section; the rest of the message is pybox's."""

    def guarded(toolbox: Toolbox, args: JSONObject, ctx: CallContext) -> JSONObject:
        try:
            return handler(toolbox, args, ctx)
        except PyboxError as exc:
            message = str(exc)
            quote = getattr(exc, "quote", None)
            verb = "refused" if isinstance(exc, RequestRejected) else "failed"
            if isinstance(quote, BoxQuote):
                own = quote.pointing(message, "(the box's words, below)")
                lines = [f"{ctx.tool} {verb}: {own}"]
                lines += fenced_sections([Section("box message", quote.said(message))])
                return text_result("\n".join(lines), is_error=True)
            return text_result(f"{ctx.tool} {verb}: {message}", is_error=True)

    return guarded


def create_sandbox(toolbox: Toolbox, args: JSONObject, ctx: CallContext) -> JSONObject:
    image = args.get("environment", "stdlib")
    if image not in toolbox.allowed_images():
        raise InvalidRequest(
            f"The environment {image!r} is not one this server offers: "
            f"{', '.join(toolbox.allowed_images()) or 'none'}."
        )
    info = toolbox.session.sandboxes().create(
        image=image,
        limits=args.get("limits", LimitRequest()),
        libraries=tuple(args.get("libraries", ())),
        egress=args.get("egress"),
    )
    return _info_result(
        info,
        f"Created sandbox {info.sandbox_id}. Its workspace keeps files and installed packages "
        "between runs; each run is a fresh process. Destroy it with destroy_sandbox when done.",
    )


def run(toolbox: Toolbox, args: JSONObject, ctx: CallContext) -> JSONObject:
    sandbox_id = args["sandbox_id"]
    sandboxes = toolbox.session.sandboxes()
    installed: JSONObject = {}
    if args.get("libraries"):
        installed = {"installed": sandboxes.install(sandbox_id, args["libraries"])}
    for index, item in enumerate(args.get("files", [])):
        sandboxes.write_file(sandbox_id, item["path"], _content(item, f"files[{index}]"))
    timeout = args.get("timeout")
    request = RunRequest(
        code=args["code"].encode("utf-8", "surrogatepass"),
        code_name=RUN_PROGRAM,
        limits=LimitRequest(timeout_s=timeout) if timeout is not None else LimitRequest(),
    )
    facts = tuple(
        LibraryFact(p["name"], p["version"], p["wheel_sha256"])
        for p in installed.get("installed", {}).get("packages", ())
    )
    outcome = sandboxes.run(sandbox_id, request, cancel=ctx.cancel, installed=facts)
    return _outcome_result(toolbox, sandbox_id, request, outcome, installed)


def exec_tool(toolbox: Toolbox, args: JSONObject, ctx: CallContext) -> JSONObject:
    sandbox_id = args["sandbox_id"]
    outcome = toolbox.session.sandboxes().exec(
        sandbox_id, args["argv"], timeout_s=args.get("timeout"), cancel=ctx.cancel
    )
    from pybox._features.sandboxes.fileops import exec_request

    return _outcome_result(toolbox, sandbox_id, exec_request(tuple(args["argv"])), outcome)


def _file_owner(toolbox: Toolbox, args: JSONObject) -> tuple[Any, str]:
    """The sandboxes or the experiments service, and the id: exactly one of
    sandbox_id and experiment_id (an experiment's files are its sandbox's)."""
    given = [key for key in ("sandbox_id", "experiment_id") if key in args]
    if len(given) != 1:
        raise InvalidRequest(
            "Give exactly one of sandbox_id (from create_sandbox) and experiment_id (from "
            f"create_experiment); {'both were' if given else 'neither was'} given."
        )
    if given[0] == "experiment_id":
        return toolbox.session.experiments(), args["experiment_id"]
    return toolbox.session.sandboxes(), args["sandbox_id"]


def read_sandbox_file(toolbox: Toolbox, args: JSONObject, ctx: CallContext) -> JSONObject:
    owner, owner_id = _file_owner(toolbox, args)
    data = owner.read_file(owner_id, args["path"])
    try:
        text, encoding = data.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        text, encoding = base64.b64encode(data).decode("ascii"), "base64"
    lines = [f"The file {args['path']!r} holds {len(data)} bytes ({encoding})."]
    lines += fenced_sections([Section("file content", text)])
    result = text_result("\n".join(lines), is_error=False)
    result["structuredContent"] = {
        "path": args["path"],
        "size_bytes": len(data),
        "encoding": encoding,
        "content": text,
    }
    return result


def write_sandbox_file(toolbox: Toolbox, args: JSONObject, ctx: CallContext) -> JSONObject:
    owner, owner_id = _file_owner(toolbox, args)
    written = owner.write_file(owner_id, args["path"], _content(args, "content"))
    result = text_result(
        f"Wrote {written['size_bytes']} bytes to {written['path']!r} in the sandbox.",
        is_error=False,
    )
    result["structuredContent"] = written
    return result


def list_sandbox_files(toolbox: Toolbox, args: JSONObject, ctx: CallContext) -> JSONObject:
    files, complete = toolbox.session.sandboxes().list_files(
        args["sandbox_id"], args.get("path", "")
    )
    listing = "\n".join(f"{f.kind}\t{f.size_bytes}\t{f.path}" for f in files)
    lines = [
        f"{len(files)} entries{'' if complete else ' (the listing was cut short)'}; "
        "names as the box listed them (kind, bytes, path):"
    ]
    lines += fenced_sections([Section("file listing", listing)])
    result = text_result("\n".join(lines), is_error=False)
    result["structuredContent"] = {"files": [f.to_dict() for f in files], "complete": complete}
    return result


def destroy_sandbox(toolbox: Toolbox, args: JSONObject, ctx: CallContext) -> JSONObject:
    info, was_live = toolbox.session.sandboxes().destroy(args["sandbox_id"])
    text = (
        f"Destroyed sandbox {info.sandbox_id}; the engine confirmed its box is gone."
        if was_live
        else f"Sandbox {info.sandbox_id} was already destroyed ({info.reason})."
    )
    result = text_result(text, is_error=False)
    result["structuredContent"] = {
        "sandbox_id": info.sandbox_id,
        "destroyed": True,
        "was_live": was_live,
    }
    return result


def list_sandboxes(toolbox: Toolbox, args: JSONObject, ctx: CallContext) -> JSONObject:
    infos = toolbox.session.sandboxes().list()
    described = [_sandbox_dict(info) for info in infos]
    text = f"{len(infos)} live sandboxes." + (
        "\n" + json.dumps(described, indent=2) if infos else ""
    )
    result = text_result(text, is_error=False)
    result["structuredContent"] = {"sandboxes": described}
    return result


def _content(item: JSONObject, where: str) -> bytes:
    content: str = item["content"]
    if item.get("encoding", "utf-8") == "utf-8":
        return content.encode("utf-8", "surrogatepass")
    try:
        return base64.b64decode(content, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ArgumentError(f"{where}: content is not valid base64 ({exc}).") from None


# -- declarations -------------------------------------------------------------------


def _schema(required: list[str], properties: JSONObject) -> JSONObject:
    return {
        "type": "object",
        "additionalProperties": False,
        "required": required,
        "properties": properties,
    }


def _create_schema(toolbox: Toolbox) -> JSONObject:
    from pybox._core.limit_surfaces import limits_json_schema

    policy = toolbox.session.policy
    return _schema(
        [],
        {
            "environment": {
                "type": "string",
                "description": "The image the sandbox runs; one of: "
                f"{', '.join(toolbox.allowed_images()) or 'none'}. Default stdlib.",
            },
            "libraries": LIBRARIES,
            "limits": limits_json_schema(policy.defaults, policy.ceilings),
            "egress": egress_schema(toolbox),
        },
    )


SANDBOX_RUN_SCHEMA: JSONObject = {
    **RUN_OUTPUT_SCHEMA,
    "required": [*RUN_OUTPUT_SCHEMA["required"], "sandbox_id"],
    "properties": {
        **RUN_OUTPUT_SCHEMA["properties"],
        "sandbox_id": {"type": "string"},
        "installed": {"type": "object", "description": "what libraries installed first"},
    },
}
SANDBOX_SCHEMA: JSONObject = {
    "type": "object",
    "required": ["sandbox_id", "state", "limits", "expires_at", "idle_expires_at"],
    "properties": {
        "sandbox_id": {"type": "string"},
        "state": {"type": "string"},
        "limits": {"type": "object"},
        "expires_at": {"type": "number", "description": "seconds since the epoch"},
        "idle_expires_at": {"type": "number", "description": "seconds since the epoch"},
        "persists": {"type": "object"},
    },
}


def _object(required: list[str], **properties: JSONObject) -> JSONObject:
    return {"type": "object", "required": required, "properties": properties}


CONTENT = {
    "content": {"type": "string"},
    "encoding": {"type": "string", "enum": ["utf-8", "base64"]},
}
SANDBOX_TOOLS: tuple[Tool, ...] = (
    Tool(
        name="create_sandbox",
        group=GROUP,
        title="Create a sandbox that keeps its files",
        description="Create a sealed sandbox (no network, read-only root, non-root user, "
        "capped memory, CPU and processes) whose workspace keeps files and installed packages "
        "between runs. Returns sandbox_id, the effective limits and when it expires (idle "
        "time and lifetime). Each run in it is a fresh process: variables and processes do "
        "not persist.",
        input_schema=_create_schema,
        checks={"limits": limit_request},
        handler=guarded(create_sandbox),
        output_schema=SANDBOX_SCHEMA,
        hints=Hints(read_only=False, destructive=False, idempotent=False),
    ),
    Tool(
        name="run",
        group=GROUP,
        title="Run Python in a sandbox",
        description="Run Python code in an existing sandbox as a fresh process; its working "
        "folder is the workspace, where earlier runs' files are. Returns stdout, stderr, "
        "exit_code, success, timed_out and the receipt.",
        input_schema=_schema(
            ["sandbox_id", "code"],
            {
                "sandbox_id": SANDBOX_ID,
                "code": {"type": "string", "description": "The Python program."},
                "libraries": LIBRARIES,
                "timeout": TIMEOUT,
                "files": {
                    "type": "array",
                    "maxItems": 64,
                    "description": "Files to write into the workspace before the run.",
                    "items": _schema(["path", "content"], {"path": PATH, **CONTENT}),
                },
            },
        ),
        handler=guarded(run),
        output_schema=SANDBOX_RUN_SCHEMA,
        hints=Hints(read_only=False, destructive=False, idempotent=False),
    ),
    Tool(
        name="exec",
        group=GROUP,
        title="Run a command in a sandbox",
        description="Run a command given as an argument list (never a shell string; for a "
        'shell pass ["sh", "-c", "..."]) in an existing sandbox, in its workspace.',
        input_schema=_schema(
            ["sandbox_id", "argv"],
            {
                "sandbox_id": SANDBOX_ID,
                "argv": {
                    "type": "array",
                    "maxItems": 256,
                    "items": {"type": "string"},
                },
                "timeout": TIMEOUT,
            },
        ),
        handler=guarded(exec_tool),
        output_schema=SANDBOX_RUN_SCHEMA,
        hints=Hints(read_only=False, destructive=False, idempotent=False),
    ),
    Tool(
        name="read_sandbox_file",
        group=GROUP,
        title="Read a file from a sandbox",
        description="Read a file from a sandbox's or an experiment's workspace (UTF-8 text, "
        "or base64 if it is not). Give sandbox_id or experiment_id.",
        input_schema=_schema(
            ["path"], {"sandbox_id": SANDBOX_ID, "experiment_id": EXPERIMENT_ID, "path": PATH}
        ),
        handler=guarded(read_sandbox_file),
        also_in=("experiments",),
        output_schema=_object(
            ["path", "size_bytes", "encoding", "content"],
            path={"type": "string"},
            size_bytes={"type": "integer"},
            encoding={"type": "string", "enum": ["utf-8", "base64"]},
            content={"type": "string"},
        ),
        hints=Hints(read_only=True, destructive=False, idempotent=True),
    ),
    Tool(
        name="write_sandbox_file",
        group=GROUP,
        title="Write a file into a sandbox",
        description="Write a file into a sandbox's or an experiment's workspace (folders are "
        "made as needed; an existing file is replaced). Give sandbox_id or experiment_id; an "
        "experiment's project on the host is never written.",
        input_schema=_schema(
            ["path", "content"],
            {"sandbox_id": SANDBOX_ID, "experiment_id": EXPERIMENT_ID, "path": PATH, **CONTENT},
        ),
        handler=guarded(write_sandbox_file),
        also_in=("experiments",),
        output_schema=_object(
            ["path", "size_bytes"], path={"type": "string"}, size_bytes={"type": "integer"}
        ),
        hints=Hints(read_only=False, destructive=True, idempotent=True),
    ),
    Tool(
        name="list_sandbox_files",
        group=GROUP,
        title="List a sandbox's files",
        description="List the files and folders under a path of a sandbox's workspace "
        "(default: all of it). Links are listed, never followed.",
        input_schema=_schema(["sandbox_id"], {"sandbox_id": SANDBOX_ID, "path": PATH}),
        handler=guarded(list_sandbox_files),
        output_schema=_object(
            ["files", "complete"],
            files={"type": "array", "items": {"type": "object"}},
            complete={"type": "boolean"},
        ),
        hints=Hints(read_only=True, destructive=False, idempotent=True),
    ),
    Tool(
        name="destroy_sandbox",
        group=GROUP,
        title="Destroy a sandbox",
        description="Destroy a sandbox: its box is removed and the removal confirmed by the "
        "engine. Safe to call again: an already destroyed sandbox is reported as such.",
        input_schema=_schema(["sandbox_id"], {"sandbox_id": SANDBOX_ID}),
        handler=guarded(destroy_sandbox),
        output_schema=_object(
            ["sandbox_id", "destroyed", "was_live"],
            sandbox_id={"type": "string"},
            destroyed={"type": "boolean"},
            was_live={"type": "boolean"},
        ),
        hints=Hints(read_only=False, destructive=True, idempotent=True),
    ),
    Tool(
        name="list_sandboxes",
        group=GROUP,
        title="List sandboxes",
        description="List the live sandboxes, with their limits, state and expiry.",
        input_schema=_schema([], {}),
        handler=guarded(list_sandboxes),
        output_schema=_object(["sandboxes"], sandboxes={"type": "array", "items": SANDBOX_SCHEMA}),
        hints=Hints(read_only=True, destructive=False, idempotent=True),
    ),
)
