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
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from pybox._boxes.handshake import program_payload
from pybox._core import wire
from pybox._core.errors import InvalidRequest
from pybox._core.limits import BUILTIN_DEFAULTS
from pybox._core.request import PROGRAM_EXEC, PROGRAM_FILES, RunRequest, check_request
from pybox._core.runtimes import RUNC_CHOICE
from pybox._features.experiments.copying import pack_project
from pybox._features.experiments.project import ProjectPolicy
from pybox._features.experiments.tree import entries_from_json
from pybox._features.sandboxes import fileops
from pybox._features.sandboxes.programs import with_libraries
from pybox._inbox import bootstrap_source, inbox_program

BOOTSTRAP: dict[str, Any] = {"__name__": "pybox_bootstrap_under_test"}
exec(compile(bootstrap_source(), "bootstrap.py", "exec"), BOOTSTRAP)
parse_header = BOOTSTRAP["parse_header"]


def run(tmp_path: Path, argv: tuple[str, ...], stdin: bytes = b"") -> tuple[dict[str, Any], bytes]:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    script = tmp_path / "_pybox_files.py"
    script.write_bytes(inbox_program("sandbox_files"))
    done = subprocess.run(
        [sys.executable, "-I", "-S", str(script), *argv],  # as pybox starts it in the box
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


# -- pybox's own programs start isolated from the workspace ---------------------------

PYBOX_PROGRAMS = {
    "write": fileops.write_request("a.txt", b"x"),
    "read": fileops.read_request("a.txt", 10),
    "list": fileops.list_request(""),
    "unpack": fileops.unpack_request(".pybox-packages", b""),
    "digest": fileops.digest_request("", 10, skip_names=(".git",)),
    "pack": fileops.pack_request(("a.txt",), 10),
    "exec": fileops.exec_request(("python3", "-m", "pytest")),
}
BOX_PYTHON = "/usr/bin/python3"


def payload_header(request: RunRequest) -> dict[str, Any]:
    """The header pybox sends the box's bootstrap for `request`, as the bootstrap reads it."""
    first = next(
        program_payload(
            request,
            BUILTIN_DEFAULTS,
            python_path=BOX_PYTHON,
            collect_outputs=False,
            protocol=wire.SANDBOX,
            isolation=RUNC_CHOICE,
        )
    )
    size = int.from_bytes(first[4:8], "big")
    header: dict[str, Any] = parse_header(first[8 : 8 + size])
    return header


@pytest.mark.parametrize("name", sorted(PYBOX_PROGRAMS))
def test_pybox_s_own_programs_start_isolated_with_no_python_variables(name: str) -> None:
    # As a sandbox with installed libraries prepares them (`programs.with_libraries`).
    request = with_libraries(PYBOX_PROGRAMS[name], ("six",))
    header = payload_header(request)
    assert header["argv"] == [BOX_PYTHON, "-I", "-S", request.code_name]
    assert request.program in (PROGRAM_FILES, PROGRAM_EXEC)
    if request.program == PROGRAM_FILES:
        assert not [env for env, _ in header["env"] if env.upper().startswith("PYTHON")]
    # The bootstrap takes exactly this argv, and starts the program with these flags.
    assert BOOTSTRAP["interpreter_flags"](header["argv"], BOX_PYTHON, request.code_name) == [
        "-I",
        "-S",
    ]


def test_the_caller_s_code_and_exec_s_command_still_see_the_sandbox_s_libraries() -> None:
    caller = with_libraries(RunRequest(code=b"import six", code_name="_pybox_run.py"), ("six",))
    header = payload_header(caller)
    assert header["argv"] == [BOX_PYTHON, "_pybox_run.py"]
    assert ("PYTHONPATH", "/pybox/work/.pybox-packages") in header["env"]
    assert BOOTSTRAP["interpreter_flags"](header["argv"], BOX_PYTHON, "_pybox_run.py") == []
    # exec's wrapper starts isolated, but the command it becomes gets the environment.
    command = payload_header(with_libraries(PYBOX_PROGRAMS["exec"], ("six",)))
    assert ("PYTHONPATH", "/pybox/work/.pybox-packages") in command["env"]


@pytest.mark.parametrize(
    "argv",
    [
        [BOX_PYTHON, "-S", "_pybox_files.py"],
        [BOX_PYTHON, "-I", "_pybox_files.py"],
        [BOX_PYTHON, "-S", "-I", "_pybox_files.py"],
        [BOX_PYTHON, "-X", "importtime", "_pybox_files.py"],
        ["/tmp/python3", "-I", "-S", "_pybox_files.py"],
        [BOX_PYTHON, "-I", "-S", "other.py"],
    ],
)
def test_the_bootstrap_refuses_any_other_interpreter_argv(argv: list[str]) -> None:
    with pytest.raises(ValueError, match="not this box's Python"):
        BOOTSTRAP["interpreter_flags"](argv, BOX_PYTHON, "_pybox_files.py")


def test_the_receipt_says_whose_program_ran_and_how_it_started() -> None:
    request = PYBOX_PROGRAMS["list"]
    assert request.interpreter_flags == ("-I", "-S")
    assert RunRequest(code=b"").interpreter_flags == ()
    with pytest.raises(InvalidRequest, match="program kind"):
        check_request(replace(request, program="root"), BUILTIN_DEFAULTS)


def test_the_file_program_works_away_from_the_workspace(tmp_path: Path) -> None:
    # It leaves the workspace as its working folder at once: paths go from WORK's descriptor.
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "here.txt").write_bytes(b"here")
    report, out = run(tmp_path, ("read", "here.txt", "100"))
    assert report == {"ok": True, "size_bytes": 4} and out == b"here"
    assert b'os.chdir("/")' in inbox_program("sandbox_files")
