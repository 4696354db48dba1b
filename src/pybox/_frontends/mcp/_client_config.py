"""`pybox config --client ...`: the exact configuration a client needs to start `pybox mcp`.

stdout carries only the configuration; where to put it goes to stderr.
"""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

CLIENTS = ("claude-code", "claude-desktop", "cursor", "vscode")

WHERE = {
    "claude-code": "Run the command above once (or, with --format json, put the JSON in the "
    "project's .mcp.json).",
    "claude-desktop": "Merge into claude_desktop_config.json (macOS: ~/Library/Application "
    "Support/Claude/; Linux: ~/.config/Claude/), then restart Claude Desktop.",
    "cursor": "Merge into ~/.cursor/mcp.json (all projects) or .cursor/mcp.json (one project).",
    "vscode": "Merge into .vscode/mcp.json in the workspace (or the user profile's mcp.json).",
}


# The environment a server started by a client needs to see what the operator sees:
# where the engine is, which configuration and state, and policy set by variable.
# Never the HTTP token (a stdio server has no use for it) nor anything else.
CARRIED_ENV = (
    "DOCKER_HOST",
    "CONTAINER_HOST",
    "PYBOX_ENGINE",
    "PYBOX_CONFIG",
    "PYBOX_STATE_DIR",
    "PYBOX_PLATFORM",
    "COLIMA_HOME",
)
CARRIED_PREFIXES = ("PYBOX_MAX_", "PYBOX_DEFAULT_", "PYBOX_POOL_")
PATH_VARIABLES = ("PYBOX_CONFIG", "PYBOX_STATE_DIR", "COLIMA_HOME")


def carried_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The operator's variables the server needs, paths made absolute (a client starts
    the server in a directory of its own choosing)."""
    carried: dict[str, str] = {}
    for name in sorted(environ):
        if name in CARRIED_ENV or name.startswith(CARRIED_PREFIXES):
            value = environ[name]
            if name in PATH_VARIABLES and value:
                value = str(Path(value).expanduser().absolute())
            carried[name] = value
    return carried


def server_command(extra_args: Sequence[str] = ()) -> list[str]:
    """The interpreter pybox is installed in, so the client starts this very pybox."""
    return [sys.executable, "-m", "pybox", "mcp", *extra_args]


def client_config(
    client: str,
    fmt: str,
    extra_args: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
) -> str:
    command, *args = server_command(extra_args)
    env = dict(env or {})
    if client == "claude-code" and fmt == "text":
        # The name before the -e options, and `--` after them: -e takes several values.
        options = [f"--env={name}={value}" for name, value in env.items()]
        return shlex.join(
            ["claude", "mcp", "add", "--scope", "user", "pybox", *options, "--", command, *args]
        )
    entry: dict[str, object] = {"command": command, "args": args}
    if client in ("vscode", "claude-code"):
        entry = {"type": "stdio", **entry}
    if env:
        entry["env"] = env
    if client == "vscode":
        return json.dumps({"servers": {"pybox": entry}}, indent=2)
    return json.dumps({"mcpServers": {"pybox": entry}}, indent=2)
