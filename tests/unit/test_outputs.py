"""Returned files: checked, capped, staged, then published in one rename."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import pytest

from pybox._boxes.outputs import (
    MAX_PATH_BYTES,
    MAX_PATH_DEPTH,
    FilesReceiver,
    ReturnedFile,
    discard,
    prepare_destination,
    publish,
    stage_destination,
    stage_private,
    sweep_stale_staging,
)
from pybox._core.errors import InvalidRequest, PyboxError
from pybox._core.receipt import ReturnedFileDigest, SkippedFile
from pybox._core.wire import MAX_SKIPPED_LISTED, ProtocolError


@pytest.fixture
def root(tmp_path: Path) -> Path:
    path = tmp_path / "staging"
    path.mkdir()
    return path


def receiver(root: Path, max_files: int = 100, max_bytes: int = 1 << 20) -> FilesReceiver:
    return FilesReceiver(root, max_files, max_bytes)


def send(rx: FilesReceiver, path: str, data: bytes, chunk: int = 3) -> None:
    rx.begin({"path": path, "size": len(data)})
    for start in range(0, len(data), chunk):
        rx.data(data[start : start + chunk])


def tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# --- FilesReceiver: good files -----------------------------------------------------------


def test_valid_files_are_written_with_their_digest(root: Path) -> None:
    rx = receiver(root)
    send(rx, "out.txt", b"hello world")
    send(rx, "data/deep/nested/result.bin", bytes(range(256)), chunk=100)
    assert rx.close()
    assert rx.files == [
        ReturnedFile("out.txt", 11, sha(b"hello world")),
        ReturnedFile("data/deep/nested/result.bin", 256, sha(bytes(range(256)))),
    ]
    assert rx.skipped == []
    assert tree(root) == {
        "out.txt": b"hello world",
        "data/deep/nested/result.bin": bytes(range(256)),
    }
    assert rx.digests() == (
        ReturnedFileDigest("out.txt", 11, sha(b"hello world")),
        ReturnedFileDigest("data/deep/nested/result.bin", 256, sha(bytes(range(256)))),
    )


def test_written_files_are_not_executable(root: Path) -> None:
    rx = receiver(root)
    send(rx, "run.sh", b"#!/bin/sh\n")
    mode = (root / "run.sh").stat().st_mode
    assert stat.S_ISREG(mode)
    assert not mode & 0o111


def test_zero_size_file_is_complete_at_once(root: Path) -> None:
    rx = receiver(root)
    rx.begin({"path": "empty", "size": 0})
    assert rx.files == [ReturnedFile("empty", 0, sha(b""))]
    assert (root / "empty").read_bytes() == b""
    send(rx, "after", b"x")  # the next header is accepted straight away
    assert rx.close()
    assert [f.path for f in rx.files] == ["empty", "after"]


def test_file_is_only_listed_when_all_its_bytes_arrived(root: Path) -> None:
    rx = receiver(root)
    rx.begin({"path": "a", "size": 6})
    rx.data(b"abc")
    assert rx.files == []
    rx.data(b"def")
    assert rx.files == [ReturnedFile("a", 6, sha(b"abcdef"))]


def test_unicode_and_odd_but_safe_names_are_kept(root: Path) -> None:
    rx = receiver(root)
    for name in ("naïve ☃.txt", "...", ".hidden", "a b/c-d_e"):
        send(rx, name, name.encode())
    assert rx.skipped == []
    assert len(rx.files) == 4
    assert (root / "naïve ☃.txt").read_bytes() == "naïve ☃.txt".encode()


# --- FilesReceiver: unsafe paths -------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("", "empty or too long path"),
        ("x" * (MAX_PATH_BYTES + 1), "empty or too long path"),
        ("/".join(["d"] * (MAX_PATH_DEPTH + 1)), "too deeply nested"),
        ("../x", "path with an empty or dot component"),
        ("a/../../x", "path with an empty or dot component"),
        ("..", "path with an empty or dot component"),
        (".", "path with an empty or dot component"),
        ("./a", "path with an empty or dot component"),
        ("a/.", "path with an empty or dot component"),
        ("a//b", "path with an empty or dot component"),
        ("/etc/passwd", "path with an empty or dot component"),
        ("a/", "path with an empty or dot component"),
        ("a\nb", "control characters in the name"),
        ("a/b\x00c", "control characters in the name"),
        ("\x1b[2J", "control characters in the name"),
        ("del\x7f", "control characters in the name"),
        ("c1\x9b2J", "control characters in the name"),
        ("ok\u202etxt.exe", "bidirectional or invisible format characters in the name"),
        ("d/\u2066x\u2069", "bidirectional or invisible format characters in the name"),
        ("rlm\u200f.py", "bidirectional or invisible format characters in the name"),
        ("zero\u200bwidth", "bidirectional or invisible format characters in the name"),
        ("tag\U000e0041", "bidirectional or invisible format characters in the name"),
        ("line\u2028sep", "bidirectional or invisible format characters in the name"),
    ],
)
def test_unsafe_paths_are_skipped_and_their_data_dropped(
    root: Path, path: str, reason: str
) -> None:
    rx = receiver(root)
    send(rx, path, b"secret payload")
    assert rx.skipped == [SkippedFile(path, reason)]
    assert rx.files == []
    send(rx, "after.txt", b"ok")  # the stream stays in step after a skipped file
    assert rx.close()
    assert tree(root) == {"after.txt": b"ok"}
    assert not (root.parent / "x").exists()


def test_deepest_allowed_path_is_kept(root: Path) -> None:
    path = "/".join(["d"] * MAX_PATH_DEPTH)
    rx = receiver(root)
    send(rx, path, b"deep")
    assert rx.skipped == []
    assert (root / path).read_bytes() == b"deep"


def test_duplicate_path_is_skipped_and_the_first_kept(root: Path) -> None:
    rx = receiver(root)
    send(rx, "a.txt", b"first")
    send(rx, "a.txt", b"second!")
    assert rx.close()
    assert rx.files == [ReturnedFile("a.txt", 5, sha(b"first"))]
    assert rx.skipped == [SkippedFile("a.txt", "duplicate path")]
    assert (root / "a.txt").read_bytes() == b"first"


def test_file_then_directory_of_the_same_name_is_skipped(root: Path) -> None:
    rx = receiver(root)
    send(rx, "a", b"file")
    send(rx, "a/b", b"under a file")
    send(rx, "c", b"still fine")
    assert rx.close()
    assert [f.path for f in rx.files] == ["a", "c"]
    assert len(rx.skipped) == 1
    assert rx.skipped[0].path == "a/b"
    assert rx.skipped[0].reason.startswith("cannot be stored")
    assert (root / "a").read_bytes() == b"file"


def test_directory_then_file_of_the_same_name_is_skipped(root: Path) -> None:
    rx = receiver(root)
    send(rx, "a/b", b"inside")
    send(rx, "a", b"clash")
    assert rx.close()
    assert [f.path for f in rx.files] == ["a/b"]
    assert [s.path for s in rx.skipped] == ["a"]
    assert (root / "a" / "b").read_bytes() == b"inside"


def test_a_symlink_planted_in_staging_is_not_followed(root: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"untouched")
    (root / "link").symlink_to(outside)
    rx = receiver(root)
    send(rx, "link", b"overwrite")
    assert [s.path for s in rx.skipped] == ["link"]
    assert outside.read_bytes() == b"untouched"


# --- FilesReceiver: caps ---------------------------------------------------------------------


def test_count_cap(root: Path) -> None:
    rx = receiver(root, max_files=2)
    for name in ("a", "b", "c", "d"):
        send(rx, name, name.encode())
    assert rx.close()
    assert [f.path for f in rx.files] == ["a", "b"]
    assert rx.skipped == [
        SkippedFile("c", "over the returned-files count cap"),
        SkippedFile("d", "over the returned-files count cap"),
    ]
    assert tree(root) == {"a": b"a", "b": b"b"}


def test_zero_count_cap_keeps_nothing(root: Path) -> None:
    rx = receiver(root, max_files=0)
    send(rx, "a", b"x")
    assert rx.files == []
    assert tree(root) == {}


def test_byte_cap(root: Path) -> None:
    rx = receiver(root, max_bytes=10)
    send(rx, "a", b"123456")
    send(rx, "b", b"12345")  # 11 > 10
    send(rx, "c", b"1234")  # exactly 10
    send(rx, "d", b"")  # still fits
    assert rx.close()
    assert [f.path for f in rx.files] == ["a", "c", "d"]
    assert rx.skipped == [SkippedFile("b", "over the returned-bytes cap")]
    assert tree(root) == {"a": b"123456", "c": b"1234", "d": b""}


def test_skipped_files_do_not_use_up_the_caps(root: Path) -> None:
    rx = receiver(root, max_files=1, max_bytes=5)
    send(rx, "../bad", b"123456789")
    send(rx, "good", b"12345")
    assert [f.path for f in rx.files] == ["good"]


# --- FilesReceiver: protocol errors ------------------------------------------------------------


def test_more_data_than_announced_is_a_protocol_error(root: Path) -> None:
    rx = receiver(root)
    rx.begin({"path": "a", "size": 3})
    with pytest.raises(ProtocolError):
        rx.data(b"abcd")


def test_more_data_than_announced_for_a_skipped_file_is_a_protocol_error(root: Path) -> None:
    rx = receiver(root)
    rx.begin({"path": "../a", "size": 3})
    rx.data(b"ab")
    with pytest.raises(ProtocolError):
        rx.data(b"cd")


def test_data_without_a_header_is_a_protocol_error(root: Path) -> None:
    rx = receiver(root)
    with pytest.raises(ProtocolError):
        rx.data(b"x")


def test_data_after_a_complete_file_is_a_protocol_error(root: Path) -> None:
    rx = receiver(root)
    send(rx, "a", b"abc")
    with pytest.raises(ProtocolError):
        rx.data(b"d")


def test_new_header_before_the_previous_file_finished_is_a_protocol_error(root: Path) -> None:
    rx = receiver(root)
    rx.begin({"path": "a", "size": 10})
    rx.data(b"12345")
    with pytest.raises(ProtocolError) as info:
        rx.begin({"path": "b", "size": 1})
    assert "before finishing" in str(info.value)


def test_new_header_before_a_skipped_file_finished_is_a_protocol_error(root: Path) -> None:
    rx = receiver(root)
    rx.begin({"path": "a//b", "size": 4})
    with pytest.raises(ProtocolError):
        rx.begin({"path": "c", "size": 1})


@pytest.mark.parametrize(
    "header",
    [
        {},
        {"path": "a"},
        {"size": 1},
        {"path": 5, "size": 1},
        {"path": None, "size": 1},
        {"path": "a", "size": -1},
        {"path": "a", "size": "1"},
        {"path": "a", "size": 1.0},
        {"path": ["a"], "size": 1},
    ],
    ids=repr,
)
def test_unreadable_headers_are_protocol_errors(root: Path, header: dict[str, object]) -> None:
    with pytest.raises(ProtocolError) as info:
        receiver(root).begin(header)
    assert "unreadable file header" in str(info.value)


def test_close_after_an_incomplete_file_deletes_it(root: Path) -> None:
    rx = receiver(root)
    send(rx, "whole", b"ok")
    rx.begin({"path": "partial", "size": 10})
    rx.data(b"abc")
    assert rx.close() is False
    assert rx.files == [ReturnedFile("whole", 2, sha(b"ok"))]
    assert SkippedFile("partial", "arrived incomplete; not kept") in rx.skipped
    assert tree(root) == {"whole": b"ok"}


def test_close_after_an_incomplete_skipped_file_reports_incomplete(root: Path) -> None:
    rx = receiver(root)
    rx.begin({"path": "../x", "size": 10})
    assert rx.close() is False


def test_close_when_everything_arrived(root: Path) -> None:
    rx = receiver(root)
    assert rx.close() is True
    send(rx, "a", b"abc")
    assert rx.close() is True
    assert rx.close() is True  # closing twice is harmless


# --- prepare_destination -------------------------------------------------------------------------


def staging_dirs(parent: Path) -> list[Path]:
    return sorted(parent.glob(".pybox-staging-*"))


def test_new_destination_gets_a_staging_dir_beside_it(tmp_path: Path) -> None:
    destination = tmp_path / "out"
    staging = prepare_destination(destination)
    assert staging.is_dir()
    assert staging.parent == tmp_path
    assert staging.name.startswith(".pybox-staging-")
    assert list(staging.iterdir()) == []
    assert not destination.exists()  # nothing is created at the destination yet
    assert staging_dirs(tmp_path) == [staging]


def test_empty_existing_destination_is_fine(tmp_path: Path) -> None:
    destination = tmp_path / "out"
    destination.mkdir()
    staging = prepare_destination(destination)
    assert staging.parent == tmp_path
    assert staging != destination


def test_relative_destination_puts_staging_beside_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    staging = prepare_destination(Path("out"))
    assert staging.parent == tmp_path


def test_non_empty_destination_is_refused(tmp_path: Path) -> None:
    destination = tmp_path / "out"
    destination.mkdir()
    (destination / ".keep").write_text("")
    with pytest.raises(InvalidRequest) as info:
        prepare_destination(destination)
    assert "not empty" in str(info.value)
    assert str(destination) in str(info.value)
    assert staging_dirs(tmp_path) == []


def test_file_destination_is_refused(tmp_path: Path) -> None:
    destination = tmp_path / "out"
    destination.write_text("x")
    with pytest.raises(InvalidRequest) as info:
        prepare_destination(destination)
    assert "not a directory" in str(info.value)
    assert staging_dirs(tmp_path) == []


@pytest.mark.parametrize("target", ["empty-dir", "missing"])
def test_symlink_destination_is_refused(tmp_path: Path, target: str) -> None:
    if target == "empty-dir":
        (tmp_path / target).mkdir()
    destination = tmp_path / "out"
    destination.symlink_to(tmp_path / target)
    with pytest.raises(InvalidRequest) as info:
        prepare_destination(destination)
    assert "symbolic link" in str(info.value)
    assert staging_dirs(tmp_path) == []


def test_missing_parent_is_refused(tmp_path: Path) -> None:
    destination = tmp_path / "no" / "such" / "out"
    with pytest.raises(InvalidRequest) as info:
        prepare_destination(destination)
    assert str(tmp_path / "no" / "such") in str(info.value)
    assert "does not exist" in str(info.value)
    assert not (tmp_path / "no").exists()


# --- publish and discard -------------------------------------------------------------------------


def staged_with_files(tmp_path: Path, destination: Path) -> Path:
    staging = prepare_destination(destination)
    rx = receiver(staging)
    send(rx, "a.txt", b"A")
    send(rx, "sub/b.txt", b"B")
    assert rx.close()
    return staging


def test_publish_onto_a_new_destination(tmp_path: Path) -> None:
    destination = tmp_path / "out"
    staging = staged_with_files(tmp_path, destination)
    assert publish(staging, destination) == destination
    assert tree(destination) == {"a.txt": b"A", "sub/b.txt": b"B"}
    assert not staging.exists()
    assert staging_dirs(tmp_path) == []
    assert stat.S_IMODE(destination.stat().st_mode) == 0o755


def test_publish_onto_an_empty_destination(tmp_path: Path) -> None:
    destination = tmp_path / "out"
    destination.mkdir()
    staging = staged_with_files(tmp_path, destination)
    publish(staging, destination)
    assert tree(destination) == {"a.txt": b"A", "sub/b.txt": b"B"}
    assert not staging.exists()


def test_publish_moves_the_directory_itself(tmp_path: Path) -> None:
    destination = tmp_path / "out"
    staging = staged_with_files(tmp_path, destination)
    inode = os.stat(staging).st_ino
    publish(staging, destination)
    assert os.stat(destination).st_ino == inode  # one rename, not a copy


def test_publish_refuses_a_destination_that_became_non_empty(tmp_path: Path) -> None:
    destination = tmp_path / "out"
    staging = staged_with_files(tmp_path, destination)
    destination.mkdir()
    (destination / "theirs.txt").write_bytes(b"keep me")
    with pytest.raises(PyboxError) as info:
        publish(staging, destination)
    message = str(info.value)
    assert str(staging) in message
    assert str(destination) in message
    assert "Nothing was overwritten" in message
    assert tree(destination) == {"theirs.txt": b"keep me"}
    assert tree(staging) == {"a.txt": b"A", "sub/b.txt": b"B"}


def test_publish_refuses_a_destination_that_became_a_file(tmp_path: Path) -> None:
    destination = tmp_path / "out"
    staging = staged_with_files(tmp_path, destination)
    destination.write_bytes(b"a file")
    with pytest.raises(PyboxError) as info:
        publish(staging, destination)
    assert str(staging) in str(info.value)
    assert destination.read_bytes() == b"a file"
    assert tree(staging) == {"a.txt": b"A", "sub/b.txt": b"B"}


def test_discard_removes_staging_and_everything_in_it(tmp_path: Path) -> None:
    destination = tmp_path / "out"
    staging = staged_with_files(tmp_path, destination)
    discard(staging)
    assert not staging.exists()
    assert not destination.exists()
    assert list(tmp_path.iterdir()) == []


def test_discard_of_a_missing_directory_is_harmless(tmp_path: Path) -> None:
    discard(tmp_path / "never-made")
    assert list(tmp_path.iterdir()) == []


# --- staging folders of a killed pybox (issue 12) ------------------------------------

DEAD = "host-a:4242:777"
ALIVE = "host-a:4343:888"


def alive(owner: str) -> bool | None:
    return {DEAD: False, ALIVE: True}.get(owner)


def test_staging_is_named_after_its_owner(tmp_path: Path) -> None:
    staged = stage_destination(tmp_path / "out", owner=ALIVE, alive=alive)
    assert staged.staging.parent == tmp_path
    assert staged.staging.name.startswith(f".pybox-staging-{ALIVE}-")
    assert staged.swept == ()


def test_stale_staging_of_a_dead_owner_is_swept_at_the_next_run(tmp_path: Path) -> None:
    stale = tmp_path / f".pybox-staging-{DEAD}-abcd1234"
    (stale / "deep" / "er").mkdir(parents=True)
    (stale / "deep" / "er" / "half.bin").write_bytes(b"untrusted")
    (stale / "link").symlink_to(tmp_path / "keep.txt")
    (tmp_path / "keep.txt").write_text("mine")
    live = tmp_path / f".pybox-staging-{ALIVE}-efgh5678"
    live.mkdir()
    unknown = tmp_path / ".pybox-staging-otherhost:1:2-ijkl9012"
    unknown.mkdir()
    old_style = tmp_path / ".pybox-staging-k3j4h5g6"
    old_style.mkdir()
    staged = stage_destination(tmp_path / "out", owner=ALIVE, alive=alive)
    assert staged.swept == (stale,)
    assert not stale.exists()
    assert (tmp_path / "keep.txt").read_text() == "mine"  # the link was not followed
    assert live.is_dir() and unknown.is_dir() and old_style.is_dir()


def test_private_staging_is_named_after_its_owner_and_sweeps_its_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Returned files without a destination (the API's in memory, an MCP server's kept
    # files) go to the temporary folder: a killed pybox's are removed there too.
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    stale = tmp_path / f".pybox-staging-{DEAD}-abcd1234"
    (stale / "run").mkdir(parents=True)
    (stale / "run" / "big.bin").write_bytes(b"untrusted")
    live = tmp_path / f".pybox-staging-{ALIVE}-efgh5678"
    live.mkdir()
    staged = stage_private(owner=ALIVE, alive=alive)
    assert staged.staging.parent == tmp_path
    assert staged.staging.name.startswith(f".pybox-staging-{ALIVE}-")
    assert staged.swept == (stale,) and not stale.exists() and live.is_dir()


def test_a_link_named_like_stale_staging_is_left_alone(tmp_path: Path) -> None:
    target = tmp_path / "precious"
    target.mkdir()
    (target / "file").write_text("keep")
    (tmp_path / f".pybox-staging-{DEAD}-abcd1234").symlink_to(target)
    assert sweep_stale_staging(tmp_path, alive) == ()
    assert (target / "file").read_text() == "keep"


def test_a_file_named_like_stale_staging_is_left_alone(tmp_path: Path) -> None:
    (tmp_path / f".pybox-staging-{DEAD}-abcd1234").write_text("not a folder")
    assert sweep_stale_staging(tmp_path, alive) == ()


def test_receiver_lists_the_first_skipped_files_and_counts_the_rest(root: Path) -> None:
    rx = receiver(root, max_files=0)
    for i in range(MAX_SKIPPED_LISTED + 25):
        send(rx, f"f{i}", b"x")
    assert len(rx.skipped) == MAX_SKIPPED_LISTED
    assert rx.skipped_more == 25
