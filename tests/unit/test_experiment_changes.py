"""The baseline against the box's digest, the diff shown, and the digest's checks."""

from __future__ import annotations

import hashlib
import json

import pytest

from pybox._core.errors import SandboxError
from pybox._features.experiments.changes import ChangeSet, diff_trees, render_diff
from pybox._features.experiments.tree import TreeEntry, entries_from_json, entries_to_json


def file(path: str, data: bytes, mode: int = 0o644) -> TreeEntry:
    return TreeEntry(path, "file", len(data), mode, hashlib.sha256(data).hexdigest())


def folder(path: str) -> TreeEntry:
    return TreeEntry(path, "folder", 0, 0o755, "")


def link(path: str, target: str) -> TreeEntry:
    data = target.encode()
    return TreeEntry(path, "link", len(data), 0o777, hashlib.sha256(data).hexdigest(), target)


OLD = {"a.py": b"one\ntwo\nthree\n", "gone.txt": b"bye\n", "run.sh": b"#!/bin/sh\n"}
NEW = {"a.py": b"one\n2\nthree\n", "new.txt": b"hello", "run.sh": b"#!/bin/sh\n"}


def trees() -> tuple[list[TreeEntry], list[TreeEntry]]:
    baseline = [file(p, d) for p, d in OLD.items()] + [link("l", "a.py"), folder("empty")]
    current = [
        file("a.py", NEW["a.py"]),
        file("new.txt", NEW["new.txt"]),
        file("run.sh", NEW["run.sh"], 0o755),
        link("l", "new.txt"),
        folder("made"),
        folder("full"),
        file("full/x", b""),
    ]
    return baseline, current


def test_created_modified_and_deleted_with_the_folder_rule() -> None:
    changes = diff_trees(*trees())
    assert [c.path for c in changes.created] == ["full/x", "made", "new.txt"]
    assert [c.path for c in changes.modified] == ["a.py", "l", "run.sh"]
    assert [c.path for c in changes.deleted] == ["empty", "gone.txt"]
    assert changes.stats() == {"created": 3, "modified": 3, "deleted": 2, "total": 8}
    assert json.loads(json.dumps(changes.to_dict()))["stats"]["total"] == 8


def test_an_unchanged_tree_and_a_folder_s_mode_are_no_change() -> None:
    baseline, _ = trees()
    chmodded = [
        TreeEntry("empty", "folder", 0, 0o700, "") if e.path == "empty" else e for e in baseline
    ]
    assert diff_trees(baseline, chmodded) == ChangeSet()


def test_the_diff_is_git_style_and_counts_lines() -> None:
    changes = diff_trees(*trees())
    diff = render_diff(changes, OLD.get, {**NEW, "full/x": b""}.get)
    assert diff.text == (
        "diff --git a/a.py b/a.py\n"
        "--- a/a.py\n"
        "+++ b/a.py\n"
        "@@ -1,3 +1,3 @@\n"
        " one\n"
        "-two\n"
        "+2\n"
        " three\n"
        "diff --git a/full/x b/full/x\n"
        "new file mode 100644\n"
        "diff --git a/gone.txt b/gone.txt\n"
        "deleted file mode 100644\n"
        "--- a/gone.txt\n"
        "+++ /dev/null\n"
        "@@ -1 +0,0 @@\n"
        "-bye\n"
        "diff --git a/l b/l\n"
        "--- a/l\n"
        "+++ b/l\n"
        "@@ -1 +1 @@\n"
        "-a.py\n"
        "\\ No newline at end of file\n"
        "+new.txt\n"
        "\\ No newline at end of file\n"
        "diff --git a/new.txt b/new.txt\n"
        "new file mode 100644\n"
        "--- /dev/null\n"
        "+++ b/new.txt\n"
        "@@ -0,0 +1 @@\n"
        "+hello\n"
        "\\ No newline at end of file\n"
        "diff --git a/run.sh b/run.sh\n"
        "old mode 100644\n"
        "new mode 100755\n"
    )
    assert (diff.lines_added, diff.lines_removed, diff.truncated) == (3, 3, False)


def test_an_added_line_that_looks_like_a_header_is_counted() -> None:
    changes = diff_trees([file("x", b"")], [file("x", b"++ not a header\n")])
    diff = render_diff(changes, lambda p: b"", lambda p: b"++ not a header\n")
    assert "+++ not a header\n" in diff.text and diff.lines_added == 1


