"""`pybox runs list|show|receipt` and `pybox audit tail|verify` (no engine)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from pybox._features.store import DB_NAME, Store
from pybox._frontends.cli import main

# Text a hostile program could make pybox store: a cause, file names and reasons.
HOSTILE = "done\x1b[2J\x1b]0;owned\x07\npybox: succeeded, exit 0 \u202etxt.exe"


@pytest.fixture
def state(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("PYBOX_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("PYBOX_CONFIG", raising=False)
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    return tmp_path / "state"


def receipt(run_id: str, *, cause: str = "the program exited with code 0") -> dict[str, Any]:
    return {
        "receipt_version": 1,
        "run_id": run_id,
        "status": "succeeded",
        "exit_code": 0,
        "cause": {"summary": cause, "known": True, "evidence": []},
        "configured": {"image": {"name": "stdlib", "id": "sha256:" + "b" * 64}},
        "observed_by_pybox": {"run_duration_s": 0.25},
        "reported_by_program": {
            "stdout": {"bytes_total": 3, "truncated": False},
            "stderr": {"bytes_total": 0, "truncated": False},
            "output_files": [{"path": HOSTILE, "size_bytes": 1, "sha256": "c" * 64}],
            "output_files_skipped": [{"path": "a\nb", "reason": HOSTILE}],
        },
        "unknown": [{"fact": "returned files", "reason": HOSTILE}],
    }


def record(state: Path, run_id: str, *, sandbox: str | None = None, **kw: Any) -> None:
    store = Store.open(state)
    store.record_run_started(
        run_id,
        kind="run",
        owner="host:1:1",
        request={"code": b"print(1)", "code_name": "main.py", "image": "stdlib", "env": {"A": "x"}},
        sandbox_id=sandbox,
    )
    store.record_run_finished(
        run_id,
        status="succeeded",
        receipt=receipt(run_id, **kw),
        audit=("run", run_id, {"status": "succeeded", "image": "stdlib", "exit_code": 0}),
    )
    store.close()


def no_terminal_controls(text: str) -> None:
    for char in ("\x1b", "\x07", "\u202e", "\r"):
        assert char not in text


def test_an_empty_store_lists_no_runs(state: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["runs", "list"]) == 0
    assert capsys.readouterr().out.startswith("no runs recorded in ")
    assert main(["runs", "list", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"pybox_runs_version": 1, "runs": []}


def test_runs_list_shows_the_newest_first_and_filters(
    state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record(state, "1111110000000001")
    record(state, "2222220000000002", sandbox="sbx-9")
    assert main(["runs", "list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("RUN")
    assert [line.split()[0] for line in lines[1:]] == ["2222220000000002", "1111110000000001"]
    assert "succeeded" in lines[1] and "stdlib" in lines[1] and "sandbox sbx-9" in lines[1]
    assert main(["runs", "list", "--json", "--limit", "1"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed["pybox_runs_version"] == 1
    (only,) = listed["runs"]
    assert only["run_id"] == "2222220000000002" and only["exit_code"] == 0
    assert only["request"]["env"] == ["A"] and "receipt" not in only
    assert main(["runs", "list", "--json", "--sandbox", "sbx-9"]) == 0
    assert [r["run_id"] for r in json.loads(capsys.readouterr().out)["runs"]] == [
        "2222220000000002"
    ]


def test_a_limit_below_one_is_refused(state: Path) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["runs", "list", "--limit", "0"])
    assert exit_info.value.code == 2


def test_runs_show_escapes_everything_that_came_from_the_box(
    state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record(state, "3333330000000003", cause=HOSTILE)
    assert main(["runs", "show", "333333"]) == 0
    out = capsys.readouterr().out
    no_terminal_controls(out)
    lines = out.splitlines()
    assert lines[0] == "run 3333330000000003 (run)"
    # The box's newline did not start a line of its own that looks like pybox's.
    assert not any(line.startswith("pybox:") for line in lines)
    assert all(line.startswith(("run ", "  ")) for line in lines)
    assert "env:      A (names only" in out
    assert "\\x1b[2J" in out and "\\u202e" in out


def test_runs_show_json_has_the_whole_record(
    state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record(state, "4444440000000004", cause=HOSTILE)
    assert main(["runs", "show", "4444440000000004", "--json"]) == 0
    out = capsys.readouterr().out
    no_terminal_controls(out)
    shown = json.loads(out)
    assert shown["pybox_runs_version"] == 1
    assert shown["run"]["receipt"]["cause"]["summary"] == HOSTILE


def test_runs_receipt_prints_the_stored_receipt_in_its_order(
    state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record(state, "5555550000000005", cause=HOSTILE)
    assert main(["runs", "receipt", "555555"]) == 0
    out = capsys.readouterr().out
    no_terminal_controls(out)
    printed = json.loads(out)
    assert printed == receipt("5555550000000005", cause=HOSTILE)
    assert list(printed)[:2] == ["receipt_version", "run_id"]


def test_an_unknown_run_and_a_run_without_receipt_are_bad_input(
    state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["runs", "show", "ffffff"]) == 2
    assert "No run 'ffffff' is recorded" in capsys.readouterr().err
    assert main(["runs", "show", "ffffff", "--json"]) == 2
    error = json.loads(capsys.readouterr().out)
    assert error["pybox_runs_version"] == 1 and error["error"]["kind"] == "invalid_request"
    Store.open(state).record_run_started("6666660000000006", kind="run", owner="o", request={})
    assert main(["runs", "receipt", "6666660000000006"]) == 2
    assert "has no receipt recorded" in capsys.readouterr().err
    assert main(["runs", "show", "666666"]) == 0
    assert "unfinished" in capsys.readouterr().out


def test_audit_tail_shows_the_last_entries(state: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["audit", "tail"]) == 0
    assert "is empty" in capsys.readouterr().out
    for number in range(1, 4):
        record(state, f"777777000000000{number}")
    assert main(["audit", "tail", "-n", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3 and lines[0].split()[0] == "SEQ"
    assert [line.split()[0] for line in lines[1:]] == ["2", "3"]
    assert "7777770000000003" in lines[2]
    assert main(["audit", "tail", "--json"]) == 0
    tail = json.loads(capsys.readouterr().out)
    assert tail["pybox_audit_version"] == 1
    assert [e["seq"] for e in tail["entries"]] == [1, 2, 3]
    assert tail["entries"][1]["prev_hash"] == tail["entries"][0]["entry_hash"]


def test_audit_verify_says_intact_or_names_the_first_broken_link(
    state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for number in range(1, 5):
        record(state, f"888888000000000{number}")
    assert main(["audit", "verify"]) == 0
    assert capsys.readouterr().out == (
        "audit chain intact: 4 entries\nstored runs: 4 covered by the chain\n"
    )
    connection = sqlite3.connect(state / DB_NAME, isolation_level=None)
    connection.execute("DROP TRIGGER audit_no_update")
    connection.execute("UPDATE audit SET subject = 'someone else' WHERE seq = 3")
    connection.close()
    assert main(["audit", "verify"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("audit chain BROKEN at entry 3: entry 3 was changed")
    assert main(["audit", "verify", "--json"]) == 1
    verdict = json.loads(capsys.readouterr().out)
    assert verdict == {
        "pybox_audit_version": 1,
        "ok": False,
        "entries": 3,
        "first_broken_seq": 3,
        "reason": verdict["reason"],
        "runs": None,  # not checked: the chain itself is broken
    }


def test_one_entry_is_one_entry(state: Path, capsys: pytest.CaptureFixture[str]) -> None:
    record(state, "9999990000000009")
    assert main(["audit", "verify"]) == 0
    assert capsys.readouterr().out == (
        "audit chain intact: 1 entry\nstored runs: 1 covered by the chain\n"
    )


@pytest.mark.parametrize(
    "edit",
    [
        "UPDATE runs SET status = 'succeeded' WHERE run_id = '{run}'",
        "UPDATE runs SET receipt = replace(receipt, '\"failed\"', '\"succeeded\"') "
        "WHERE run_id = '{run}'",
        "UPDATE runs SET finished_at = finished_at + 1 WHERE run_id = '{run}'",
        "UPDATE runs SET request = '{{}}' WHERE run_id = '{run}'",
    ],
)
def test_a_stored_receipt_edited_after_the_run_breaks_the_audit(
    state: Path, capsys: pytest.CaptureFixture[str], edit: str
) -> None:
    """A run recorded `failed`, made `succeeded` in the file: `audit verify` fails and
    names the entry that chained the record."""
    record(state, "aaaaaa0000000001")
    store = Store.open(state)
    store.record_run_started("aaaaaa0000000002", kind="run", owner="o", request={"argv": []})
    failed = {"run_id": "aaaaaa0000000002", "status": "failed", "exit_code": 1}
    store.record_run_finished("aaaaaa0000000002", status="failed", receipt=failed)
    store.audit("sandbox.create", "sbx", {})  # a later entry: the chain itself stays intact
    store.close()
    assert main(["audit", "verify"]) == 0
    assert "stored runs: 2 covered by the chain" in capsys.readouterr().out
    connection = sqlite3.connect(state / DB_NAME, isolation_level=None)
    connection.execute(edit.format(run="aaaaaa0000000002"))
    connection.close()
    assert main(["audit", "verify"]) == 1
    out = capsys.readouterr().out
    assert out.startswith(
        "audit chain BROKEN at entry 2: run aaaaaa0000000002's stored record was changed "
        "after entry 2 chained it"
    )
    assert main(["audit", "verify", "--json"]) == 1
    verdict = json.loads(capsys.readouterr().out)
    assert (verdict["ok"], verdict["first_broken_seq"]) == (False, 2)
    assert verdict["runs"] == {"covered": 1, "not_covered": [], "unfinished": 0}


def test_a_chained_run_deleted_from_the_store_breaks_the_audit(
    state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record(state, "bbbbbb0000000001")
    record(state, "bbbbbb0000000002")
    connection = sqlite3.connect(state / DB_NAME, isolation_level=None)
    connection.execute("DELETE FROM runs WHERE run_id = 'bbbbbb0000000001'")
    connection.close()
    assert main(["audit", "verify"]) == 1
    assert capsys.readouterr().out.startswith(
        "audit chain BROKEN at entry 1: run bbbbbb0000000001, chained by entry 1, is gone"
    )


def test_runs_no_entry_covers_are_named_not_passed_silently(
    state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Rows from before records were chained (or added to the file by hand) have no
    hash in the chain: verify says so, by id, and cannot vouch for them."""
    record(state, "cccccc0000000001")
    connection = sqlite3.connect(state / DB_NAME, isolation_level=None)
    for number in range(2, 9):  # as an older pybox stored them: no chained hash
        connection.execute(
            "INSERT INTO runs (run_id, kind, owner, started_at, finished_at, status, request, "
            "receipt) VALUES (?, 'run', 'o', 1.0, 2.0, 'succeeded', '{}', '{}')",
            (f"cccccc000000000{number}",),
        )
    connection.execute(
        "INSERT INTO runs (run_id, kind, owner, started_at, request) "
        "VALUES ('dddddd0000000001', 'run', 'o', 1.0, '{}')"
    )
    connection.close()
    assert main(["audit", "verify"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "audit chain intact: 1 entry"
    assert lines[1] == (
        "stored runs: 1 covered by the chain; 7 NOT covered (recorded before pybox chained "
        "run records, or added by someone else; unverified): cccccc0000000002, "
        "cccccc0000000003, cccccc0000000004, cccccc0000000005, cccccc0000000006 and 2 more "
        "(--json lists them); 1 with no recorded end (no receipt)"
    )
    assert main(["audit", "verify", "--json"]) == 0
    runs = json.loads(capsys.readouterr().out)["runs"]
    assert runs["covered"] == 1 and runs["unfinished"] == 1
    assert runs["not_covered"] == [f"cccccc000000000{n}" for n in range(2, 9)]


def test_a_broken_store_is_an_error_naming_the_file(
    state: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state.mkdir(parents=True)
    (state / DB_NAME).write_bytes(b"garbage" * 1000)
    assert main(["audit", "verify"]) == 125
    err = capsys.readouterr().err
    assert str(state / DB_NAME) in err and "aside" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("argv", [None, ["version"], ["--help"]])
def test_import_pybox_and_the_light_commands_do_not_import_sqlite3(
    argv: list[str] | None, tmp_path: Path
) -> None:
    from tests.unit.test_cli_entry import imported_by

    modules = imported_by(argv, tmp_path)["modules"]
    assert isinstance(modules, list)
    assert [m for m in modules if m.split(".")[0] in ("sqlite3", "_sqlite3")] == []


@pytest.mark.parametrize("argv", [["runs", "list"], ["audit", "tail"], ["audit", "verify"]])
def test_runs_and_audit_open_the_store_alone(argv: list[str], tmp_path: Path) -> None:
    """No engine, no session, no box: reading the records costs only the store."""
    from tests.unit.test_cli_entry import imported_by

    found = imported_by(argv, tmp_path)
    assert found["code"] == 0, found["stderr"]
    modules = found["modules"]
    assert isinstance(modules, list)
    assert "sqlite3" in modules
    heavy = ("pybox._engine", "pybox._boxes", "pybox._orchestration", "pybox._frontends.mcp")
    assert [m for m in modules if m.startswith(heavy)] == []
    assert [m for m in modules if m.split(".")[0] in ("subprocess", "http", "ssl", "socket")] == []
