"""The composition root: the one place that puts the front ends together.

It is the `pybox` console script. The CLI owns the command line; other front
ends contribute their commands here, so no front end imports another. The MCP
server's commands are listed by name and help, and its package is imported
only when one of them runs (the CLI's `CommandGroup`).

`pybox exec` first asks the CLI pool service, if one is running
(`pybox._frontends.poolclient`, docs/pool.md): that client runs before the
command line package is imported, and the command runs here, cold, when the
service is not there or will not take it.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Sequence

    from pybox._frontends import cli

    MCP_COMMANDS: cli.CommandGroup  # built on first use (module __getattr__)


def _register_mcp(commands: cli.Commands) -> None:
    from pybox._frontends import mcp

    mcp.register(commands)


MCP_HELP = {
    "mcp": "serve the Model Context Protocol (stdio, or Streamable HTTP with --http)",
    "config": "print the MCP configuration for a client (stdout: only the config)",
}


def __getattr__(name: str) -> object:
    if name == "MCP_COMMANDS":
        return _mcp_commands()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _mcp_commands() -> cli.CommandGroup:
    from pybox._frontends import cli

    return cli.CommandGroup(_register_mcp, MCP_HELP)


def main(argv: Sequence[str] | None = None) -> int:
    given = list(sys.argv[1:] if argv is None else argv)
    if "exec" in given:
        from pybox._frontends.poolclient import exec_through_service

        code, stdin_read = exec_through_service(given)
        if code is not None:
            return code
        if stdin_read is not None:  # the cold path reads the program from stdin again
            import io

            sys.stdin = io.TextIOWrapper(io.BytesIO(stdin_read))
    from pybox._frontends import cli

    return cli.main(argv, extra_commands=[_mcp_commands()])
