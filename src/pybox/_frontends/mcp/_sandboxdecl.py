"""The `sandboxes` tool group declared: each tool's name, words, schemas and hints,
in one place (the handlers are in `_sandboxtools`). The schema pieces that the
`experiments` group shares (paths, libraries, timeouts, egress) live here too."""

from __future__ import annotations

from pybox._core.egress import MODES as EGRESS_MODES
from pybox._frontends.mcp import _sandboxtools as tools
from pybox._frontends.mcp._present import (
    RUN_OUTPUT_SCHEMA,
)
from pybox._frontends.mcp._protocol import JSONObject
from pybox._frontends.mcp._runargs import limit_request
from pybox._frontends.mcp._schema import input_schema, output_schema
from pybox._frontends.mcp._toolbox import (
    Hints,
    Tool,
    Toolbox,
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


def _create_schema(toolbox: Toolbox) -> JSONObject:
    from pybox._core.limit_surfaces import limits_json_schema

    policy = toolbox.session.policy
    return input_schema(
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
        handler=tools.guarded(tools.create_sandbox),
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
        input_schema=input_schema(
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
                    "items": input_schema(["path", "content"], {"path": PATH, **CONTENT}),
                },
            },
        ),
        handler=tools.guarded(tools.run),
        output_schema=SANDBOX_RUN_SCHEMA,
        hints=Hints(read_only=False, destructive=False, idempotent=False),
    ),
    Tool(
        name="exec",
        group=GROUP,
        title="Run a command in a sandbox",
        description="Run a command given as an argument list (never a shell string; for a "
        'shell pass ["sh", "-c", "..."]) in an existing sandbox, in its workspace.',
        input_schema=input_schema(
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
        handler=tools.guarded(tools.exec_tool),
        output_schema=SANDBOX_RUN_SCHEMA,
        hints=Hints(read_only=False, destructive=False, idempotent=False),
    ),
    Tool(
        name="read_sandbox_file",
        group=GROUP,
        title="Read a file from a sandbox",
        description="Read a file from a sandbox's or an experiment's workspace (UTF-8 text, "
        "or base64 if it is not). Give sandbox_id or experiment_id.",
        input_schema=input_schema(
            ["path"], {"sandbox_id": SANDBOX_ID, "experiment_id": EXPERIMENT_ID, "path": PATH}
        ),
        handler=tools.guarded(tools.read_sandbox_file),
        also_in=("experiments",),
        output_schema=output_schema(
            ["path", "size_bytes", "encoding", "content"],
            path={"type": "string"},
            size_bytes={"type": "integer"},
            encoding={"type": "string", "enum": ["utf-8", "base64"]},
            content={"type": "string"},
            source={"type": "string"},
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
        input_schema=input_schema(
            ["path", "content"],
            {"sandbox_id": SANDBOX_ID, "experiment_id": EXPERIMENT_ID, "path": PATH, **CONTENT},
        ),
        handler=tools.guarded(tools.write_sandbox_file),
        also_in=("experiments",),
        output_schema=output_schema(
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
        input_schema=input_schema(["sandbox_id"], {"sandbox_id": SANDBOX_ID, "path": PATH}),
        handler=tools.guarded(tools.list_sandbox_files),
        output_schema=output_schema(
            ["files", "complete"],
            files={"type": "array", "items": {"type": "object"}},
            complete={"type": "boolean"},
            source={"type": "string"},
        ),
        hints=Hints(read_only=True, destructive=False, idempotent=True),
    ),
    Tool(
        name="destroy_sandbox",
        group=GROUP,
        title="Destroy a sandbox",
        description="Destroy a sandbox: its box is removed and the removal confirmed by the "
        "engine. Safe to call again: an already destroyed sandbox is reported as such.",
        input_schema=input_schema(["sandbox_id"], {"sandbox_id": SANDBOX_ID}),
        handler=tools.guarded(tools.destroy_sandbox),
        output_schema=output_schema(
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
        input_schema=input_schema([], {}),
        handler=tools.guarded(tools.list_sandboxes),
        output_schema=output_schema(
            ["sandboxes"], sandboxes={"type": "array", "items": SANDBOX_SCHEMA}
        ),
        hints=Hints(read_only=True, destructive=False, idempotent=True),
    ),
)
