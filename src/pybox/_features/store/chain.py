"""The audit log's hash chain (pure): how an entry is hashed and how a chain is checked.

entry_hash = sha256 of the canonical JSON of [seq, at, operation, subject, details,
prev_hash]: keys sorted, no spaces, ASCII only, no NaN. Each entry names the hash
of the one before it, so editing, deleting or reordering any entry breaks the
chain at (or right after) that entry. Cutting entries off the end leaves a shorter
chain that still verifies: only a hash written down elsewhere (`pybox audit tail`
shows the last one) can tell.

A run's stored record (its row in `runs`: status, receipt, request, times) is
chained too: when pybox records a run's end it appends, in the same
transaction, an entry whose details hold `run_id` and `record_sha256`, the
sha256 of the canonical JSON of the row's columns as stored (`run_record_hash`).
`check_runs` then finds a record edited after its entry (a `failed` run made
`succeeded`), a chained record deleted, and records no entry covers (stored
before pybox chained records, or added to the file by someone else).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

from pybox._features.store.rows import AuditEntry, AuditVerdict, RunsVerdict

GENESIS_HASH = "0" * 64


def canonical_json(value: Any) -> str:
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False
    )


def entry_hash(
    seq: int, at: float, operation: str, subject: str, details: Mapping[str, Any], prev_hash: str
) -> str:
    text = canonical_json([seq, at, operation, subject, dict(details), prev_hash])
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def check_chain(entries: Iterable[AuditEntry]) -> AuditVerdict:
    """The chain in `entries` (in stored order, by seq), checked link by link.

    The first problem is named: a seq that is not the next one (a deleted or
    inserted entry), an entry whose own hash does not match its fields (edited),
    or one whose prev_hash is not the hash of the entry before it (edited and
    rehashed, or moved).
    """
    expected_seq, prev, count = 1, GENESIS_HASH, 0
    for entry in entries:
        count += 1
        if entry.seq != expected_seq:
            what = (
                f"entry {expected_seq} is missing (the next stored entry is {entry.seq}): "
                "an entry was deleted"
                if entry.seq > expected_seq
                else f"entry {entry.seq} is out of order (expected {expected_seq})"
            )
            return AuditVerdict(False, count, expected_seq, what)
        try:
            recomputed = entry_hash(
                entry.seq, entry.at, entry.operation, entry.subject, entry.details, entry.prev_hash
            )
        except (TypeError, ValueError) as exc:
            return AuditVerdict(
                False, count, entry.seq, f"entry {entry.seq} cannot be hashed: {exc}"
            )
        if recomputed != entry.entry_hash:
            return AuditVerdict(
                False,
                count,
                entry.seq,
                f"entry {entry.seq} was changed: its fields no longer hash to its entry_hash",
            )
        if entry.prev_hash != prev:
            before = "the chain's start (64 zeros)" if entry.seq == 1 else f"entry {entry.seq - 1}"
            return AuditVerdict(
                False,
                count,
                entry.seq,
                f"entry {entry.seq}'s prev_hash is not the hash of {before}: an entry was "
                "changed and rehashed, or entries were moved",
            )
        prev, expected_seq = entry.entry_hash, expected_seq + 1
    return AuditVerdict(True, count, None, None)


# The runs table's columns, in the order `run_record_hash` reads them.
RUN_RECORD_COLUMNS = (
    "run_id, kind, sandbox_id, owner, started_at, finished_at, status, request, receipt"
)


def run_record_hash(row: tuple[Any, ...]) -> str:
    """sha256 of the canonical JSON of a run's row (RUN_RECORD_COLUMNS, as stored:
    the request and receipt as their JSON text), so any change to any column shows."""
    text = canonical_json(list(row))
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def chained_records(entries: Iterable[AuditEntry]) -> dict[str, tuple[int, str]]:
    """run id -> (seq, record_sha256) of the last entry that chains its record."""
    chained: dict[str, tuple[int, str]] = {}
    for entry in entries:
        run_id, digest = entry.details.get("run_id"), entry.details.get("record_sha256")
        if isinstance(run_id, str) and isinstance(digest, str):
            chained[run_id] = (entry.seq, digest)
    return chained


def check_runs(
    chained: Mapping[str, tuple[int, str]], rows: Iterable[tuple[Any, ...]]
) -> RunsVerdict:
    """Every stored run (rows of RUN_RECORD_COLUMNS) against the hashes the chain holds.

    A record whose hash is not the one its entry chained (edited after it was
    recorded), or a chained record that is gone, breaks the verdict (the entry
    with the lowest seq is named). A finished run no entry chains is listed as
    not covered; a run with no recorded end has no receipt to cover.
    """
    covered, not_covered, unfinished = 0, [], 0
    broken: list[tuple[int, str]] = []
    seen: set[str] = set()
    for row in rows:
        run_id, receipt = str(row[0]), row[-1]
        seen.add(run_id)
        found = chained.get(run_id)
        if found is None:
            if receipt is None:
                unfinished += 1
            else:
                not_covered.append(run_id)
            continue
        seq, digest = found
        try:
            recomputed = run_record_hash(row)
        except (TypeError, ValueError):
            recomputed = ""
        if recomputed != digest:
            broken.append(
                (
                    seq,
                    f"run {run_id}'s stored record was changed after entry {seq} chained it: "
                    "its columns (status, receipt, request, times) no longer hash to the "
                    "record_sha256 that entry holds",
                )
            )
        else:
            covered += 1
    for run_id, (seq, _) in chained.items():
        if run_id not in seen:
            broken.append((seq, f"run {run_id}, chained by entry {seq}, is gone from the store"))
    first = min(broken) if broken else None
    return RunsVerdict(
        covered=covered,
        not_covered=tuple(sorted(not_covered)),
        unfinished=unfinished,
        first_broken_seq=None if first is None else first[0],
        reason=None if first is None else first[1],
    )
