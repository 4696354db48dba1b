"""pybox's store: schema, WAL, sharing between threads and processes, the audit
chain and what it detects, redaction, and the recording of every run."""

from __future__ import annotations

import dataclasses
import json
import os
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pybox._core.errors import InvalidRequest, StateError
from pybox._core.request import RunRequest
from pybox._features.store import (
    DB_NAME,
    SCHEMA_VERSION,
    RunsVerdict,
    SandboxRow,
    Store,
    TransitionRefused,
    redact_request,
)
from pybox._features.store.recording import RECORD_FACT
from pybox._orchestration.session import Session
from tests.unit.fake_engine import FakeEngine, Script

SRC = Path(__file__).resolve().parents[2] / "src"
SECRET = "v4lue-that-must-never-be-stored-7731"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = Store.open(tmp_path / "state")
    yield opened
    opened.close()


def raw(store: Store) -> sqlite3.Connection:
    """A connection of the test's own, as someone editing the file by hand would open."""
    return sqlite3.connect(store.path, isolation_level=None)


def sandbox(sandbox_id: str = "sbx-1", state: str = "creating") -> SandboxRow:
    now = time.time()
    return SandboxRow(
        sandbox_id=sandbox_id,
        owner="host:1:1",
        container_name=f"pybox-{sandbox_id}",
        container_id=None,
        image_name="stdlib",
        image_id="sha256:" + "a" * 64,
        limits={"memory_bytes": 512 * 2**20, "timeout_s": 30.0},
        created_at=now,
        last_used_at=now,
        expires_at=now + 3600,
        idle_ttl_s=600.0,
        state=state,
        reason="",
    )


# -- the file and its schema ---------------------------------------------------------


def test_the_database_is_private_in_wal_mode_at_the_current_schema(store: Store) -> None:
    assert store.path.name == DB_NAME
    store.audit("test", "x", {})  # a write, so the -wal and -shm files exist
    for suffix in ("", "-wal", "-shm"):
        path = Path(f"{store.path}{suffix}")
        assert path.exists(), path
        assert path.stat().st_mode & 0o777 == 0o600, path
    assert store.path.parent.stat().st_mode & 0o777 == 0o700
    connection = raw(store)
    assert connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert connection.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    tables = {r[0] for r in connection.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"sandboxes", "transitions", "runs", "audit"} <= tables


def test_an_existing_database_readable_by_others_is_made_private(tmp_path: Path) -> None:
    Store.open(tmp_path).close()
    (tmp_path / DB_NAME).chmod(0o644)
    Store.open(tmp_path).close()
    assert (tmp_path / DB_NAME).stat().st_mode & 0o777 == 0o600


def test_reopening_migrates_nothing_and_keeps_the_records(tmp_path: Path) -> None:
    first = Store.open(tmp_path)
    first.audit("test", "a", {"n": 1})
    first.close()
    second = Store.open(tmp_path)
    assert [e.subject for e in second.audit_tail(5)] == ["a"]
    assert second.verify_audit().ok


def test_a_database_from_a_newer_pybox_is_refused(tmp_path: Path) -> None:
    Store.open(tmp_path).close()
    connection = sqlite3.connect(tmp_path / DB_NAME)
    connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    connection.close()
    with pytest.raises(StateError, match="newer than this pybox") as caught:
        Store.open(tmp_path)
    assert str(tmp_path / DB_NAME) in str(caught.value)
    assert "Upgrade pybox" in str(caught.value)


def test_a_file_that_is_not_a_database_is_a_state_error_naming_it(tmp_path: Path) -> None:
    (tmp_path / DB_NAME).write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StateError) as caught:
        Store.open(tmp_path)
    message = str(caught.value)
    assert str(tmp_path / DB_NAME) in message
    assert "Move" in message and "aside" in message


def test_a_state_directory_that_cannot_be_made_is_a_state_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(StateError, match="PYBOX_STATE_DIR"):
        Store.open(tmp_path / "file" / "state")


def test_importing_the_store_package_does_not_import_sqlite3() -> None:
    probe = (
        "import sys; import pybox._features.store as s; from pybox._features.store import "
        "SandboxRow, redact_request; assert 'sqlite3' not in sys.modules, 'early'; "
        "s.Store; assert 'sqlite3' in sys.modules"
    )
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    subprocess.run([sys.executable, "-c", probe], check=True, env=env, timeout=60)


# -- sandboxes ------------------------------------------------------------------------


