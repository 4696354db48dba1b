"""Paths from callers, confined to a sandbox's workspace (pure).

Every tool that takes a path goes through `workspace_path` first: `..`, an
absolute path outside the workspace, control and bidirectional or invisible
format characters (`display.name_problem`) and over-long paths
are refused here, before anything is sent. The box checks again and never
follows a link (`pybox/_inbox/sandbox_files.py`), so a link the agent's own
code planted cannot lead outside either.
"""

from __future__ import annotations

from pybox._core.display import name_problem
from pybox._core.errors import InvalidRequest
from pybox._core.posture import WORK_DIR

MAX_PATH_BYTES = 1024
MAX_COMPONENTS = 32


def workspace_path(path: object, *, what: str = "path", folder_ok: bool = False) -> str:
    """`path` as a relative path inside the workspace ("" is the workspace itself,
    allowed only with `folder_ok`). Absolute paths must lie under the workspace."""
    if not isinstance(path, str):
        raise InvalidRequest(f"The {what} must be a string, not {type(path).__name__}.")
    shown = repr(path[:200])
    problem = name_problem(path)
    if problem is not None:
        raise InvalidRequest(f"The {what} {shown} holds {problem}; give a plain path.")
    if len(path.encode("utf-8", "surrogateescape")) > MAX_PATH_BYTES:
        raise InvalidRequest(
            f"The {what} is longer than {MAX_PATH_BYTES} bytes; give a shorter path."
        )
    relative = path
    if path.startswith("/"):
        if path == WORK_DIR or path.startswith(WORK_DIR + "/"):
            relative = path[len(WORK_DIR) :]
        else:
            raise InvalidRequest(
                f"The {what} {shown} is outside the sandbox's workspace ({WORK_DIR}). Give a "
                f"path relative to the workspace, or one under {WORK_DIR}/."
            )
    parts = [part for part in relative.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise InvalidRequest(
            f"The {what} {shown} leaves the sandbox's workspace: '..' is not allowed. Give a "
            "path inside the workspace, such as 'data/input.csv'."
        )
    if len(parts) > MAX_COMPONENTS:
        raise InvalidRequest(
            f"The {what} {shown} is {len(parts)} folders deep; at most {MAX_COMPONENTS}."
        )
    if not parts and not folder_ok:
        raise InvalidRequest(f"The {what} {shown} names the workspace itself; name a file in it.")
    return "/".join(parts)
