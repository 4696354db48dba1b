"""`pybox repair` on the fake engine: files, exit codes, messages and the JSON contract."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from referencing import Registry, Resource

from pybox._frontends.cli import _repair, main
from pybox._orchestration.session import Session
from tests.fake_model import scripted
from tests.unit.fake_engine import FakeEngine, Script
from tests.unit.test_repair_loop import (
    BAD,
    BROKEN,
    FIXED,
    FIXED_CODE,
    fixed_when_marked,
)

DOCS = Path(__file__).resolve().parents[2] / "docs"
SCHEMA = json.loads((DOCS / "repair.schema.json").read_text())
RECEIPT_SCHEMA = json.loads((DOCS / "receipt.schema.json").read_text())


def validate(document: dict[str, Any]) -> None:
    registry: Registry[Any] = Registry().with_resource(
        "receipt.schema.json", Resource.from_contents(RECEIPT_SCHEMA)
    )
    jsonschema.Draft202012Validator(SCHEMA, registry=registry).validate(document)


@pytest.fixture(autouse=True)
def isolated(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, session: Session, engine: FakeEngine
) -> None:
    monkeypatch.setenv("PYBOX_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("PYBOX_CONFIG", raising=False)
    engine.script_for = fixed_when_marked
    monkeypatch.setattr(_repair, "open_session", lambda args: session)


@pytest.fixture
def program(tmp_path: Path) -> Path:
    path = tmp_path / "work" / "broken.py"
    path.parent.mkdir()
    path.write_bytes(BROKEN)
    return path


def model_cmd(tmp_path: Path, replies: list[str]) -> tuple[str, Path]:
    folder = tmp_path / "model"
    return shlex.join(scripted(folder, replies)), folder


def repair(program: Path, command: str, *extra: str) -> int:
    return main(
        [
            "repair",
            str(program),
            "--goal",
            "exit0",
            "--model-cmd",
            command,
            "--timeout",
            "1",
            *extra,
        ]
    )


def test_goal_met_writes_a_new_file_and_leaves_the_original(
    program: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    command, _ = model_cmd(tmp_path, [BAD, FIXED])
    assert repair(program, command, "--json") == 0
    out, err = capsys.readouterr()
    report = json.loads(out)
    validate(report)
    assert program.read_bytes() == BROKEN
    fixed = program.with_name("broken.fixed.py")
    assert fixed.read_bytes() == FIXED_CODE
    assert report["written_to"] == str(fixed) and report["applied"] is False
    assert report["stop_reason"] == "goal_met" and len(report["rounds"]) == 2
    assert "round 2:" in err  # progress on stderr


def test_an_existing_fixed_file_is_never_overwritten(
    program: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    taken = program.with_name("broken.fixed.py")
    taken.write_text("keep me\n")
    command, _ = model_cmd(tmp_path, [FIXED])
    assert repair(program, command) == 0
    assert taken.read_text() == "keep me\n"
    assert program.with_name("broken.fixed-2.py").read_bytes() == FIXED_CODE
    out = capsys.readouterr().out
    assert "pybox repair: goal_met after 1 round" in out
    assert "broken.fixed-2.py" in out


def test_goal_not_met_writes_nothing(program: Path, tmp_path: Path) -> None:
    command, _ = model_cmd(tmp_path, [BAD, BAD])
    assert repair(program, command, "--max-rounds", "2", "--apply") == 1
    assert program.read_bytes() == BROKEN
    assert sorted(p.name for p in program.parent.iterdir()) == ["broken.py"]


def test_apply_replaces_the_original_only_after_the_goal_was_met(
    program: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    program.chmod(0o640)
    command, _ = model_cmd(tmp_path, [FIXED])
    assert repair(program, command, "--apply", "--json") == 0
    assert program.read_bytes() == FIXED_CODE
    assert program.stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in program.parent.iterdir()) == ["broken.py"]
    report = json.loads(capsys.readouterr().out)
    assert report["applied"] is True and report["written_to"] == str(program)


def test_apply_keeps_an_original_changed_meanwhile(
    program: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, engine: FakeEngine
) -> None:
    def edit_then_run(payload: bytes) -> Script:
        program.write_text("# edited by the user meanwhile\n")
        return fixed_when_marked(payload)

    engine.script_for = edit_then_run
    command, _ = model_cmd(tmp_path, [FIXED])
    assert repair(program, command, "--apply") == 0
    assert program.read_text() == "# edited by the user meanwhile\n"
    assert program.with_name("broken.fixed.py").read_bytes() == FIXED_CODE


def test_output_names_a_new_file(program: Path, tmp_path: Path) -> None:
    command, _ = model_cmd(tmp_path, [FIXED])
    target = tmp_path / "out.py"
    assert repair(program, command, "--output", str(target)) == 0
    assert target.read_bytes() == FIXED_CODE and program.read_bytes() == BROKEN


def test_an_existing_output_is_refused_before_anything(
    program: Path, tmp_path: Path, engine: FakeEngine, capsys: pytest.CaptureFixture[str]
) -> None:
    command, folder = model_cmd(tmp_path, [FIXED])
    existing = tmp_path / "exists.py"
    existing.write_text("mine\n")
    assert repair(program, command, "--output", str(existing), "--json") == 2
    captured = capsys.readouterr()
    assert "never overwrites" in captured.err
    record = json.loads(captured.out)
    validate(record)
    assert record["error"]["kind"] == "invalid_request"
    assert not (folder / "calls").exists() and engine.calls == []
    assert existing.read_text() == "mine\n"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--max-rounds", "21"], "the maximum is 20 rounds"),
        (["--max-rounds", "two"], "--max-rounds: rounds must be a number"),
        (["--max-seconds", "0.5"], "below the minimum of 1 s"),
        (["--timeout", "7200"], "the maximum is 3600 s"),
        (["--provider", "openai"], "Choose one model"),
        (["--model", "gpt"], "go with --provider"),
    ],
)
def test_bad_requests_are_refused_with_exit_2(
    program: Path,
    tmp_path: Path,
    engine: FakeEngine,
    capsys: pytest.CaptureFixture[str],
    extra: list[str],
    message: str,
) -> None:
    command, folder = model_cmd(tmp_path, [FIXED])
    assert repair(program, command, *extra) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not (folder / "calls").exists() and engine.calls == []
    assert program.read_bytes() == BROKEN


def test_a_missing_api_key_is_named(
    program: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    code = main(["repair", str(program), "--goal", "exit0", "--provider", "openai", "--model", "m"])
    assert code == 2
    assert "OPENAI_API_KEY, which is not set" in capsys.readouterr().err


def test_a_model_error_exits_125(program: Path, tmp_path: Path) -> None:
    command, _ = model_cmd(tmp_path, [])
    assert repair(program, command) == 125
    assert program.read_bytes() == BROKEN


def test_tests_goal_needs_an_importable_program_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    program = tmp_path / "my-prog.py"
    program.write_bytes(BROKEN)
    tests = tmp_path / "test_prog.py"
    tests.write_text("import unittest\n")
    command, _ = model_cmd(tmp_path, [FIXED])
    code = main(["repair", str(program), "--tests", str(tests), "--model-cmd", command])
    assert code == 2
    assert "needs an importable name" in capsys.readouterr().err
