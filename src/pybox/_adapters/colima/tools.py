"""The host tools pybox runs for its VM (`colima`, `docker`), found only in trusted places.

They are taken from Homebrew's bin folders or a path given explicitly, never
from `$PATH`; the file and every folder above it must be owned by root or the
user and not writable by anyone else (but macOS's `admin` group, as Homebrew
sets it up).
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from pybox._core.errors import PlatformError

HOMEBREW_BIN_DIRS = ("/opt/homebrew/bin", "/usr/local/bin")
MACOS_ADMIN_GIDS = frozenset({80})
INSTALL_COMMAND = "brew install colima docker"


def _default_trusted_gids() -> frozenset[int]:
    # Homebrew makes its folders writable by the `admin` group (gid 80), whose
    # members can become root anyway; no other group is trusted.
    return MACOS_ADMIN_GIDS if sys.platform == "darwin" else frozenset()


def _writable_by_others(info: os.stat_result, trusted_gids: frozenset[int]) -> bool:
    if info.st_mode & 0o002:
        return True
    return bool(info.st_mode & 0o020) and info.st_gid not in trusted_gids


def untrusted_reason(
    path: str, uid: int | None = None, trusted_gids: frozenset[int] | None = None
) -> str | None:
    """Why `path` is not a trusted executable (None: it is).

    Trusted: a regular executable file, and every folder above both the path as
    given and the file it resolves to, owned by root or this user and writable
    by no one else: not by others, and by a group only if it is a trusted one
    (macOS's `admin`). A sticky folder such as /tmp is allowed above: there only
    an entry's owner can replace it.
    """
    me = os.getuid() if uid is None else uid
    gids = _default_trusted_gids() if trusted_gids is None else trusted_gids
    if not os.path.isabs(path):
        return "it is not an absolute path"
    try:
        real = os.path.realpath(path, strict=True)
        info = os.stat(real)
    except OSError as exc:
        return f"it cannot be read ({exc.strerror or exc})"
    if not stat.S_ISREG(info.st_mode):
        return f"{real} is not a regular file"
    if info.st_uid not in (0, me):
        return f"{real} is owned by uid {info.st_uid}, not by root or you"
    if _writable_by_others(info, gids):
        return f"{real} is writable by group or others (mode {stat.S_IMODE(info.st_mode):o})"
    if not info.st_mode & 0o111:
        return f"{real} is not executable"
    for folder in _folders_above(os.path.abspath(path)) + _folders_above(real):
        try:
            folder_info = os.stat(folder)
        except OSError as exc:
            return f"the folder {folder} cannot be read ({exc.strerror or exc})"
        if folder_info.st_uid not in (0, me):
            return f"the folder {folder} is owned by uid {folder_info.st_uid}, not by root or you"
        if _writable_by_others(folder_info, gids) and not folder_info.st_mode & stat.S_ISVTX:
            mode = stat.S_IMODE(folder_info.st_mode)
            return f"the folder {folder} is writable by group or others (mode {mode:o})"
    return None


def _folders_above(path: str) -> list[str]:
    folders: list[str] = []
    current = os.path.dirname(path)
    while True:
        folders.append(current)
        parent = os.path.dirname(current)
        if parent == current:
            return folders
        current = parent


@dataclass(frozen=True)
class HostTool:
    name: str
    path: str
    found_by: str


def find_tool(name: str, explicit: str | None, search_dirs: Sequence[str]) -> HostTool:
    """`name` from an explicit path, else the first trusted one in `search_dirs`.

    `$PATH` is never searched: a folder on it that someone else can write to
    would let them choose what pybox runs.
    """
    if explicit:
        reason = untrusted_reason(explicit)
        if reason is not None:
            raise PlatformError(
                f"The {name} executable {explicit} is not trusted: {reason}. Use a {name} "
                f"installed by Homebrew ({INSTALL_COMMAND}) or fix the ownership and permissions."
            )
        return HostTool(name, explicit, "explicit path")
    refused: list[str] = []
    for folder in search_dirs:
        candidate = os.path.join(folder, name)
        if not os.path.lexists(candidate):
            continue
        reason = untrusted_reason(candidate)
        if reason is None:
            return HostTool(name, candidate, f"trusted folder {folder}")
        refused.append(f"{candidate} ({reason})")
    where = ", ".join(search_dirs)
    if refused:
        raise PlatformError(
            f"Found {name} but not in a trusted state: {'; '.join(refused)}. Fix the ownership "
            f"and permissions, or reinstall with Homebrew ({INSTALL_COMMAND})."
        )
    raise PlatformError(
        f"{name} was not found in {where} (pybox does not search $PATH). Install it with "
        f"`{INSTALL_COMMAND}`, or name a trusted executable explicitly."
    )
