"""The sandboxes' sweep: on every create and list, and when a server starts.

A sandbox whose lifetime or idle time is over is destroyed (its box removed,
confirmed); a record whose box ended or vanished is closed with the reason; a
box labelled with this store's tag that no record owns, older than a grace
period (a create still in flight is younger), is removed. A sandbox busy with
an operation is not idle and is left alone.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from pybox._boxes.cleanup import remove_and_confirm
from pybox._core.errors import SandboxBusy, SandboxError
from pybox._core.posture import LABEL_MANAGED, LABEL_RUN_ID, LABEL_SANDBOX
from pybox._features.sandboxes.records import LIVE_STATES

if TYPE_CHECKING:
    from pybox._features.sandboxes.service import Sandboxes


def sweep_sandboxes(sandboxes: Sandboxes) -> list[str]:
    """What the sweep did, one line per sandbox or box."""
    done: list[str] = []
    now = time.time()
    engine = sandboxes.session.engine
    boxes = {
        str((c.get("Labels") or {}).get(LABEL_RUN_ID, "")): c
        for c in engine.list_containers({LABEL_MANAGED: "1", LABEL_SANDBOX: sandboxes.tag})
    }
    for row in sandboxes.store.list_sandboxes():
        if row.state not in LIVE_STATES and row.state != "broken":
            continue
        container = boxes.pop(row.sandbox_id, None)
        expired = now >= row.expires_at or now >= row.last_used_at + row.idle_ttl_s
        gone = container is None and row.state != "creating"
        stopped = container is not None and container.get("State") != "running"
        if not (expired or gone or stopped):
            continue
        why = "expired" if expired else "its box ended" if stopped else "its box is gone"
        try:
            with sandboxes._lock(row.sandbox_id, wait_s=0.0):  # a busy one is not idle
                fresh = sandboxes.store.get_sandbox(row.sandbox_id)
                if fresh is None or fresh.state != row.state:
                    continue
                sandboxes._destroy_locked(fresh, why)
                done.append(f"{row.sandbox_id}: {why}")
        except (SandboxError, SandboxBusy):
            continue
    for run_id, container in boxes.items():
        old = now - float(container.get("Created") or now) > sandboxes.settings.sweep_grace_s
        if old and remove_and_confirm(engine, str(container.get("Id"))):
            done.append(f"{run_id}: a box no record owns")
    return done
