"""What changed between the baseline and the box's digest, and the diff to show (pure).

The rules of `diff_trees`:

- a path in both trees is *modified* when its kind changed, or (files) its
  sha256, size or permission bits changed, or (links) its target changed. A
  link's own mode is not compared (the kernel decides it); a folder's mode
  is not compared either;
- a folder matters only when it is created or deleted *empty*: one with
  entries under it is said by those entries;
- each group is sorted by path, so the same trees always give the same set.

`render_diff` writes a git-style unified diff (`diff --git`, mode lines,
`--- a/x` / `+++ b/x`, `/dev/null` for a created or deleted side, three lines
of context, `\\ No newline at end of file`), in path order. A link's content is
its target. A file with a NUL byte or bytes that are not UTF-8 is summarised
as `Binary files a/x and b/x differ (N -> M bytes)`; a file above
`max_file_bytes`, or one whose bytes are not available, gets a one-line
summary too. The whole text is at most `max_bytes`; past that it is cut at a
line and ends with a `[pybox: diff truncated ...]` marker, and the line counts
cover the shown part only. Paths are shown with control characters escaped.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from pybox._features.experiments.tree import TreeEntry, printable

KIB = 1024
MIB = 1024 * KIB
CHANGES = ("created", "modified", "deleted")


@dataclass(frozen=True)
class FileChange:
    path: str
    change: str  # "created", "modified" or "deleted"
    old: TreeEntry | None
    new: TreeEntry | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "change": self.change,
            "old": self.old.to_dict() if self.old else None,
            "new": self.new.to_dict() if self.new else None,
        }


@dataclass(frozen=True)
class ChangeSet:
    created: tuple[FileChange, ...] = ()
    modified: tuple[FileChange, ...] = ()
    deleted: tuple[FileChange, ...] = ()

    def stats(self) -> dict[str, int]:
        return {
            "created": len(self.created),
            "modified": len(self.modified),
            "deleted": len(self.deleted),
            "total": len(self.created) + len(self.modified) + len(self.deleted),
        }

    def all(self) -> tuple[FileChange, ...]:
        """Every change, in path order."""
        return tuple(sorted((*self.created, *self.modified, *self.deleted), key=_path_key))

    def to_dict(self) -> dict[str, Any]:
        return {
            "stats": self.stats(),
            **{name: [change.to_dict() for change in getattr(self, name)] for name in CHANGES},
        }


@dataclass(frozen=True)
class RenderedDiff:
    text: str
    lines_added: int
    lines_removed: int
    truncated: bool
    binary: tuple[str, ...]  # paths summarised as binary

    def to_dict(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "lines_added": self.lines_added,
            "lines_removed": self.lines_removed,
            "truncated": self.truncated,
            "binary": list(self.binary),
        }


def diff_trees(baseline: Iterable[TreeEntry], current: Iterable[TreeEntry]) -> ChangeSet:
    old = {entry.path: entry for entry in baseline}
    new = {entry.path: entry for entry in current}
    old_parents, new_parents = _parents(old), _parents(new)
    created = [
        FileChange(path, "created", None, entry)
        for path, entry in new.items()
        if path not in old and not (entry.kind == "folder" and path in new_parents)
    ]
    deleted = [
        FileChange(path, "deleted", entry, None)
        for path, entry in old.items()
        if path not in new and not (entry.kind == "folder" and path in old_parents)
    ]
    modified = [
        FileChange(path, "modified", entry, new[path])
        for path, entry in old.items()
        if path in new and _differs(entry, new[path])
    ]
    return ChangeSet(
        tuple(sorted(created, key=_path_key)),
        tuple(sorted(modified, key=_path_key)),
        tuple(sorted(deleted, key=_path_key)),
    )


def render_diff(
    changes: ChangeSet,
    old_bytes: Callable[[str], bytes | None],
    new_bytes: Callable[[str], bytes | None],
    *,
    max_bytes: int = 256 * KIB,
    max_file_bytes: int = MIB,
) -> RenderedDiff:
    """The unified diff of `changes`; `old_bytes` / `new_bytes` give a file's contents
    on either side (None: not available). Called only for files that are diffed."""
    shown: list[str] = []
    used = added = removed = 0
    binary: list[str] = []
    ordered = [c for c in changes.all() if _shown(c.old) or _shown(c.new)]
    for index, change in enumerate(ordered):
        lines, is_binary = _file_lines(change, old_bytes, new_bytes, max_file_bytes)
        if is_binary:
            binary.append(change.path)
        for line, sign in lines:
            size = len(line.encode("utf-8", "replace"))
            if used + size > max_bytes:
                left = len(ordered) - index
                shown.append(
                    f"[pybox: diff truncated at {max_bytes} bytes; {left} of {len(ordered)} "
                    "changed files not shown in full. Ask for fewer paths to see the rest.]\n"
                )
                return RenderedDiff("".join(shown), added, removed, True, tuple(binary))
            used += size
            shown.append(line)
            added += sign == "+"
            removed += sign == "-"
    return RenderedDiff("".join(shown), added, removed, False, tuple(binary))


def _file_lines(
    change: FileChange,
    old_bytes: Callable[[str], bytes | None],
    new_bytes: Callable[[str], bytes | None],
    max_file_bytes: int,
) -> tuple[list[tuple[str, str]], bool]:
    """The file's lines, each with its sign ("+", "-", or "" for the rest)."""
    old = change.old if _shown(change.old) else None
    new = change.new if _shown(change.new) else None
    path = printable(change.path)
    a_name, b_name = (f"a/{path}" if old else "/dev/null"), (f"b/{path}" if new else "/dev/null")
    head = [f"diff --git a/{path} b/{path}\n"]
    if old is None and new is not None:
        head.append(f"new file mode {_git_mode(new)}\n")
    elif new is None and old is not None:
        head.append(f"deleted file mode {_git_mode(old)}\n")
    elif old is not None and new is not None and _git_mode(old) != _git_mode(new):
        head += [f"old mode {_git_mode(old)}\n", f"new mode {_git_mode(new)}\n"]
    lines = [(line, "") for line in head]
    if old is not None and new is not None and _same_content(old, new):
        return lines, False
    sizes = f"({old.size_bytes if old else 0} -> {new.size_bytes if new else 0} bytes)"
    if any(
        e is not None and e.kind == "file" and e.size_bytes > max_file_bytes for e in (old, new)
    ):
        summary = f"File {path} is too large to diff {sizes}; the limit is {max_file_bytes} bytes."
        return [*lines, (summary + "\n", "")], False
    before = _content(old, old_bytes, max_file_bytes)
    after = _content(new, new_bytes, max_file_bytes)
    if before is None or after is None:
        return [*lines, (f"File {path}: contents not available {sizes}.\n", "")], False
    texts = [_text(data) for data in (before, after)]
    if texts[0] is None or texts[1] is None:
        return [*lines, (f"Binary files {a_name} and {b_name} differ {sizes}\n", "")], True
    body = difflib.unified_diff(_lines(texts[0]), _lines(texts[1]), a_name, b_name)
    for index, line in enumerate(body):
        sign = line[0] if index >= 2 and line[0] in "+-" else ""
        if line.endswith("\n"):
            lines.append((line, sign))
        else:
            lines += [(line + "\n", sign), ("\\ No newline at end of file\n", "")]
    return lines, False


