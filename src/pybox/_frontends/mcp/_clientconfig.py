"""`pybox config --client ...`: the exact configuration a client needs to start `pybox mcp`.

stdout carries only the configuration; where to put it goes to stderr.
"""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Sequence

CLIENTS = ("claude-code", "claude-desktop", "cursor", "vscode")

WHERE = {
    "claude-code": "Run the command above once (or, with --format json, put the JSON in the "
    "project's .mcp.json).",
    "claude-desktop": "Merge into claude_desktop_config.json (macOS: ~/Library/Application "
    "Support/Claude/; Linux: ~/.config/Claude/), then restart Claude Desktop.",
    "cursor": "Merge into ~/.cursor/mcp.json (all projects) or .cursor/mcp.json (one project).",
    "vscode": "Merge into .vscode/mcp.json in the workspace (or the user profile's mcp.json).",
}


def server_command(extra_args: Sequence[str] = ()) -> list[str]:
    """The interpreter pybox is installed in, so the client starts this very pybox."""
    return [sys.executable, "-m", "pybox", "mcp", *extra_args]


def client_config(client: str, fmt: str, extra_args: Sequence[str] = ()) -> str:
    command, *args = server_command(extra_args)
    if client == "claude-code" and fmt == "text":
        return shlex.join(
            ["claude", "mcp", "add", "--scope", "user", "pybox", "--", command, *args]
        )
    if client == "vscode":
        data: dict[str, object] = {
            "servers": {"pybox": {"type": "stdio", "command": command, "args": args}}
        }
    elif client == "claude-code":
        data = {"mcpServers": {"pybox": {"type": "stdio", "command": command, "args": args}}}
    else:
        data = {"mcpServers": {"pybox": {"command": command, "args": args}}}
    return json.dumps(data, indent=2)
