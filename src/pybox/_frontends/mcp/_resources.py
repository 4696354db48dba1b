"""The MCP resources: what this server allows, and each run it keeps.

- `pybox://capabilities`: limits (defaults and ceilings), images, network
  policy, the box's boundary and what persists, so an agent reads them instead
  of discovering them by failing;
- `pybox://runs/{run_id}`: a run's state and receipt;
- `pybox://runs/{run_id}/stdout` and `/stderr`: its output as kept by the box
  limit (tool results carry only the head and tail); while the run runs, its
  output so far;
- `pybox://runs/{run_id}/files/{path}`: a file the program returned.

A read sends at most the registry's `read_max_bytes` (above it the read is
refused and says how else to get the data): a whole file is held in memory,
base64-encoded and JSON-encoded to be sent. The HTTP transport also caps how
many reads are served at once.
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any

from pybox._core.errors import PyboxError
from pybox._core.limit_surfaces import LIMIT_SYNONYMS
from pybox._core.limits import LIMIT_FIELDS
from pybox._core.posture import (
    BOX_UID_COUNT,
    BOX_UID_FIRST,
    INPUT_DIR,
    OUTPUT_DIR,
    PYBOX_ROOT,
    TMP_DIR,
    WORK_DIR,
)
from pybox._frontends.mcp import _experimentresources as experiments
from pybox._frontends.mcp._live import STREAMS
from pybox._frontends.mcp._present import MAX_GET_WAIT_S, run_structure, run_uri, user_limits
from pybox._frontends.mcp._protocol import INVALID_PARAMS, JSONObject, RpcError
from pybox._frontends.mcp._runs import Run
from pybox._frontends.mcp._toolbox import Toolbox
from pybox._version import __version__

CAPABILITIES_URI = "pybox://capabilities"
RUNS_PREFIX = "pybox://runs/"
MAX_LISTED_RUNS = 50


class ResourceNotFound(Exception):
    """No resource at this URI (the message says which exist)."""


def _toolchain(recipe: dict[str, Any]) -> JSONObject:
    """An environment's toolchain versions (`{"nodejs": "18.20.4+dfsg-..."}`) and what it
    is, for images built from a Debian recipe; nothing for the others."""
    versions = recipe.get("toolchain")
    if not isinstance(versions, dict) or not versions:
        return {}
    return {
        "toolchain": {str(k): str(v) for k, v in versions.items()},
        "description": str(recipe.get("description", "")),
        "debian_suite": str(recipe.get("suite", "")),
    }


def capabilities(toolbox: Toolbox) -> JSONObject:
    session = toolbox.session
    policy = session.policy
    recorded = session.recorded_images()
    allowed = toolbox.allowed_images()
    return {
        "pybox_version": __version__,
        "limits": {
            "units": {f.key: f.unit for f in LIMIT_FIELDS},
            "defaults": user_limits(policy.defaults),
            "ceilings": user_limits(policy.ceilings),
            "rule": "A run may ask for any value up to its ceiling; asking above a ceiling is "
            "refused with an error naming the ceiling, never lowered silently.",
            # Keys other sandboxes use: what pybox does with each (see docs/mcp.md).
            "synonyms": {
                s.key: {
                    "pybox_key": s.canonical,
                    "accepted": s.divisor is not None,
                    "note": s.note,
                }
                for s in LIMIT_SYNONYMS
            },
        },
        "images": [
            {
                "name": name,
                "image_id": recorded[name].image_id,
                "python": recorded[name].python_path,
                "packages": list(recorded[name].packages),
                **_toolchain(recorded[name].recipe),
            }
            for name in allowed
        ],
        "network": "none: a box has no network interface but loopback",
        "boundary": {
            "user": f"a uid and gid of the box's own, from {BOX_UID_FIRST} to "
            f"{BOX_UID_FIRST + BOX_UID_COUNT - 1} (never root, never a host account's)",
            "root_filesystem": "read-only",
            "writable_paths": [PYBOX_ROOT, TMP_DIR, "/dev/shm"],
            "writable_size": "each writable path is a tmpfs of limits.writable_mib",
            "program": f"{WORK_DIR}/main.py, run with the image's python",
            "input_dir": INPUT_DIR,
            "output_dir": OUTPUT_DIR,
            "capabilities": "none (all dropped), no-new-privileges",
            "host_paths": "none mounted",
            "engine_socket": "not reachable from the box",
            "swap": "none (memory plus swap equals the memory limit)",
        },
        "persistence": {
            "between_runs": "nothing: every run gets a fresh box, removed after the run "
            "(removal confirmed against the engine)",
            "runs_kept": f"this server keeps the most recent finished runs (at least "
            f"{toolbox.registry.keep_finished}) with their output, receipt and returned files, "
            "in memory and a private temporary directory, until it exits",
            "kept_files_bytes_max": toolbox.registry.keep_files_bytes,
            "kept_files_rule": "returned files of all kept runs stay under kept_files_bytes_max; "
            "the oldest runs' files are deleted first (their receipts stay). Read files soon "
            "after the run.",
            "read_max_bytes": toolbox.registry.read_max_bytes,
            **({"sandboxes": _sandboxes(toolbox)} if "sandboxes" in toolbox.groups else {}),
            **({"experiments": _experiments(toolbox)} if "experiments" in toolbox.groups else {}),
        },
        "tool_groups": {
            "enabled": list(toolbox.groups),
            "available": list(toolbox.known_groups),
            "rule": "the operator chooses the groups with `pybox mcp --tools GROUP[,GROUP]`; "
            "a group that is off has no tools listed and its tools are unknown",
        },
        "tool_results": {
            "output_per_stream_bytes": toolbox.options.reply_bytes,
            "shortening": "head and tail kept, marked; the full output (up to limits.output_kib) "
            "is in pybox://runs/{run_id}/stdout and /stderr",
            "get_result_max_wait_s": MAX_GET_WAIT_S,
            "get_run_max_wait_s": MAX_GET_WAIT_S,  # the name before get_result
            "max_message_bytes": toolbox.options.max_message_bytes,
            "max_runs_at_once": toolbox.options.max_running,
        },
    }


def _sandboxes(toolbox: Toolbox) -> JSONObject:
    """What a sandbox keeps, and the operator's settings it lives by."""
    from pybox._features.sandboxes.records import persists

    settings = toolbox.session.sandboxes().settings
    return {
        **persists(),
        "limits": "fixed when the sandbox is created, within the ceilings above; a run in it "
        "may ask for a lower timeout or output cap, never for more",
        "network": "none, ever: libraries are installed by a separate, short-lived box",
        **settings.to_dict(),
    }


