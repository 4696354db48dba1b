"""The composition root: the one place that puts the front ends together.

It is the `pybox` console script. The CLI owns the command line; other front
ends contribute their commands here, so no front end imports another. The MCP
server's commands are listed by name and help, and its package is imported
only when one of them runs (the CLI's `CommandGroup`).
"""

from __future__ import annotations

from collections.abc import Sequence

from pybox._frontends import cli


def _register_mcp(commands: cli.Commands) -> None:
    from pybox._frontends import mcp

    mcp.register(commands)


MCP_COMMANDS = cli.CommandGroup(
    _register_mcp,
    {
        "mcp": "serve the Model Context Protocol (stdio, or Streamable HTTP with --http)",
        "config": "print the MCP configuration for a client (stdout: only the config)",
    },
)


def main(argv: Sequence[str] | None = None) -> int:
    return cli.main(argv, extra_commands=[MCP_COMMANDS])
