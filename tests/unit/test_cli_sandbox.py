"""`pybox sandbox ...` against a stand-in for the sandboxes feature.

What is tested is the command line: its arguments, what it prints where, its
exit codes and its escaping of what came from the box. The feature itself runs
on the real engine in tests/integration/test_sandbox_fronts.py.
"""

from __future__ import annotations

import io
import json
import os
import stat
import sys
from pathlib import Path
from typing import Any

import pytest

from pybox._core.errors import SandboxBusy, SandboxError
from pybox._core.limits import MIB, LimitRequest
from pybox._features.sandboxes.fileops import SandboxFile
from pybox._features.sandboxes.records import RUN_PROGRAM
from pybox._frontends.cli import _sandbox, main
from pybox._orchestration.session import Session
from tests.unit.fake_engine import FakeEngine
from tests.unit.fake_sandboxes import FakeSandboxes, scripted
from tests.unit.test_receipt_contract import EXEC_SCHEMA, _validator


@pytest.fixture
def fake(
    monkeypatch: pytest.MonkeyPatch, session: Session, engine: FakeEngine, tmp_path: Path
) -> FakeSandboxes:
    monkeypatch.setenv("PYBOX_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("PYBOX_CONFIG", raising=False)
    sandboxes = FakeSandboxes(session, engine)
    monkeypatch.setattr(_sandbox, "_sandboxes", lambda args: sandboxes)
    return sandboxes


@pytest.fixture
def sandbox_id(fake: FakeSandboxes) -> str:
    return fake.create().sandbox_id


def stdin_of(monkeypatch: pytest.MonkeyPatch, data: bytes) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))


# -- create, list, destroy ----------------------------------------------------------


def test_create_prints_the_id_alone_on_stdout(
    fake: FakeSandboxes, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        [
            "sandbox",
            "create",
            "--image",
            "data",
            "--library",
            "attrs",
            "--library",
            "idna<4",
            "--memory",
            "256",
            "--timeout",
            "7",
        ]
    )
    assert code == 0
    out, err = capsys.readouterr()
    (made,) = fake.kept
    assert out == f"{made}\n"
    assert fake.calls == [
        ("create", "data", LimitRequest(timeout_s=7.0, memory_bytes=256 * MIB), ("attrs", "idna<4"))
    ]
    assert f"pybox: created sandbox {made} from data" in err
    assert "256 MiB of memory" in err and "7 s of wall-clock time" in err
    assert f"pybox sandbox destroy {made}" in err


def test_create_json_is_one_versioned_record(
    fake: FakeSandboxes, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["sandbox", "create", "--json"]) == 0
    out, err = capsys.readouterr()
    record = json.loads(out)
    assert record["pybox_sandbox_version"] == 1
    assert record["sandbox"]["sandbox_id"] in fake.kept
    assert record["sandbox"]["limits"]["memory_bytes"] > 0
    assert err == ""


def test_a_refused_create_exits_2_with_json_error(
    fake: FakeSandboxes, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["sandbox", "create", "--memory", "999999", "--json"]) == 2
    out, err = capsys.readouterr()
    assert json.loads(out)["error"]["kind"] == "limit_exceeded"
    assert json.loads(out)["pybox_sandbox_version"] == 1
    assert "pybox: Requested 999999 MiB of memory" in err
    assert fake.kept == {}


