"""Every one-shot run, recorded: its start, its end and an audit entry.

`Session.run` calls `record_run` once the run's receipt exists (the one path
every front end takes). The run has happened whatever the store says, so a store
that cannot be written never turns it into an error: the receipt comes back
with an `unknown` entry (RECORD_FACT) saying the run is not recorded, and why.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from pybox._core.receipt import Receipt, Unknown
from pybox._core.request import PreparedRun

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pybox._features.store.database import Store

RUN_KIND = "run"
RECORD_FACT = "the run's record in pybox's store"


def record_run(
    store: Callable[[], Store], prepared: PreparedRun, receipt: Receipt, *, owner: str
) -> Receipt:
    """Record `prepared`'s run and its receipt in `store()` (opened here, so a store
    that cannot be opened is reported like one that cannot be written). Returns
    `receipt`, or a copy with an `unknown` entry if the run could not be recorded."""
    try:
        opened = store()
        opened.record_run_started(
            receipt.run_id,
            kind=RUN_KIND,
            owner=owner,
            request=run_request(prepared),
            started_at=_epoch(receipt.observed_by_pybox.started_at),
        )
        details = {
            "status": receipt.status.value,
            "image": receipt.configured.image.name,
            "exit_code": receipt.exit_code,
        }
        # The record and its audit entry (which chains the record's hash) in one step.
        opened.record_run_finished(
            receipt.run_id,
            status=receipt.status.value,
            receipt=receipt.to_dict(),
            audit=(RUN_KIND, receipt.run_id, details),
        )
    except Exception as exc:  # any failure: the run itself stands
        reason = (
            f"{exc} The run is missing from `pybox runs list` and from the audit log "
            "(or its record is incomplete)."
        )
        return dataclasses.replace(
            receipt, unknown=(*receipt.unknown, Unknown(RECORD_FACT, reason))
        )
    return receipt


def run_request(prepared: PreparedRun) -> dict[str, Any]:
    """What the store keeps of a one-shot request: no secret value (the store
    redacts it again). Inputs keep their names, sizes and digests, as the receipt does."""
    request = prepared.request
    requested = {
        name: value
        for name, value in dataclasses.asdict(request.limits).items()
        if value is not None
    }
    return {
        "code": request.code,
        "code_name": request.code_name,
        "image": request.image,
        "image_id": prepared.image.image_id,
        "limits_requested": requested,
        "argv": list(request.argv),
        "env": [name for name, _ in request.env],
        "stdin": request.stdin_bytes,
        "inputs": [
            {
                "name": item.name,
                "size_bytes": len(item.data),
                "sha256": hashlib.sha256(item.data).hexdigest(),
            }
            for item in request.inputs
        ],
        "collect_outputs": request.collect_outputs,
    }


def _epoch(iso: str) -> float:
    """The receipt's UTC start (`...Z`) in seconds since the epoch; now if unreadable."""
    try:
        return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return time.time()
