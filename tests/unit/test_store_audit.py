"""The audit log's hash chain: appends from many threads and processes form one
chain with no seq lost, and an edited, deleted or moved entry is found."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from pybox._features.store import GENESIS_HASH, Store, entry_hash
from tests.unit.test_store import SRC, raw


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = Store.open(tmp_path / "state")
    yield opened
    opened.close()


def test_the_chain_starts_at_64_zeros_and_links_every_entry(store: Store) -> None:
    first = store.audit("run", "r1", {"status": "succeeded"})
    second = store.audit("run", "r2", {"status": "failed"})
    assert (first.seq, first.prev_hash) == (1, GENESIS_HASH)
    assert (second.seq, second.prev_hash) == (2, first.entry_hash)
    assert first.entry_hash == entry_hash(1, first.at, "run", "r1", first.details, GENESIS_HASH)
    assert store.audit_tail(1) == [second]
    assert store.audit_tail(10) == [first, second]
    verdict = store.verify_audit()
    assert (verdict.ok, verdict.entries, verdict.first_broken_seq) == (True, 2, None)


def test_an_empty_log_verifies(store: Store) -> None:
    verdict = store.verify_audit()
    assert (verdict.ok, verdict.entries) == (True, 0)


def _appends(tmp_path: Path, count: int, tag: str) -> None:
    own = Store.open(tmp_path)
    for number in range(count):
        own.audit("test", f"{tag}-{number}", {"n": number})
    own.close()


def _assert_one_whole_chain(tmp_path: Path, expected: set[str]) -> None:
    store = Store.open(tmp_path)
    verdict = store.verify_audit()
    assert verdict.ok, verdict
    entries = store.audit_tail(len(expected) + 10)
    assert [e.seq for e in entries] == list(range(1, len(expected) + 1))  # no seq lost
    assert {e.subject for e in entries} == expected


def test_two_stores_on_one_file_from_many_threads_append_one_chain(tmp_path: Path) -> None:
    threads = [threading.Thread(target=_appends, args=(tmp_path, 40, f"t{i}")) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    _assert_one_whole_chain(tmp_path, {f"t{i}-{n}" for i in range(4) for n in range(40)})


def test_one_store_shared_by_many_threads_appends_one_chain(store: Store) -> None:
    def append(tag: str) -> None:
        for number in range(40):
            store.audit("test", f"{tag}-{number}", {})

    threads = [threading.Thread(target=append, args=(f"t{i}",)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    _assert_one_whole_chain(store.path.parent, {f"t{i}-{n}" for i in range(4) for n in range(40)})


APPENDER = """
import sys, time
from pathlib import Path
from pybox._features.store import Store
store = Store.open(Path(sys.argv[1]))
while not Path(sys.argv[3]).exists():  # start together
    time.sleep(0.001)
for n in range(int(sys.argv[4])):
    store.audit("test", f"{sys.argv[2]}-{n}", {"n": n})
