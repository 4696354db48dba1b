"""The `experiments` tool group's declarations (handlers: `_experimenttools`).

read_sandbox_file and write_sandbox_file are declared once, in the sandboxes
group, and offered here too (`also_in`): with experiment_id they work on an
experiment's copy.
"""

from __future__ import annotations

from pybox._frontends.mcp import _experimenttools as tools
from pybox._frontends.mcp._protocol import JSONObject
from pybox._frontends.mcp._runargs import limit_request
from pybox._frontends.mcp._sandboxdecl import LIBRARIES, PATH, TIMEOUT, egress_schema
from pybox._frontends.mcp._sandboxtools import guarded
from pybox._frontends.mcp._schema import input_schema, output_schema
from pybox._frontends.mcp._toolbox import Hints, Tool, Toolbox

GROUP = tools.GROUP

EXPERIMENT_ID: JSONObject = {
    "type": "string",
    "description": "The experiment_id create_experiment returned.",
}
JOB_ID: JSONObject = {
    "type": "string",
    "description": "The job_id execute_experiment or run_tests returned.",
}
ARGV: JSONObject = {
    "type": "array",
    "maxItems": 256,
    "items": {"type": "string"},
    "description": "The command as an argument list, run in the copy's folder; never a shell "
    'string (for a shell, pass ["sh", "-c", "..."] yourself).',
}
BACKGROUND: JSONObject = {
    "type": "boolean",
    "description": "Return at once with a job_id; follow it with get_job_status / "
    "get_job_result, stop it with cancel_job. Default false: wait for the result.",
}
READ_ONLY = Hints(read_only=True, destructive=False, idempotent=True)
CHANGES = Hints(read_only=False, destructive=False, idempotent=False)


def _forwardable(toolbox: Toolbox) -> str:
    names = sorted(toolbox.host_env.names or ())
    return "here: " + ", ".join(names) if names else "here: none"


def _create_schema(toolbox: Toolbox) -> JSONObject:
    from pybox._core.limit_surfaces import limits_json_schema

    policy = toolbox.session.policy
    return input_schema(
        ["project"],
        {
            "project": {
                "type": "string",
                "description": "The project's folder on the host, under a root the operator "
                "allowed (check_sandbox_runtime lists them). It is copied, never mounted, and "
                "never written.",
            },
            "environment": {
                "type": "string",
                "description": "What the copy runs in; one of: "
                f"{', '.join(toolbox.allowed_images()) or 'none'}. Default stdlib.",
            },
            "limits": limits_json_schema(policy.defaults, policy.ceilings),
            "env": {
                "type": "array",
                "maxItems": 64,
                "items": {"type": "string"},
                "description": 'Environment variables for its commands: "NAME=value" sets '
                'one; "NAME" alone copies the server\'s value, only for the names the '
                f"operator listed ({_forwardable(toolbox)}). Credentials (credential-shaped "
                "names, URLs with a password) are refused.",
            },
            "libraries": LIBRARIES,
            "egress": egress_schema(toolbox),
        },
    )


EXPERIMENT_SCHEMA = output_schema(
    ["experiment_id", "project", "state"],
    experiment_id={"type": "string"},
    project={"type": "string"},
    state={"type": "string"},
    copy={"type": "object"},
    kept={"type": "object"},
)
CHANGES_SCHEMA = output_schema(
    ["experiment_id", "available"],
    experiment_id={"type": "string"},
    available={"type": "boolean"},
    stats={"type": "object"},
    diff={"type": "string"},
    source={"type": "object"},
)
ARTIFACTS_SCHEMA = output_schema(
    ["experiment_id", "artifacts"],
    experiment_id={"type": "string"},
    artifacts={"type": "array", "items": {"type": "object"}},
)
LIST_SCHEMA = output_schema(
    ["experiments"], experiments={"type": "array", "items": EXPERIMENT_SCHEMA}
)
COMPARISON_SCHEMA = output_schema(
    ["ranking", "recommended", "indistinguishable", "reasons"],
    ranking={"type": "array", "items": {"type": "object"}},
    recommended={"type": ["string", "null"]},
    indistinguishable={"type": "boolean"},
    reasons={"type": "array", "items": {"type": "string"}},
)
RUNTIME_SCHEMA = output_schema(
    ["engine", "environments", "network", "project_roots"],
    engine={"type": "object"},
    environments={"type": "array", "items": {"type": "string"}},
    network={"type": "string"},
    project_roots={"type": "array", "items": {"type": "string"}},
    forward_env={"type": "array", "items": {"type": "string"}},
)
JOB_SCHEMA = output_schema(
    ["job_id", "experiment_id", "kind", "state", "argv"],
    job_id={"type": "string"},
    experiment_id={"type": "string"},
    kind={"type": "string", "enum": ["command", "tests"]},
    state={"type": "string"},
    argv={"type": "array", "items": {"type": "string"}},
    exit_code={"type": ["integer", "null"]},
    tests={"type": "object"},
)


def _tool(
    name: str,
    title: str,
    description: str,
    schema: object,
    handler: object,
    hints: Hints,
    output: JSONObject | None = None,
    **extra: object,
) -> Tool:
    return Tool(
        name=name,
        group=GROUP,
        title=title,
        description=description,
        input_schema=schema,  # type: ignore[arg-type]
        handler=guarded(handler),  # type: ignore[arg-type]
        hints=hints,
        output_schema=output,
        **extra,  # type: ignore[arg-type]
    )


