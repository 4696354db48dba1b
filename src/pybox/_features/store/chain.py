"""The audit log's hash chain (pure): how an entry is hashed and how a chain is checked.

entry_hash = sha256 of the canonical JSON of [seq, at, operation, subject, details,
prev_hash]: keys sorted, no spaces, ASCII only, no NaN. Each entry names the hash
of the one before it, so editing, deleting or reordering any entry breaks the
chain at (or right after) that entry. Cutting entries off the end leaves a shorter
chain that still verifies: only a hash written down elsewhere (`pybox audit tail`
shows the last one) can tell.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

from pybox._features.store.rows import AuditEntry, AuditVerdict

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