"""


def test_two_processes_append_concurrently_and_the_chain_holds(tmp_path: Path) -> None:
    Store.open(tmp_path).close()  # made once, so neither process races to create it
    go = tmp_path / "go"
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", APPENDER, str(tmp_path), tag, str(go), "150"], env=env
        )
        for tag in ("p1", "p2", "p3")
    ]
    go.touch()
    for process in processes:
        assert process.wait(timeout=120) == 0
    _assert_one_whole_chain(tmp_path, {f"{t}-{n}" for t in ("p1", "p2", "p3") for n in range(150)})


@pytest.fixture
def chained(store: Store) -> Store:
    for number in range(1, 7):
        store.audit("run", f"r{number}", {"status": "succeeded", "n": number})
    return store


def test_pybox_itself_cannot_update_or_delete_an_audit_entry(chained: Store) -> None:
    connection = raw(chained)
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        connection.execute("UPDATE audit SET subject = 'x' WHERE seq = 2")
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        connection.execute("DELETE FROM audit WHERE seq = 2")


def tamper(store: Store, *statements: str) -> None:
    """What someone with the file does: drop the triggers, then edit by hand."""
    connection = raw(store)
    connection.execute("DROP TRIGGER audit_no_update")
    connection.execute("DROP TRIGGER audit_no_delete")
    for statement in statements:
        connection.execute(statement)
    connection.close()


def test_a_hand_edited_row_is_detected_with_its_seq(chained: Store) -> None:
    tamper(chained, """UPDATE audit SET details = '{"n":3,"status":"failed"}' WHERE seq = 3""")
    verdict = chained.verify_audit()
    assert (verdict.ok, verdict.first_broken_seq) == (False, 3)
    assert verdict.reason is not None and "entry 3 was changed" in verdict.reason


@pytest.mark.parametrize("column", ["at = at + 1", "operation = 'x'", "subject = 'x'"])
def test_every_hashed_field_is_covered(chained: Store, column: str) -> None:
    tamper(chained, f"UPDATE audit SET {column} WHERE seq = 5")
    assert chained.verify_audit().first_broken_seq == 5


def test_an_edited_and_rehashed_row_breaks_the_next_link(chained: Store) -> None:
    entry = chained.audit_tail(6)[2]  # seq 3
    forged = entry_hash(3, entry.at, "run", "r3", {"status": "failed"}, entry.prev_hash)
    tamper(
        chained,
        f"""UPDATE audit SET details = '{{"status":"failed"}}', entry_hash = '{forged}'
        WHERE seq = 3""",
    )
    verdict = chained.verify_audit()
    assert verdict.first_broken_seq == 4
    assert verdict.reason is not None and "prev_hash" in verdict.reason


def test_a_deleted_row_is_a_seq_gap(chained: Store) -> None:
    tamper(chained, "DELETE FROM audit WHERE seq = 4")
    verdict = chained.verify_audit()
    assert (verdict.ok, verdict.first_broken_seq) == (False, 4)
    assert verdict.reason is not None and "missing" in verdict.reason


def test_a_deleted_first_row_is_detected(chained: Store) -> None:
    tamper(chained, "DELETE FROM audit WHERE seq = 1")
    assert chained.verify_audit().first_broken_seq == 1


def test_reordered_rows_are_detected(chained: Store) -> None:
    # Swap entries 2 and 5 whole (fields and hashes), keeping the seq column in order.
    tamper(
        chained,
        "UPDATE audit SET seq = -2 WHERE seq = 2",
        "UPDATE audit SET seq = 2 WHERE seq = 5",
        "UPDATE audit SET seq = 5 WHERE seq = -2",
    )
    verdict = chained.verify_audit()
    assert (verdict.ok, verdict.first_broken_seq) == (False, 2)


def test_unreadable_details_are_a_broken_link_not_a_crash(chained: Store) -> None:
    tamper(chained, "UPDATE audit SET details = 'not json' WHERE seq = 2")
    assert chained.verify_audit().first_broken_seq == 2


def test_four_stores_opened_together_on_a_new_file_all_open(tmp_path: Path) -> None:
    # Switching a new file to WAL mode together once failed one opener at once with
    # "database is locked" (about one trial in twenty); every opener must get in.
    failures: list[BaseException] = []

    def open_and_append(state_dir: Path, tag: str) -> None:
        try:
            own = Store.open(state_dir)
            own.audit("test", tag, {})
            own.close()
        except BaseException as exc:  # collected and asserted below
            failures.append(exc)

    for trial in range(60):
        state_dir = tmp_path / f"trial-{trial}"
        threads = [
            threading.Thread(target=open_and_append, args=(state_dir, f"t{i}")) for i in range(4)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert failures == [], f"trial {trial}: {failures}"
        _assert_one_whole_chain(state_dir, {f"t{i}" for i in range(4)})