def _experiments(toolbox: Toolbox) -> JSONObject:
    """Where projects may come from, and what a copy is allowed to hold."""
    settings = toolbox.session.experiment_settings
    return {
        "copy": "projects are copied, never mounted, from the operator's project roots; "
        "secret-shaped files are never copied; the project on the host is never written",
        "kept_after_destroy": "the record, its state history, the jobs' bounded output, the "
        "changes (recorded before teardown) and collected artifacts, in pybox's store",
        **settings.to_dict(),
    }


def static_resources() -> list[JSONObject]:
    return [
        {
            "uri": CAPABILITIES_URI,
            "name": "capabilities",
            "title": "What this pybox server allows",
            "description": "Limits (defaults and ceilings), images, network policy, the box's "
            "boundary and what persists. Read it before asking for limits.",
            "mimeType": "application/json",
        }
    ]


def run_resources(runs: list[Run]) -> list[JSONObject]:
    return [
        {
            "uri": run_uri(run.run_id),
            "name": f"run {run.run_id}",
            "description": "state and receipt of the run",
            "mimeType": "application/json",
        }
        for run in runs[:MAX_LISTED_RUNS]
    ]


def templates() -> list[JSONObject]:
    return [
        {
            "uriTemplate": "pybox://runs/{run_id}",
            "name": "run",
            "title": "A run's state and receipt",
            "mimeType": "application/json",
        },
        {
            "uriTemplate": "pybox://runs/{run_id}/stdout",
            "name": "run-stdout",
            "title": "A run's standard output, as kept",
            "mimeType": "text/plain",
        },
        {
            "uriTemplate": "pybox://runs/{run_id}/stderr",
            "name": "run-stderr",
            "title": "A run's standard error, as kept",
            "mimeType": "text/plain",
        },
        {
            "uriTemplate": "pybox://runs/{run_id}/files/{path}",
            "name": "run-file",
            "title": "A file the run returned",
        },
    ]


