"""pybox's in-box file program (`_inbox/sandbox_files.py`): unpack with modes and
links, digest, pack. Run as a subprocess against a temporary workspace, as the
box runs it (the script removes itself, so each run gets its own copy)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest

from pybox._features.experiments.copying import pack_project
from pybox._features.experiments.project import ProjectPolicy
from pybox._features.experiments.tree import entries_from_json
from pybox._features.sandboxes import fileops
from pybox._inbox import inbox_program


def run(tmp_path: Path, argv: tuple[str, ...], stdin: bytes = b"") -> tuple[dict[str, Any], bytes]:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    script = tmp_path / "_pybox_files.py"
    script.write_bytes(inbox_program("sandbox_files"))
    done = subprocess.run(
        [sys.executable, "-I", str(script), *argv],
        input=stdin,
        capture_output=True,
        env={"PYBOX_WORK_DIR": str(work), "PATH": os.environ.get("PATH", "")},
        timeout=60,
        check=False,
    )
    report = json.loads(done.stderr.decode().splitlines()[-1])
    assert done.returncode == (0 if report["ok"] else 3), done.stderr
    assert not script.exists()
    return report, done.stdout


def tar_of(members: list[tuple[tarfile.TarInfo, bytes | None]]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as archive:
        for member, data in members:
            if data is not None:
                member.size = len(data)
            archive.addfile(member, io.BytesIO(data) if data is not None else None)
    return out.getvalue()


def member(
    name: str, kind: bytes = tarfile.REGTYPE, mode: int = 0o644, link: str = ""
) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.linkname = kind, mode, link
    return info


def test_a_packed_project_unpacks_with_modes_and_links_and_digests_as_its_baseline(
    tmp_path: Path,
) -> None:
    project = tmp_path / "project"
    (project / "bin").mkdir(parents=True)
    (project / "bin" / "tool").write_text("#!/bin/sh\n")
    (project / "bin" / "tool").chmod(0o755)
    (project / "ro.txt").write_text("read only")
    (project / "ro.txt").chmod(0o444)
    (project / "locked").mkdir()
    (project / "locked" / "in.txt").write_text("inside")
    (project / "locked").chmod(0o555)
    (project / "link").symlink_to("bin/tool")
    out = io.BytesIO()
    copy = pack_project(project, ProjectPolicy(allowed_roots=(project,)), out)
    (project / "locked").chmod(0o755)

    report, _ = run(tmp_path, fileops.unpack_request("proj", out.getvalue()).argv, out.getvalue())
    assert report == {"ok": True, "files": 4}
    work = tmp_path / "work" / "proj"
    assert (work / "bin" / "tool").stat().st_mode & 0o777 == 0o755
    assert (work / "ro.txt").stat().st_mode & 0o777 == 0o444
    assert (work / "locked").stat().st_mode & 0o777 == 0o755  # 0o555, usable by its owner
    assert os.readlink(work / "link") == "bin/tool"

    request = fileops.digest_request("proj", 100)
    report, listing = run(tmp_path, request.argv)
    assert report == {"ok": True, "entries": len(copy.entries), "complete": True}
    assert entries_from_json(listing, 100) == copy.entries


def test_digest_stops_at_its_limit_and_leaves_out_skipped_names(tmp_path: Path) -> None:
    work = tmp_path / "work"
    (work / "node_modules").mkdir(parents=True)
    for name in "abc":
        (work / name).write_text(name)
    os.mkfifo(work / "pipe")
    report, listing = run(tmp_path, fileops.digest_request("", 2, ("node_*",)).argv)
    assert report["complete"] is False and [e["path"] for e in json.loads(listing)] == ["a", "b"]
    report, listing = run(tmp_path, fileops.digest_request("", 10, ("node_*",)).argv)
    assert report["complete"] is True
    assert [e["path"] for e in json.loads(listing)] == ["a", "b", "c"]  # no fifo either


@pytest.mark.parametrize(
    ("link", "target"),
    [("evil", "/etc/passwd"), ("evil", "../outside"), ("sub/evil", "../../x"), ("evil", "")],
)
def test_links_that_leave_the_workspace_are_refused(tmp_path: Path, link: str, target: str) -> None:
    raw = tar_of([(member(link, tarfile.SYMTYPE, 0o777, target), None)])
    report, _ = run(tmp_path, ("unpack", ""), raw)
    assert report["ok"] is False and report["error"] == "bad_archive"
    assert not os.path.lexists(tmp_path / "work" / link)


def test_a_file_is_never_written_through_a_link_from_the_same_archive(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    raw = tar_of(
        [
            (member("up", tarfile.SYMTYPE, 0o777, "."), None),
            (member("up/x.txt"), b"through the link"),
        ]
    )
    report, _ = run(tmp_path, ("unpack", ""), raw)
    assert report["ok"] is False and report["error"] == "link"


def test_hard_links_are_still_refused(tmp_path: Path) -> None:
    raw = tar_of([(member("a"), b"x"), (member("b", tarfile.LNKTYPE, link="a"), None)])
    report, _ = run(tmp_path, ("unpack", ""), raw)
    assert report["ok"] is False and report["error"] == "bad_archive"


def test_pack_returns_the_named_files_and_refuses_links_and_size(tmp_path: Path) -> None:
    work = tmp_path / "work"
    (work / "sub").mkdir(parents=True)
    (work / "sub" / "a.txt").write_text("alpha")
    (work / "run.sh").write_text("#!/bin/sh\n")
    (work / "run.sh").chmod(0o755)
    (work / "link").symlink_to("sub")
    request = fileops.pack_request(("sub/a.txt", "run.sh"), 100)
    report, raw = run(tmp_path, request.argv, request.stdin_bytes)
    assert report == {"ok": True, "files": 2, "size_bytes": 15}
    with tarfile.open(fileobj=io.BytesIO(raw), mode="r:") as archive:
        found = {m.name: (m.mode, archive.extractfile(m).read()) for m in archive}  # type: ignore[union-attr]
    assert found == {"sub/a.txt": (0o644, b"alpha"), "run.sh": (0o755, b"#!/bin/sh\n")}

    request = fileops.pack_request(("link/a.txt",), 100)
    assert run(tmp_path, request.argv, request.stdin_bytes)[0]["error"] == "link"
    request = fileops.pack_request(("sub/a.txt", "run.sh"), 10)
    report, raw = run(tmp_path, request.argv, request.stdin_bytes)
    assert report["error"] == "too_big" and raw == b""
    request = fileops.pack_request(("../x",), 10)
    assert run(tmp_path, request.argv, request.stdin_bytes)[0]["error"] == "outside"