def test_a_sandbox_moves_through_its_states_with_every_transition_kept(store: Store) -> None:
    row = sandbox()
    store.add_sandbox(row, "asked for by host:1:1")
    assert store.get_sandbox("sbx-1") == dataclasses.replace(row, reason="asked for by host:1:1")
    assert store.get_sandbox("nope") is None
    ready = store.transition("sbx-1", "ready", "started", container_id="c1", libraries=["numpy"])
    assert (ready.state, ready.reason, ready.container_id, ready.libraries) == (
        "ready",
        "started",
        "c1",
        ("numpy",),
    )
    busy = store.transition("sbx-1", "busy", "run r1", expect=("ready",), runs=1)
    assert busy.runs == 1
    assert store.get_sandbox("sbx-1") == busy
    store.transition("sbx-1", "destroyed", "destroyed by host:1:1")
    moves = [(t.from_state, t.to_state, t.reason) for t in store.transitions("sbx-1")]
    assert moves == [
        (None, "creating", "asked for by host:1:1"),
        ("creating", "ready", "started"),
        ("ready", "busy", "run r1"),
        ("busy", "destroyed", "destroyed by host:1:1"),
    ]
    assert store.list_sandboxes() == []
    assert [s.sandbox_id for s in store.list_sandboxes(include_destroyed=True)] == ["sbx-1"]


def test_expect_refuses_a_move_from_another_state_and_changes_nothing(store: Store) -> None:
    store.add_sandbox(sandbox(state="busy"), "in use")
    with pytest.raises(TransitionRefused, match="is busy") as caught:
        store.transition("sbx-1", "busy", "second run", expect=("ready",))
    assert caught.value.state == "busy"
    assert len(store.transitions("sbx-1")) == 1


def test_only_one_of_two_threads_wins_a_guarded_move(tmp_path: Path) -> None:
    Store.open(tmp_path).add_sandbox(sandbox(state="ready"), "ready")
    wins: list[str] = []
    losses: list[str] = []
    barrier = threading.Barrier(8)

    def take(name: str) -> None:
        own = Store.open(tmp_path)
        barrier.wait()
        try:
            own.transition("sbx-1", "busy", name, expect=("ready",))
            wins.append(name)
        except TransitionRefused:
            losses.append(name)
        own.close()

    threads = [threading.Thread(target=take, args=(f"t{i}",)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(wins) == 1 and len(losses) == 7


def test_a_destroyed_sandbox_stays_destroyed(store: Store) -> None:
    store.add_sandbox(sandbox(), "asked")
    store.transition("sbx-1", "destroyed", "gone")
    store.transition("sbx-1", "destroyed", "destroyed again (idempotent)")
    with pytest.raises(TransitionRefused, match="was destroyed"):
        store.transition("sbx-1", "ready", "back?")


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda s: s.transition("nope", "ready", "x"), "No sandbox nope is recorded"),
        (lambda s: s.transition("sbx-1", "sleeping", "x"), "not a sandbox state"),
        (lambda s: s.transition("sbx-1", "ready", "x", owner="me"), "cannot change owner"),
        (lambda s: s.add_sandbox(sandbox(), "again"), "already recorded"),
    ],
)
def test_bad_sandbox_calls_are_state_errors(store: Store, call: object, match: str) -> None:
    store.add_sandbox(sandbox(), "asked")
    with pytest.raises(StateError, match=match):
        call(store)  # type: ignore[operator]


# -- runs -------------------------------------------------------------------------------


def test_runs_are_listed_newest_first_and_found_by_a_prefix(store: Store) -> None:
    ids = ["abcdef0000000001", "abcdef0000000002", "bbbbbb0000000003"]
    for number, run_id in enumerate(ids):
        store.record_run_started(
            run_id,
            kind="run",
            owner="o",
            request={"image": "stdlib"},
            sandbox_id="sbx-1" if number == 2 else None,
            started_at=1000.0 + number,
        )
    store.record_run_finished(ids[0], status="succeeded", receipt={"exit_code": 0})
    assert [r.run_id for r in store.list_runs()] == ids[::-1]
    assert [r.run_id for r in store.list_runs(limit=1)] == [ids[2]]
    assert [r.run_id for r in store.list_runs(sandbox_id="sbx-1")] == [ids[2]]
    finished = store.get_run(ids[0])
    assert finished is not None
    assert (finished.status, finished.receipt) == ("succeeded", {"exit_code": 0})
    assert finished.finished_at is not None and finished.started_at == 1000.0
    unfinished = store.get_run("abcdef0000000002")
    assert unfinished is not None and unfinished.status is None and unfinished.receipt is None
    found = store.get_run("bbbbbb")
    assert found is not None and found.run_id == ids[2]
    assert store.get_run("bbbbb") is None  # shorter than 6 characters: whole ids only
    assert store.get_run("bbbbb%") is None  # no wildcard
    assert store.get_run("cccccc") is None
    with pytest.raises(InvalidRequest, match="more than one run"):
        store.get_run("abcdef")


def test_a_run_is_recorded_once_and_finished_only_after_it_started(store: Store) -> None:
    store.record_run_started("r" * 16, kind="run", owner="o", request={})
    with pytest.raises(StateError, match="already recorded"):
        store.record_run_started("r" * 16, kind="run", owner="o", request={})
    with pytest.raises(StateError, match="no start recorded"):
        store.record_run_finished("s" * 16, status="succeeded", receipt={})


# -- no secret values ---------------------------------------------------------------------


