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
from pybox._core.errors import InvalidRequest, PyboxError, RequestRejected
from pybox._core.limits import LimitRequest
from pybox._core.receipt import LibraryFact
from pybox._core.request import PreparedRun, RunRequest
from pybox._features.sandboxes.records import FILES_SOURCE, RUN_PROGRAM, SandboxInfo, persists
from pybox._frontends.mcp._present import run_result, user_limits
from pybox._frontends.mcp._protocol import ArgumentError, JSONObject
from pybox._frontends.mcp._runs import Run
from pybox._frontends.mcp._sections import Section, fenced_sections
from pybox._frontends.mcp._toolbox import (
    CallContext,
    Handler,
    Toolbox,
    text_result,
)


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
    lines = [
        f"The file {args['path']!r} holds {len(data)} bytes ({encoding}), as pybox's own file "
        "program read it in the box (isolated from the workspace)."
    ]
    lines += fenced_sections([Section("file content", text)])
    result = text_result("\n".join(lines), is_error=False)
    result["structuredContent"] = {
        "path": args["path"],
        "size_bytes": len(data),
        "encoding": encoding,
        "content": text,
        "source": FILES_SOURCE,
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
        "names as pybox's own file program listed them in the box, isolated from the "
        "workspace (kind, bytes, path):"
    ]
    lines += fenced_sections([Section("file listing", listing)])
    result = text_result("\n".join(lines), is_error=False)
    result["structuredContent"] = {
        "files": [f.to_dict() for f in files],
        "complete": complete,
        "source": FILES_SOURCE,
    }
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
