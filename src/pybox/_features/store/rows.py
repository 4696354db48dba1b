"""The store's records, as values (no I/O, no sqlite3)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pybox._core.errors import StateError

# A sandbox's life: `destroyed` is final (a second destroy records again, no more).
SANDBOX_STATES = ("creating", "ready", "busy", "broken", "destroyed")


class TransitionRefused(StateError):
    """A sandbox is not in a state the caller required (checked and changed in one
    transaction, so two processes cannot both win)."""

    def __init__(self, message: str, *, sandbox_id: str, state: str) -> None:
        super().__init__(message)
        self.sandbox_id = sandbox_id
        self.state = state


@dataclass(frozen=True)
class SandboxRow:
    sandbox_id: str
    owner: str
    container_name: str
    container_id: str | None
    image_name: str
    image_id: str
    limits: Mapping[str, Any]  # JSON-able
    created_at: float  # seconds since the epoch, like every `*_at` here
    last_used_at: float
    expires_at: float
    idle_ttl_s: float
    state: str  # one of SANDBOX_STATES
    reason: str  # why it is in that state (the last transition's reason)
    libraries: tuple[str, ...] = ()
    runs: int = 0


@dataclass(frozen=True)
class RunRow:
    run_id: str
    kind: str  # "run" (a one-shot box), or what the sandboxes record ("exec", ...)
    sandbox_id: str | None
    owner: str
    started_at: float
    finished_at: float | None
    status: str | None  # None while the run has not finished (or its process died)
    request: Mapping[str, Any]  # redacted: see redact.redact_request
    receipt: Mapping[str, Any] | None


@dataclass(frozen=True)
class Transition:
    sandbox_id: str
    at: float
    from_state: str | None  # None: the sandbox's first record
    to_state: str
    reason: str


@dataclass(frozen=True)
class AuditEntry:
    seq: int  # 1, 2, 3, ... with no gap
    at: float
    operation: str
    subject: str
    details: Mapping[str, Any]
    prev_hash: str  # the previous entry's entry_hash (64 zeros for the first)
    entry_hash: str  # sha256 of the canonical JSON of the fields above (chain.py)


@dataclass(frozen=True)
class RunsVerdict:
    """The stored runs checked against the record hashes the audit chain holds."""

    covered: int  # finished runs whose stored record hashes to what an entry chained
    # Finished runs no entry chains: recorded by a pybox before records were chained,
    # or added to the file by someone else. Not proven, and said so.
    not_covered: tuple[str, ...]
    unfinished: int  # runs with no recorded end (no receipt to cover)
    first_broken_seq: int | None  # the entry whose chained record no longer matches
    reason: str | None


@dataclass(frozen=True)
class AuditVerdict:
    ok: bool
    entries: int  # how many entries were read
    first_broken_seq: int | None
    reason: str | None  # what is wrong at first_broken_seq, in words
    runs: RunsVerdict | None = None  # None: not checked (the chain itself is broken)