def _text(uri: str, mime: str, text: str) -> JSONObject:
    return {"uri": uri, "mimeType": mime, "text": text}


def read(toolbox: Toolbox, uri: str) -> tuple[list[JSONObject], bool]:
    """The contents at `uri`, and whether they can no longer change."""
    if uri == CAPABILITIES_URI:
        return [_text(uri, "application/json", json.dumps(capabilities(toolbox), indent=2))], False
    if uri == experiments.PREFIX or uri.startswith(experiments.PREFIX + "/"):
        if not experiments.offered(toolbox):
            raise ResourceNotFound(f"No resource {uri!r}: the experiments tools are off.")
        try:
            text, final = experiments.read(toolbox, uri)
        except PyboxError as exc:
            raise ResourceNotFound(f"No resource {uri!r}: {exc}") from None
        return [_text(uri, "application/json", text)], final
    if not uri.startswith(RUNS_PREFIX):
        raise ResourceNotFound(
            f"No resource {uri!r}. Resources: {CAPABILITIES_URI} and pybox://runs/{{run_id}}."
        )
    run_id, _, part = uri[len(RUNS_PREFIX) :].partition("/")
    run = toolbox.registry.get(run_id)
    if run is None:
        raise ResourceNotFound(
            f"No run {run_id!r} is kept by this server (it keeps the most recent runs while it "
            "runs). List them with resources/list."
        )
    final = not run.running
    if part == "":
        data = run_structure(run, toolbox.options.reply_bytes)
        return [_text(uri, "application/json", json.dumps(data, indent=2))], final
    limit = toolbox.registry.read_max_bytes
    if part in STREAMS and run.running:
        # The output so far (at most the run's output cap), or, if the run just
        # ended, its outcome's.
        so_far = run.live.text(part)
        if so_far is not None:
            if len(so_far.encode()) > limit:
                raise _too_big(uri, len(so_far.encode()), limit)
            return [_text(uri, "text/plain", so_far)], False
    if run.outcome is None:
        if run.running:
            raise ResourceNotFound(f"Run {run_id} has no {part!r} yet: it has not finished.")
        raise ResourceNotFound(f"Run {run_id} has no {part!r}: it did not run.")
    final = True
    if part in STREAMS:
        data_bytes: bytes = getattr(run.outcome, part)
        if len(data_bytes) > limit:
            raise _too_big(uri, len(data_bytes), limit)
        return [_text(uri, "text/plain", data_bytes.decode("utf-8", "replace"))], final
    if part.startswith("files/") and run.files_dir is not None:
        path = part[len("files/") :]
        known = {f.path for f in run.outcome.output_files}
        if path in known:
            if run.files_evicted:
                raise ResourceNotFound(
                    f"Run {run_id}'s returned files were deleted: this server keeps at most "
                    f"{toolbox.registry.keep_files_bytes} bytes of returned files over all runs "
                    "and deletes the oldest runs' files first. Run the program again with "
                    "return_files and read the files soon after; the run's receipt (with each "
                    "file's size and sha256) is still at " + run_uri(run_id) + "."
                )
            return [_file_contents(uri, run.files_dir / path, limit)], final
    raise ResourceNotFound(f"Run {run_id} has no resource {part!r}.")


def _too_big(uri: str, size: int, limit: int) -> RpcError:
    return RpcError(
        INVALID_PARAMS,
        f"{uri} is {size} bytes; this server sends at most {limit} bytes in one resources/read. "
        "Have the program write what you need in parts under that size (several files, or a "
        "summary, a sample or a compressed copy), or print it; or have the operator raise "
        "--max-read-mib.",
        {"uri": uri, "size_bytes": size, "read_max_bytes": limit},
    )


def _file_contents(uri: str, path: Path, limit: int) -> JSONObject:
    with path.open("rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        if size > limit:
            raise _too_big(uri, size, limit)
        data = handle.read(limit + 1)  # never more than the cap, even if it grew
    if len(data) > limit:
        raise _too_big(uri, len(data), limit)
    try:
        return _text(uri, "text/plain", data.decode("utf-8"))
    except UnicodeDecodeError:
        blob: Any = base64.b64encode(data).decode("ascii")
        return {"uri": uri, "mimeType": "application/octet-stream", "blob": blob}
