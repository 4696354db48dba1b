"""Every tool this server can offer, as declarations (see `_toolbox.Tool`).

A new tool group (sandboxes, experiments) is a module of declarations added
here; `tools/list`, the argument checks, the dispatch, `--tools` and the
capabilities resource all follow from this list.
"""

from __future__ import annotations

from pybox._frontends.mcp._experimentdecl import EXPERIMENT_TOOLS
from pybox._frontends.mcp._runtools import RUN_TOOLS
from pybox._frontends.mcp._sandboxdecl import SANDBOX_TOOLS
from pybox._frontends.mcp._toolbox import Tool, groups_of

TOOLS: tuple[Tool, ...] = (*RUN_TOOLS, *SANDBOX_TOOLS, *EXPERIMENT_TOOLS)
TOOL_GROUPS: tuple[str, ...] = groups_of(TOOLS)