EXPERIMENT_TOOLS: tuple[Tool, ...] = (
    _tool(
        "create_experiment",
        "Copy a project into a sandbox to experiment on",
        "Copy a project folder into a new sealed sandbox (no network, non-root, capped) and "
        "take a baseline of what was copied. Secret-shaped files (.env*, keys, credentials) are "
        "never copied; caches and build output are skipped; both are listed. The project on "
        "the host is only read, never written.",
        _create_schema,
        tools.create_experiment,
        CHANGES,
        EXPERIMENT_SCHEMA,
        checks={"limits": limit_request},
    ),
    _tool(
        "execute_experiment",
        "Run a command in an experiment",
        "Run a command (an argument list) in the experiment's copy. Waits for the result unless "
        "background is true. Returns a job with exit_code and output.",
        input_schema(
            ["experiment_id", "argv"],
            {
                "experiment_id": EXPERIMENT_ID,
                "argv": ARGV,
                "timeout": TIMEOUT,
                "background": BACKGROUND,
            },
        ),
        tools.execute_experiment,
        CHANGES,
        JOB_SCHEMA,
    ),
    _tool(
        "run_tests",
        "Run the project's tests",
        "Run the project's tests (pytest, unittest, node --test, jest, vitest, go test or "
        "cargo test, detected from its files, or the given argv) and parse passed, failed, "
        "skipped, errors and the failing tests' names; when the output cannot be parsed, "
        "says so and judges by the exit code.",
        input_schema(
            ["experiment_id"],
            {"experiment_id": EXPERIMENT_ID, "argv": ARGV, "background": BACKGROUND},
        ),
        tools.run_tests,
        CHANGES,
        JOB_SCHEMA,
    ),
    _tool(
        "inspect_changes",
        "What changed against the baseline",
        "Created, modified and deleted files of the experiment's copy against the baseline "
        "taken before its box existed, with a bounded unified diff (binary files summarised). "
        "Works after destroy_experiment too: the changes are recorded before teardown.",
        input_schema(["experiment_id"], {"experiment_id": EXPERIMENT_ID}),
        tools.inspect_changes,
        READ_ONLY,
        CHANGES_SCHEMA,
    ),
    _tool(
        "collect_artifacts",
        "Keep files from an experiment",
        "Copy files out of the experiment's copy into pybox's store (size-capped, with sha256), "
        "so they outlive the experiment.",
        input_schema(
            ["experiment_id", "paths"],
            {
                "experiment_id": EXPERIMENT_ID,
                "paths": {"type": "array", "maxItems": 64, "items": PATH},
            },
        ),
        tools.collect_artifacts,
        Hints(read_only=False, destructive=False, idempotent=True),
        ARTIFACTS_SCHEMA,
    ),
    _tool(
        "get_experiment",
        "An experiment's state and history",
        "The experiment's state, its state history, its jobs, artifacts, last tests and changes.",
        input_schema(["experiment_id"], {"experiment_id": EXPERIMENT_ID}),
        tools.get_experiment,
        READ_ONLY,
        EXPERIMENT_SCHEMA,
    ),
    _tool(
        "list_experiments",
        "List experiments",
        "The live experiments (and with include_destroyed, the ended ones too).",
        input_schema([], {"include_destroyed": {"type": "boolean"}}),
        tools.list_experiments,
        READ_ONLY,
        LIST_SCHEMA,
    ),
    _tool(
        "get_job_status",
        "A job's state",
        "The job's state (running, completed, failed, timed_out, cancelled, lost) and exit code.",
        input_schema(["job_id"], {"job_id": JOB_ID}),
        tools.get_job_status,
        READ_ONLY,
        JOB_SCHEMA,
    ),
    _tool(
        "get_job_result",
        "A job's result",
        "The job's result with its (bounded) output; with wait, waits up to that many seconds "
        "for a running job to end.",
        input_schema(
            ["job_id"],
            {
                "job_id": JOB_ID,
                "wait": {"type": "number", "minimum": 0, "maximum": tools.MAX_WAIT_S},
            },
        ),
        tools.get_job_result,
        READ_ONLY,
        JOB_SCHEMA,
    ),
    _tool(
        "cancel_job",
        "Stop a job",
        "Stop a running job (its whole process tree); the experiment stays usable.",
        input_schema(["job_id"], {"job_id": JOB_ID}),
        tools.cancel_job,
        Hints(read_only=False, destructive=True, idempotent=True),
        JOB_SCHEMA,
    ),
    _tool(
        "destroy_experiment",
        "Destroy an experiment",
        "Record the changes, then remove the experiment's box (the engine confirms it gone) and "
        "its copy of the project, and return the final report, with what is kept (artifacts, "
        "the recorded changes) and until when (`kept`). Safe to call again: returns the same "
        "report.",
        input_schema(["experiment_id"], {"experiment_id": EXPERIMENT_ID}),
        tools.destroy_experiment,
        Hints(read_only=False, destructive=True, idempotent=True),
        EXPERIMENT_SCHEMA,
    ),
    _tool(
        "compare_experiments",
        "Compare experiments on one project",
        "Rank experiments on the same project by failing tests, exit status, size of change and "
        "duration, and recommend one, or say they are indistinguishable, with reasons.",
        input_schema(
            ["experiment_ids"],
            {
                "experiment_ids": {
                    "type": "array",
                    "maxItems": 10,
                    "items": EXPERIMENT_ID,
                }
            },
        ),
        tools.compare_experiments,
        READ_ONLY,
        COMPARISON_SCHEMA,
    ),
    _tool(
        "check_sandbox_runtime",
        "Is the sandbox runtime ready",
        "Whether the engine is reachable, and the policy in force: environments, limits "
        "(defaults and ceilings), network, the project roots allowed, the environment "
        "variables that may be forwarded by name (forward_env).",
        input_schema([], {}),
        tools.check_sandbox_runtime,
        READ_ONLY,
        RUNTIME_SCHEMA,
    ),
)
