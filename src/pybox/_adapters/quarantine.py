"""The macOS quarantine mark on returned files, so Gatekeeper checks them when opened.

On macOS the mark is written with `/usr/bin/xattr` (Python has no setxattr
there). Elsewhere, where this path is only exercised by tests, it is written
as a `user.` extended attribute with `os.setxattr`.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from pybox._core.errors import PyboxError

QUARANTINE_ATTR = "com.apple.quarantine"
XATTR_TOOL = "/usr/bin/xattr"
# 0081: "quarantined" with the "user-approved, not yet opened" bit, as browsers write it.
QUARANTINE_FLAGS = "0081"


def quarantine_value(agent: str = "pybox", now_s: float | None = None) -> str:
    stamp = int(time.time() if now_s is None else now_s)
    return f"{QUARANTINE_FLAGS};{stamp:08x};{agent};"


def mark_quarantined(
    paths: Sequence[Path], *, system: str | None = None, xattr_tool: str = XATTR_TOOL
) -> None:
    """Put the quarantine mark on every file in `paths`."""
    if not paths:
        return
    value = quarantine_value()
    if (system or sys.platform) == "darwin":
        import subprocess  # here: only macOS runs the tool, and every run imports this module

        argv = [xattr_tool, "-w", QUARANTINE_ATTR, value, *map(str, paths)]
        try:
            result = subprocess.run(
                argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False
            )
        except OSError as exc:
            raise PyboxError(
                f"Cannot run {xattr_tool} to quarantine returned files: {exc}."
            ) from exc
        if result.returncode != 0:
            raise PyboxError(
                f"{xattr_tool} could not quarantine the returned files (exit "
                f"{result.returncode}): {result.stderr.strip()[:300]}"
            )
        return
    setxattr = getattr(os, "setxattr", None)
    if setxattr is None:
        raise PyboxError("This system cannot set extended attributes to quarantine files.")
    for path in paths:
        try:
            setxattr(path, f"user.{QUARANTINE_ATTR}", value.encode(), follow_symlinks=False)
        except OSError as exc:
            raise PyboxError(
                f"Cannot quarantine the returned file {path}: {exc.strerror or exc}."
            ) from exc
