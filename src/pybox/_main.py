"""The composition root: the one place that puts the front ends together.

It is the `pybox` console script. The CLI owns the command line; other front
ends contribute their commands here, so no front end imports another.
"""

from __future__ import annotations

from collections.abc import Sequence

from pybox._frontends import cli, mcp


def main(argv: Sequence[str] | None = None) -> int:
    return cli.main(argv, extra_commands=[mcp.register])
