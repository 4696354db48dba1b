"""A project tree as values: the baseline copied in, and the box's digest of it (pure).

The box's digest (`pybox/_inbox/sandbox_files.py digest`) comes from inside the
box and is untrusted: `entries_from_json` checks every field and the shape, and
refuses the whole listing on the first thing out of place.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pybox._core.errors import SandboxError

KINDS = ("file", "link", "folder")
FIELDS = ("path", "kind", "size_bytes", "mode", "sha256", "link_target")
_SHA256 = re.compile(r"[0-9a-f]{64}")
MAX_SIZE_BYTES = 1 << 62
MAX_PATH_BYTES = 4096  # the kernel's PATH_MAX: any name the box can hold


@dataclass(frozen=True)
class TreeEntry:
    path: str  # posix, relative to the project's root, no "." or ".." parts
    kind: str  # "file", "link" or "folder"
    size_bytes: int  # a file's length; a link's target length in bytes; 0 for a folder
    mode: int  # permission bits (mode & 0o7777)
    sha256: str  # of a file's bytes; of a link's target string; "" for a folder
    link_target: str | None = None  # a link's target, unchanged; None otherwise

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "kind": self.kind,
            "size_bytes": self.size_bytes,
            "mode": self.mode,
            "sha256": self.sha256,
            "link_target": self.link_target,
        }


@dataclass(frozen=True)
class Skipped:
    path: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"path": self.path, "reason": self.reason}


@dataclass(frozen=True)
class ProjectCopy:
    """What one pass over the host's project copied (the baseline) and left behind."""

    root: Path
    entries: tuple[TreeEntry, ...]
    skipped: tuple[Skipped, ...]
    file_count: int  # regular files copied
    total_bytes: int  # their bytes together

    def to_dict(self) -> dict[str, Any]:
        """A summary for a result or a record; the baseline itself is `entries_to_json`."""
        return {
            "root": str(self.root),
            "file_count": self.file_count,
            "link_count": sum(entry.kind == "link" for entry in self.entries),
            "folder_count": sum(entry.kind == "folder" for entry in self.entries),
            "total_bytes": self.total_bytes,
            "skipped": [item.to_dict() for item in self.skipped],
        }


def printable(text: str) -> str:
    """`text` safe to show on one line: undecodable bytes (surrogate escapes) and
    control characters escaped as \\xNN (or \\uNNNN)."""
    shown = []
    for char in text:
        code = ord(char)
        if 0xDC80 <= code <= 0xDCFF:
            shown.append(f"\\x{code - 0xDC00:02x}")
        elif char.isprintable():
            shown.append(char)
        else:
            shown.append(f"\\x{code:02x}" if code < 256 else f"\\u{code:04x}")
    return "".join(shown)


def entries_to_json(entries: tuple[TreeEntry, ...]) -> bytes:
    """The listing in the digest's own format (what `entries_from_json` reads)."""
    return json.dumps([entry.to_dict() for entry in entries], separators=(",", ":")).encode()


def entries_from_json(data: bytes, max_entries: int) -> tuple[TreeEntry, ...]:
    """A digest listing, checked field by field (it came from inside the box)."""
    try:
        raw = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        raise SandboxError("The box's digest of the project was not JSON.") from None
    if not isinstance(raw, list):
        raise SandboxError(
            f"The box's digest of the project was a {type(raw).__name__}, not a list of entries."
        )
    if len(raw) > max_entries:
        raise SandboxError(
            f"The box's digest of the project listed {len(raw)} entries; at most "
            f"{max_entries} were asked for."
        )
    entries = []
    seen: set[str] = set()
    for index, item in enumerate(raw):
        problem = _problem(item)
        if problem is None and item["path"] in seen:
            problem = "its path is listed twice"
        if problem is not None:
            raise SandboxError(
                f"The box's digest of the project is not usable: entry {index} {problem}."
            )
        seen.add(item["path"])
        entries.append(TreeEntry(**{name: item[name] for name in FIELDS}))
    return tuple(entries)


def _problem(item: object) -> str | None:
    if not isinstance(item, dict) or set(item) != set(FIELDS):
        return f"does not have exactly the fields {', '.join(FIELDS)}"
    path, kind, size, mode = item["path"], item["kind"], item["size_bytes"], item["mode"]
    sha, target = item["sha256"], item["link_target"]
    if not isinstance(path, str) or not _plain_path(path):
        return "has a path that is not a plain relative path"
    if kind not in KINDS:
        return f"has the kind {str(kind)[:20]!r}, not one of {', '.join(KINDS)}"
    if type(size) is not int or not 0 <= size <= MAX_SIZE_BYTES:
        return "has a size that is not a whole number of bytes"
    if type(mode) is not int or not 0 <= mode <= 0o7777:
        return "has a mode that is not permission bits"
    if not isinstance(sha, str):
        return "has a sha256 that is not a string"
    if kind == "folder" and (sha or target is not None or size):
        return "is a folder with a size, a sha256 or a link target"
    if kind == "link" and (not isinstance(target, str) or not target or not _SHA256.fullmatch(sha)):
        return "is a link without a target or its sha256"
    if kind == "link" and (
        "\0" in target or len(target.encode("utf-8", "replace")) > MAX_PATH_BYTES
    ):
        return "is a link with a target that is not a usable path"
    # A file the box could not read (the agent's code made it unreadable) has sha256 "".
    if kind == "file" and (target is not None or (sha and not _SHA256.fullmatch(sha))):
        return "is a file with a link target or a malformed sha256"
    return None


def _plain_path(path: str) -> bool:
    # Control characters are allowed: the agent's code may make such names, and one
    # odd name must not hide every change. Whoever shows a path escapes it.
    if not path or path.startswith("/") or "\0" in path:
        return False
    if len(path.encode("utf-8", "replace")) > MAX_PATH_BYTES:
        return False
    return all(part not in ("", ".", "..") for part in path.split("/"))