def test_redact_request_keeps_names_sizes_and_digests_only() -> None:
    request = {
        "code": b"print(1)",
        "env": [("API_THING", SECRET), ("OTHER", SECRET)],
        "stdin": SECRET.encode(),
        "nested": {"environ": {"X": SECRET}, "blob": SECRET.encode()},
        "argv": ["a"],
        "odd": object(),
    }
    redacted = redact_request(request)
    assert SECRET not in json.dumps(redacted)
    assert redacted["env"] == ["API_THING", "OTHER"]
    assert redacted["code_size_bytes"] == 8 and len(redacted["code_sha256"]) == 64
    assert "code" not in redacted and "stdin" not in redacted
    assert redacted["stdin_size_bytes"] == len(SECRET)
    assert redacted["nested"] == {"environ": ["X"], "blob": {"size_bytes": len(SECRET)}}
    assert redacted["odd"] == {"dropped": "object"}
    assert redact_request(redacted) == redacted  # idempotent: the store applies it again


@pytest.mark.parametrize("env", [{"A": SECRET}, [("A", SECRET)], [["A", SECRET]], [f"A={SECRET}"]])
def test_every_form_of_env_keeps_the_names_only(env: object) -> None:
    assert redact_request({"env": env}) == {"env": ["A"]}


def test_an_env_value_never_reaches_the_database_file(tmp_path: Path) -> None:
    store = Store.open(tmp_path)
    # The caller forgot to redact: the store does it anyway.
    store.record_run_started(
        "e" * 16,
        kind="run",
        owner="o",
        request={"env": {"TOKENISH": SECRET}, "stdin": SECRET, "code": SECRET},
    )
    store.audit("run", "e" * 16, {"env": [("TOKENISH", SECRET)]})
    store.close()
    for path in tmp_path.iterdir():
        assert SECRET.encode() not in path.read_bytes(), path
    connection = sqlite3.connect(tmp_path / DB_NAME)
    assert "TOKENISH" in connection.execute("SELECT request FROM runs").fetchone()[0]


# -- every run is recorded ------------------------------------------------------------------


def test_a_session_run_is_recorded_with_its_receipt_and_an_audit_entry(
    session: Session, engine: FakeEngine
) -> None:
    engine.script = Script(stdout=b"42\n")
    request = RunRequest(code=b"print(42)", env=(("GREETING", SECRET),), argv=("x",))
    outcome = session.run(session.prepare(request))
    receipt = outcome.receipt
    assert RECORD_FACT not in [u.fact for u in receipt.unknown]
    run = session.store().get_run(receipt.run_id)
    assert run is not None
    assert (run.kind, run.status, run.owner) == ("run", receipt.status.value, session.owner)
    assert run.receipt == json.loads(json.dumps(receipt.to_dict()))
    assert run.request["env"] == ["GREETING"] and run.request["argv"] == ["x"]
    assert run.request["code_size_bytes"] == len(b"print(42)")
    (entry,) = session.store().audit_tail(5)
    assert (entry.operation, entry.subject) == ("run", receipt.run_id)
    assert entry.details == {
        "status": "succeeded",
        "image": "stdlib",
        "exit_code": 0,
        "run_id": receipt.run_id,
        "record_sha256": entry.details["record_sha256"],  # the stored record's, chained
    }
    assert session.store().verify_audit().runs == RunsVerdict(1, (), 0, None, None)
    session.close()
    for path in session.state_dir.iterdir():
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path


def test_a_failed_run_edited_to_succeeded_in_the_store_fails_verify(
    session: Session, engine: FakeEngine
) -> None:
    """The real recording path (Session.run): the stored receipt is chained, so an
    edit of the row after the run is found by `verify_audit`."""
    engine.script = Script(stdout=b"", exit_code=3)
    receipt = session.run(session.prepare(RunRequest(code=b"raise SystemExit(3)"))).receipt
    assert receipt.status.value == "failed"
    store = session.store()
    assert store.verify_audit().ok
    connection = sqlite3.connect(store.path, isolation_level=None)
    connection.execute(
        "UPDATE runs SET status = 'succeeded', receipt = replace(receipt, "
        '\'"status":"failed"\', \'"status":"succeeded"\') WHERE run_id = ?',
        (receipt.run_id,),
    )
    connection.close()
    run = store.get_run(receipt.run_id)
    assert run is not None and run.status == "succeeded"  # the edit took
    verdict = store.verify_audit()
    assert not verdict.ok
    assert f"run {receipt.run_id}'s stored record was changed" in str(verdict.reason)
    session.close()


def test_a_store_that_cannot_be_written_leaves_the_run_standing(
    session: Session, engine: FakeEngine
) -> None:
    (session.state_dir / DB_NAME).mkdir()  # a directory where the database should be
    engine.script = Script(stdout=b"1\n")
    outcome = session.run(session.prepare(RunRequest(code=b"print(1)")))
    assert outcome.receipt.status.value == "succeeded"
    (problem,) = [u for u in outcome.receipt.unknown if u.fact == RECORD_FACT]
    assert str(session.state_dir / DB_NAME) in problem.reason
    assert "pybox runs list" in problem.reason