def _content(
    entry: TreeEntry | None, fetch: Callable[[str], bytes | None], limit: int
) -> bytes | None:
    if entry is None:
        return b""
    if entry.kind == "link":
        return (entry.link_target or "").encode("utf-8", "surrogateescape")
    data = fetch(entry.path)
    return data if data is None or len(data) <= limit else None


def _lines(text: str) -> list[str]:
    """Lines split at "\\n" only (a form feed or a lone "\\r" is part of a line)."""
    parts = text.split("\n")
    return [part + "\n" for part in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def _text(data: bytes) -> str | None:
    if b"\0" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _differs(old: TreeEntry, new: TreeEntry) -> bool:
    if old.kind != new.kind:
        return True
    if old.kind == "file":
        return (old.sha256, old.size_bytes, old.mode) != (new.sha256, new.size_bytes, new.mode)
    if old.kind == "link":
        return old.link_target != new.link_target
    return False


def _same_content(old: TreeEntry, new: TreeEntry) -> bool:
    if old.kind != new.kind:
        return False
    if old.kind == "link":
        return old.link_target == new.link_target
    return (old.sha256, old.size_bytes) == (new.sha256, new.size_bytes) and bool(old.sha256)


def _parents(tree: dict[str, TreeEntry]) -> set[str]:
    """Every folder path that has an entry under it."""
    parents: set[str] = set()
    for entry_path in tree:
        path = entry_path
        while "/" in path:
            path = path.rsplit("/", 1)[0]
            if path in parents:
                break
            parents.add(path)
    return parents


def _shown(entry: TreeEntry | None) -> bool:
    return entry is not None and entry.kind != "folder"


def _git_mode(entry: TreeEntry) -> str:
    return "120000" if entry.kind == "link" else f"{0o100000 | entry.mode:o}"


def _path_key(change: FileChange) -> str:
    return change.path
