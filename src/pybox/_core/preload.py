"""Modules a warm box imports before its code arrives (pure values).

An image declares them (a lock-built image on a `# pybox: preload ...` line of
its lock file); its record carries the list in its recipe, so the recipe hash
covers it; a warm box's entrypoint names them (read back with the rest of the
posture); the bootstrap writes a request the image's hook (`HOOK_FILE`, one
line in the venv's site-packages) runs in the pre-started interpreter before
that interpreter opens its script. See docs/images.md, "Preloaded modules".
"""

from __future__ import annotations

import re

from pybox._core.errors import InvalidRequest

# The bootstrap's request and report (bootstrap.py has the same paths: a unit test pins them).
PRELOAD_REQUEST = "/pybox/.preload"
HOOK_FILE = "_pybox_preload.pth"
MAX_PRELOAD_MODULES = 32
_MODULE_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
_DIRECTIVE_RE = re.compile(r"\s*#\s*pybox:\s*preload\b(?P<names>.*)$")


def hook_line(request_path: str = PRELOAD_REQUEST) -> str:
    """The `.pth` line: in any interpreter of the image, one stat; when the
    bootstrap left a request, run it (the request checks that its parent is
    the bootstrap that wrote it, and removes itself)."""
    inner = (
        f"with open({request_path!r}, 'rb') as f: "
        f"exec(compile(f.read(), {request_path!r}, 'exec'), {{}})"
    )
    return f"import os; os.path.isfile({request_path!r}) and exec({inner!r}, {{}})\n"


def check_modules(names: tuple[str, ...], where: str) -> tuple[str, ...]:
    """Module names as `import` takes them; refused with the name and the limit."""
    if len(names) > MAX_PRELOAD_MODULES:
        raise InvalidRequest(
            f"{where} names {len(names)} modules to preload; the limit is "
            f"{MAX_PRELOAD_MODULES}. Keep the ones the image's programs import."
        )
    seen: set[str] = set()
    for name in names:
        if not _MODULE_RE.fullmatch(name) or len(name) > 200:
            raise InvalidRequest(
                f"{where} names {name!r} to preload, which is not a module name. "
                "Use dotted names as `import` takes them (for example matplotlib.pyplot)."
            )
        if name in seen:
            raise InvalidRequest(f"{where} names {name!r} to preload twice. Keep one.")
        seen.add(name)
    return names


def preload_directive(text: str, source: str) -> tuple[str, ...]:
    """The modules a lock file's `# pybox: preload a b c` lines name, in order."""
    names: list[str] = []
    for number, line in enumerate(text.splitlines(), start=1):
        match = _DIRECTIVE_RE.match(line)
        if match is not None:
            names.extend(match.group("names").replace(",", " ").split())
            check_modules(tuple(names), f"{source}, line {number},")
    return tuple(names)