def test_binary_large_and_missing_contents_are_summarised() -> None:
    blob = b"\x00\x01binary"
    latin = "caf\xe9".encode("latin-1")
    baseline = [file("blob", b"x"), file("big", b"a" * 50), file("gone", b"g")]
    current = [file("blob", blob), file("big", b"b" * 60), file("gone", b"h"), file("latin", latin)]
    contents = {"blob": blob, "latin": latin}
    diff = render_diff(
        diff_trees(baseline, current),
        lambda p: b"x" if p == "blob" else None,
        contents.get,
        max_file_bytes=40,
    )
    assert "Binary files a/blob and b/blob differ (1 -> 8 bytes)\n" in diff.text
    assert "Binary files /dev/null and b/latin differ (0 -> 4 bytes)\n" in diff.text
    assert "File big is too large to diff (50 -> 60 bytes); the limit is 40 bytes.\n" in diff.text
    assert "File gone: contents not available (1 -> 1 bytes).\n" in diff.text
    assert diff.binary == ("blob", "latin")


def test_the_diff_is_bounded_with_a_marker() -> None:
    old = {f"f{i:02}": b"line\n" * 50 for i in range(20)}
    new = {path: b"other\n" * 50 for path in old}
    changes = diff_trees([file(p, d) for p, d in old.items()], [file(p, d) for p, d in new.items()])
    diff = render_diff(changes, old.get, new.get, max_bytes=2000)
    assert diff.truncated and len(diff.text.encode()) < 2200
    assert diff.text.endswith(
        "changed files not shown in full. Ask for fewer paths to see the rest.]\n"
    )
    assert "[pybox: diff truncated at 2000 bytes; 18 of 20" in diff.text
    assert diff.lines_removed == diff.text.count("\n-line")


def test_control_characters_in_a_path_are_escaped() -> None:
    changes = diff_trees([], [file("evil\n+++ b/x", b"")])
    diff = render_diff(changes, lambda p: None, lambda p: b"")
    assert diff.text.startswith("diff --git a/evil\\x0a+++ b/x b/evil\\x0a+++ b/x\n")


def test_entries_round_trip_through_the_digest_format() -> None:
    _, current = trees()
    assert entries_from_json(entries_to_json(tuple(current)), 100) == tuple(current)


GOOD = {
    "path": "a",
    "kind": "file",
    "size_bytes": 1,
    "mode": 0o644,
    "sha256": "0" * 64,
    "link_target": None,
}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"path": "/etc/passwd"}, "not a plain relative path"),
        ({"path": "a/../b"}, "not a plain relative path"),
        ({"path": ""}, "not a plain relative path"),
        ({"kind": "fifo"}, "kind 'fifo'"),
        ({"size_bytes": -1}, "size"),
        ({"size_bytes": True}, "size"),
        ({"mode": 0o70000}, "mode"),
        ({"sha256": "xyz"}, "malformed sha256"),
        ({"link_target": "b"}, "link target"),
        ({"kind": "link", "link_target": None}, "without a target"),
        ({"kind": "folder"}, "folder with"),
        ({"extra": 1}, "exactly the fields"),
    ],
)
def test_a_malformed_digest_is_refused(change: dict[str, object], message: str) -> None:
    with pytest.raises(SandboxError, match=message):
        entries_from_json(json.dumps([{**GOOD, **change}]).encode(), 10)


def test_a_digest_s_shape_and_size_are_checked() -> None:
    with pytest.raises(SandboxError, match="not JSON"):
        entries_from_json(b"[", 10)
    with pytest.raises(SandboxError, match="a dict, not a list"):
        entries_from_json(b"{}", 10)
    with pytest.raises(SandboxError, match="listed 2 entries; at most 1"):
        entries_from_json(json.dumps([GOOD, {**GOOD, "path": "b"}]).encode(), 1)
    with pytest.raises(SandboxError, match="listed twice"):
        entries_from_json(json.dumps([GOOD, GOOD]).encode(), 10)
    odd = {**GOOD, "path": "bad\nname", "sha256": ""}  # unreadable in the box: sha256 ""
    assert entries_from_json(json.dumps([odd]).encode(), 10)[0].path == "bad\nname"
