"""Removing boxes, and confirming against the engine that they are gone.

Only the engine's "no such container" counts as gone. An engine that cannot be
reached is an error, never "already cleaned up".
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from pybox._adapters.state import StateStore
from pybox._core.posture import (
    LABEL_EXPIRES_AT,
    LABEL_MANAGED,
    LABEL_OWNER,
    LABEL_RUN_ID,
    LABEL_SANDBOX,
)
from pybox._engine import Engine

CONFIRM_WAIT_S = 10.0


def remove_and_confirm(engine: Engine, container_id: str, wait_s: float = CONFIRM_WAIT_S) -> bool:
    """Force-remove a box; True only once the engine says it does not exist."""
    deadline = time.monotonic() + wait_s
    engine.remove_container(container_id)
    while True:
        if engine.inspect_container(container_id) is None:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
        engine.remove_container(container_id)


@dataclass(frozen=True)
class SweepReport:
    removed: tuple[str, ...]
    kept: tuple[tuple[str, str], ...]
    not_confirmed: tuple[str, ...]
    attempts_cleared: int


def sweep(
    engine: Engine,
    state: StateStore,
    owner_alive: Callable[[str], bool | None],
    now_epoch: float | None = None,
) -> SweepReport:
    """Remove pybox boxes left behind by runs that can no longer finish them.

    A box is swept when its owner process is known to be dead (on this host),
    or when it is past its expiry label. A box whose owner is alive and within
    its expiry belongs to a run in progress and is left alone.
    """
    now = time.time() if now_epoch is None else now_epoch
    removed: list[str] = []
    kept: list[tuple[str, str]] = []
    not_confirmed: list[str] = []
    live_run_ids: set[str] = set()
    for container in engine.list_containers({LABEL_MANAGED: "1"}):
        container_id = str(container.get("Id", ""))
        names = container.get("Names") or [container_id[:12]]
        name = str(names[0]).lstrip("/")
        labels = container.get("Labels") or {}
        # A sandbox's maker may be long gone: only its lifetime decides here.
        sandbox = LABEL_SANDBOX in labels
        alive = None if sandbox else owner_alive(str(labels.get(LABEL_OWNER, "")))
        try:
            expired = now > float(labels.get(LABEL_EXPIRES_AT, "inf"))
        except ValueError:
            expired = False
        if alive is False or expired:
            if remove_and_confirm(engine, container_id):
                removed.append(name)
            else:
                not_confirmed.append(name)
        else:
            kept.append(
                (name, "its run is still in progress" if alive else "owned elsewhere, not expired")
            )
            live_run_ids.add(str(labels.get(LABEL_RUN_ID, "")))
    cleared = 0
    for run_id, record in state.attempts().items():
        if run_id in live_run_ids:
            continue
        if owner_alive(str(record.get("owner", ""))) is False or not record:
            state.finish_attempt(run_id)
            cleared += 1
    return SweepReport(tuple(removed), tuple(kept), tuple(not_confirmed), cleared)