def test_destroy_is_idempotent_and_says_whether_it_was_live(
    sandbox_id: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["sandbox", "destroy", sandbox_id]) == 0
    assert capsys.readouterr().out == (
        f"destroyed sandbox {sandbox_id}; the engine confirmed its box is gone\n"
    )
    assert main(["sandbox", "destroy", sandbox_id]) == 0
    assert "was already destroyed (destroy requested)" in capsys.readouterr().out
    assert main(["sandbox", "destroy", sandbox_id, "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record == {
        "pybox_sandbox_version": 1,
        "sandbox_id": sandbox_id,
        "destroyed": True,
        "was_live": False,
    }


def test_an_unknown_sandbox_exits_2(
    fake: FakeSandboxes, capsys: pytest.CaptureFixture[str]
) -> None:
    for argv in (
        ["destroy", "sbx-000000000bad"],
        ["ls", "sbx-000000000bad"],
        ["exec", "sbx-000000000bad", "--", "ls"],
        ["cp", "sbx-000000000bad:a", "-"],
    ):
        assert main(["sandbox", *argv]) == 2, argv
        assert "No sandbox 'sbx-000000000bad' is known" in capsys.readouterr().err


def test_failures_of_the_feature_exit_125_and_busy_exits_2(
    fake: FakeSandboxes, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.fail_with = SandboxError("The engine still lists the box.")
    assert main(["sandbox", "list"]) == 125
    assert capsys.readouterr().err == "pybox: The engine still lists the box.\n"
    fake.fail_with = SandboxBusy("Sandbox sbx-1 is busy.")
    assert main(["sandbox", "list", "--json"]) == 2
    out, _ = capsys.readouterr()
    assert json.loads(out)["error"] == {"kind": "sandbox_busy", "message": "Sandbox sbx-1 is busy."}


def test_list_shows_the_live_ones(fake: FakeSandboxes, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sandbox", "list"]) == 0
    assert capsys.readouterr().err == "pybox: no live sandboxes.\n"
    first, second = fake.create(), fake.create()
    fake.destroy(first.sandbox_id)
    assert main(["sandbox", "list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:4] == ["SANDBOX", "IMAGE", "STATE", "RUNS"]
    assert [line.split()[0] for line in lines[1:]] == [second.sandbox_id]
    assert main(["sandbox", "list", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert [s["sandbox_id"] for s in record["sandboxes"]] == [second.sandbox_id]


def test_a_bare_sandbox_prints_its_help_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sandbox"]) == 2
    err = capsys.readouterr().err
    assert "usage: pybox sandbox" in err
    for action in ("create", "run", "exec", "cp", "ls", "destroy", "list"):
        assert action in err


# -- run and exec: shown as `pybox exec` shows a run ----------------------------------


def test_run_shows_output_and_receipt_and_exits_as_the_program(
    fake: FakeSandboxes,
    engine: FakeEngine,
    sandbox_id: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    program = tmp_path / "job.py"
    program.write_text("print(42)\n")
    scripted(engine, stdout=b"42\n", stderr=b"careful\n", exit_code=3)
    assert main(["sandbox", "run", sandbox_id, str(program), "--timeout", "2"]) == 3
    out, err = capsys.readouterr()
    assert out == "42\n"
    assert err.startswith("careful\npybox: failed, exit 3")
    _, _, request = fake.calls[-1]
    assert request.code == b"print(42)\n" and request.code_name == RUN_PROGRAM
    assert request.limits == LimitRequest(timeout_s=2.0)


def test_run_reads_the_program_from_stdin_and_quiet_is_one_line(
    fake: FakeSandboxes,
    engine: FakeEngine,
    sandbox_id: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    stdin_of(monkeypatch, b"print('hi')\n")
    scripted(engine, stdout=b"hi\n")
    assert main(["sandbox", "run", sandbox_id, "-", "-q"]) == 0
    out, err = capsys.readouterr()
    assert out == "hi\n" and len(err.splitlines()) == 1
    assert err.startswith("pybox: succeeded, exit 0")
    assert fake.calls[-1][2].code == b"print('hi')\n"
    assert fake.calls[-1][2].limits == LimitRequest()


def test_run_json_is_pybox_execs_record(
    engine: FakeEngine,
    sandbox_id: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    stdin_of(monkeypatch, b"...")
    scripted(engine, stdout=b"out\n", exit_code=1)
    assert main(["sandbox", "run", sandbox_id, "-", "--json"]) == 1
    out, err = capsys.readouterr()
    record = json.loads(out)
    _validator(EXEC_SCHEMA).validate(record)
    assert record["stdout"] == "out\n" and record["exit_code"] == 1
    assert err == ""


def test_run_refusals_exit_2(
    fake: FakeSandboxes, sandbox_id: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["sandbox", "run", sandbox_id, str(tmp_path / "missing.py")]) == 2
    assert "Cannot read the program" in capsys.readouterr().err
    assert main(["sandbox", "run", sandbox_id, "-", "--timeout", "soon"]) == 2
    assert "--timeout" in capsys.readouterr().err
    assert main(["sandbox", "run", sandbox_id, str(tmp_path / "missing.py"), "--json"]) == 2
    assert json.loads(capsys.readouterr().out)["pybox_exec_version"] == 1
    assert [c for c in fake.calls if c[0] == "run"] == []


def test_exec_passes_the_words_after_double_dash(
    fake: FakeSandboxes,
    engine: FakeEngine,
    sandbox_id: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    scripted(engine, stdout=b"a.txt\n", exit_code=0)
    code = main(["sandbox", "exec", sandbox_id, "--timeout", "3", "--", "ls", "-l", "--", "x y"])
    assert code == 0
    out, err = capsys.readouterr()
    assert out == "a.txt\n" and err.startswith("pybox: succeeded, exit 0")
    assert fake.calls[-1] == ("exec", sandbox_id, ["ls", "-l", "--", "x y"], 3.0)
    scripted(engine, exit_code=124)  # the program's code, whatever it is
    assert main(["sandbox", "exec", sandbox_id, "--", "false"]) == 124


def test_exec_without_a_command_or_with_a_stray_word_exits_2(
    fake: FakeSandboxes, sandbox_id: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["sandbox", "exec", sandbox_id]) == 2
    assert "Give the command after --" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stopped:
        main(["sandbox", "exec", sandbox_id, "ls"])
    assert stopped.value.code == 2
    assert "unexpected argument: ls" in capsys.readouterr().err
    assert [c for c in fake.calls if c[0] == "exec"] == []


# -- cp and ls --------------------------------------------------------------------------


def test_cp_both_ways(
    fake: FakeSandboxes, sandbox_id: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    host = tmp_path / "data.csv"
    host.write_bytes(b"a,b\n1,2\n")
    assert main(["sandbox", "cp", str(host), f"{sandbox_id}:in/data.csv"]) == 0
    assert fake.kept[sandbox_id].files == {"in/data.csv": b"a,b\n1,2\n"}
    assert f"copied 8 bytes to {sandbox_id}:in/data.csv" in capsys.readouterr().err
    assert main(["sandbox", "cp", str(host), f"{sandbox_id}:folder/"]) == 0  # keeps its name
    assert fake.kept[sandbox_id].files["folder/data.csv"] == b"a,b\n1,2\n"
    back = tmp_path / "back.csv"
    assert main(["sandbox", "cp", f"{sandbox_id}:in/data.csv", str(back)]) == 0
    assert back.read_bytes() == b"a,b\n1,2\n"
    into = tmp_path / "into"
    into.mkdir()
    assert main(["sandbox", "cp", f"{sandbox_id}:in/data.csv", str(into)]) == 0
    assert (into / "data.csv").read_bytes() == b"a,b\n1,2\n"


def test_cp_refuses_to_overwrite_a_host_file_without_force(
    fake: FakeSandboxes, sandbox_id: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.kept[sandbox_id].files["out.txt"] = b"new"
    tmp_path = tmp_path / "mine"
    tmp_path.mkdir()
    mine = tmp_path / "mine.txt"
    mine.write_bytes(b"precious")
    assert main(["sandbox", "cp", f"{sandbox_id}:out.txt", str(mine)]) == 2
    assert "exists already; pybox does not overwrite it. Add --force" in capsys.readouterr().err
    assert mine.read_bytes() == b"precious"
    link = tmp_path / "link.txt"
    link.symlink_to(tmp_path / "nowhere")  # not followed: it exists as a name
    assert main(["sandbox", "cp", f"{sandbox_id}:out.txt", str(link)]) == 2
    assert not (tmp_path / "nowhere").exists()
    assert main(["sandbox", "cp", "--force", f"{sandbox_id}:out.txt", str(mine)]) == 0
    assert mine.read_bytes() == b"new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.txt", "mine.txt"]  # no leftovers


def test_cp_force_never_writes_through_a_planted_link(
    fake: FakeSandboxes, sandbox_id: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Links planted at the name pybox used to write through (`.NAME.pybox-PID`) and at
    the target itself: --force replaces the target's name, and no other file is written."""
    fake.kept[sandbox_id].files["out.txt"] = b"sandbox-chosen"
    folder = tmp_path / "mine"
    folder.mkdir()
    victim = tmp_path / "victim"
    victim.write_bytes(b"host file")
    target = folder / "out.txt"
    target.write_bytes(b"old")
    planted = folder / f".out.txt.pybox-{os.getpid()}"
    planted.symlink_to(victim)
    assert main(["sandbox", "cp", "--force", f"{sandbox_id}:out.txt", str(target)]) == 0
    assert victim.read_bytes() == b"host file"
    assert target.read_bytes() == b"sandbox-chosen" and not target.is_symlink()
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~_umask()
    assert planted.is_symlink()  # left alone, not used
    # A link at the target: the link is replaced, the file it points to is untouched.
    linked = folder / "linked.txt"
    linked.symlink_to(victim)
    assert main(["sandbox", "cp", "--force", f"{sandbox_id}:out.txt", str(linked)]) == 0
    assert victim.read_bytes() == b"host file"
    assert not linked.is_symlink() and linked.read_bytes() == b"sandbox-chosen"
    # A link to a folder, named without a trailing slash, is the target itself.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (folder / "dirlink").symlink_to(elsewhere)
    assert main(["sandbox", "cp", f"{sandbox_id}:out.txt", str(folder / "dirlink")]) == 2
    assert "exists already" in capsys.readouterr().err
    assert list(elsewhere.iterdir()) == []
    assert main(["sandbox", "cp", f"{sandbox_id}:out.txt", str(folder / "dirlink") + "/"]) == 0
    assert (elsewhere / "out.txt").read_bytes() == b"sandbox-chosen"  # asked for: into it
    assert sorted(p.name for p in folder.iterdir() if p.name.startswith(".")) == [planted.name]


def _umask() -> int:
    umask = os.umask(0o022)
    os.umask(umask)
    return umask


def test_cp_to_stdout_and_from_stdin(
    fake: FakeSandboxes,
    sandbox_id: str,
    monkeypatch: pytest.MonkeyPatch,
    capsysbinary: pytest.CaptureFixture[bytes],
) -> None:
    stdin_of(monkeypatch, b"\x00\xffbytes")
    assert main(["sandbox", "cp", "-", f"{sandbox_id}:raw.bin"]) == 0
    assert fake.kept[sandbox_id].files["raw.bin"] == b"\x00\xffbytes"
    capsysbinary.readouterr()
    assert main(["sandbox", "cp", f"{sandbox_id}:raw.bin", "-"]) == 0
    out, err = capsysbinary.readouterr()
    assert out == b"\x00\xffbytes" and err == b""  # exact bytes to a pipe, nothing else


@pytest.mark.parametrize(
    ("source", "target"),
    [("a.txt", "b.txt"), ("sbx-1:a", "sbx-2:b"), ("-", "-")],
)
def test_cp_needs_exactly_one_sandbox_side(
    fake: FakeSandboxes, source: str, target: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["sandbox", "cp", source, target]) == 2
    assert "Exactly one side of `pybox sandbox cp` is in a sandbox" in capsys.readouterr().err
    assert fake.calls == []


def test_cp_refuses_a_path_that_leaves_the_workspace(
    fake: FakeSandboxes, sandbox_id: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["sandbox", "cp", f"{sandbox_id}:../../etc/passwd", str(tmp_path / "p")]) == 2
    assert "leaves the sandbox's workspace" in capsys.readouterr().err
    assert not (tmp_path / "p").exists()


def test_ls_lists_and_escapes_the_names_the_box_gave(
    fake: FakeSandboxes, sandbox_id: str, capsys: pytest.CaptureFixture[str]
) -> None:
    hostile = "evil\x1b[2J\rpybox: succeeded\nfake.txt"
    fake.listing = (
        (SandboxFile("data", "folder", 0), SandboxFile(hostile, "file", 12)),
        False,
    )
    assert main(["sandbox", "ls", sandbox_id, "data"]) == 0
    out, err = capsys.readouterr()
    assert "\x1b" not in out and "\r" not in out
    lines = out.splitlines()
    assert len(lines) == 2  # the LF in the name did not start a line of its own
    assert lines[0].split() == ["folder", "0", "data"]
    assert lines[1].endswith("evil\\x1b[2J\\rpybox: succeeded\\nfake.txt")
    assert "cut short after 2 entries" in err
    assert fake.calls[-1] == ("list_files", sandbox_id, "data")
    assert main(["sandbox", "ls", sandbox_id, "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["pybox_sandbox_version"] == 1 and record["complete"] is False
    assert record["files"][1] == {"path": hostile, "kind": "file", "size_bytes": 12}
    assert "isolated" in record["source"]  # who listed them: pybox's file program


def test_ls_of_the_whole_workspace(
    fake: FakeSandboxes, sandbox_id: str, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.kept[sandbox_id].files.update({"a.py": b"x", "d/b.txt": b"yy"})
    assert main(["sandbox", "ls", sandbox_id]) == 0
    out: Any = capsys.readouterr().out
    assert [line.split() for line in out.splitlines()] == [
        ["file", "1", "a.py"],
        ["file", "2", "d/b.txt"],
    ]


def test_egress_is_passed_on_and_a_mode_beyond_the_policy_refused(
    fake: FakeSandboxes, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["sandbox", "create", "--egress", "packages"]) == 0
    assert fake.egress == "packages"
    capsys.readouterr()
    assert main(["sandbox", "create", "--egress", "open", "--json"]) == 2
    out, err = capsys.readouterr()
    assert "'open' is not allowed by the operator's policy" in err
    assert json.loads(out)["error"]["message"].startswith("egress 'open' is not allowed")
