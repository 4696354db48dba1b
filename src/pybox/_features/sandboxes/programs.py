"""One program in a live sandbox: attach to its box (posture read back again),
run under the sandbox's limits, record the run, let go of the box.

The agent's code, a command and pybox's own file and install programs all come
through here (`Sandboxes.run`, `operations`, `installing`); the caller holds the
sandbox's lock.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pybox._boxes.box import Box
from pybox._boxes.reattach import SandboxBox, SandboxGone, reattach
from pybox._boxes.record import RunOutcome
from pybox._core.errors import InvalidRequest, SandboxError, SandboxNotFound
from pybox._core.events import EventSink
from pybox._core.limits import LimitRequest, Limits, Policy
from pybox._core.posture import WORK_DIR
from pybox._core.receipt import LibraryFact
from pybox._core.request import PROGRAM_FILES, RunRequest, check_request
from pybox._core.runtimes import RuntimeChoice
from pybox._features.sandboxes.egress import (
    hosts_before,
    plan_for,
    with_ca_bundle,
    with_hosts_reached,
)
from pybox._features.sandboxes.records import BOX_WIDE, PACKAGES_FOLDER, RUN_PROGRAM
from pybox._features.store import SandboxRow

if TYPE_CHECKING:
    from pybox._features.sandboxes.service import Sandboxes


def run_in(
    sandboxes: Sandboxes,
    sandbox_id: str,
    request: RunRequest,
    *,
    kind: str,
    files_dir: Path | None,
    cancel: threading.Event | None,
    on_event: EventSink | None,
    installed: tuple[LibraryFact, ...],
) -> RunOutcome:
    """`Sandboxes.run`: the request checked against the sandbox's limits, then run."""
    with sandboxes._lock(sandbox_id, cancel), attached(sandboxes, sandbox_id) as (row, box):
        limits = run_limits(box.limits, request)
        check_request(
            replace(request, limits=LimitRequest()),
            limits,
            allow_credential_env=sandboxes.session.policy.allow_credential_env,
        )
        request = with_libraries(request, row.libraries)
        request = with_ca_bundle(row, request)
        return run_program(
            sandboxes, row, box, request, limits, kind, files_dir, cancel, on_event, installed
        )


def run_program(
    sandboxes: Sandboxes,
    row: SandboxRow,
    box: Box,
    request: RunRequest,
    limits: Limits,
    kind: str,
    files_dir: Path | None,
    cancel: threading.Event | None,
    on_event: EventSink | None,
    installed: tuple[LibraryFact, ...] = (),
) -> RunOutcome:
    """One program in the attached `box`, its run recorded in the store."""
    session, store = sandboxes.session, sandboxes.store
    run_id = secrets.token_hex(8)
    store.record_run_started(
        run_id,
        kind=kind,
        owner=session.owner,
        request=_request_facts(request),
        sandbox_id=row.sandbox_id,
    )
    store.transition(row.sandbox_id, "busy", f"{kind} {run_id}")
    outcome: RunOutcome | None = None
    before = hosts_before(session, row)  # the proxy's counts: this run's are the change
    try:
        outcome = box.run_program(
            request,
            run_id=run_id,
            files_dir=files_dir,
            cancel=cancel,
            on_event=on_event,
            limits=limits,
        )
        outcome = with_hosts_reached(session, row, before, outcome)
        if installed:
            receipt = outcome.receipt
            configured = replace(receipt.configured, libraries=installed)
            outcome = replace(outcome, receipt=replace(receipt, configured=configured))
    finally:
        _after_program(sandboxes, row, box, run_id, kind, outcome)
    return outcome


def _after_program(
    sandboxes: Sandboxes,
    row: SandboxRow,
    box: Box,
    run_id: str,
    kind: str,
    outcome: RunOutcome | None,
) -> None:
    store = sandboxes.store
    now = time.time()
    if outcome is not None:
        status = outcome.receipt.status.value
        # The record and its audit entry (which chains the record's hash) in one step.
        store.record_run_finished(
            run_id,
            status=status,
            receipt=outcome.receipt.to_dict(),
            audit=(kind, row.sandbox_id, {"run_id": run_id, "status": status}),
        )
    else:
        store.audit(kind, row.sandbox_id, {"run_id": run_id, "status": "interrupted"})
    if box.removal is not None:
        why = f"its box broke during run {run_id}: {box.broken or 'removed'}"[:300]
        store.transition(row.sandbox_id, "destroyed", why, last_used_at=now, runs=row.runs + 1)
    else:
        store.transition(
            row.sandbox_id,
            "ready",
            f"{kind} {run_id} ended",
            last_used_at=now,
            runs=row.runs + 1,
        )


def run_limits(box_limits: Limits, request: RunRequest) -> Limits:
    asked = request.limits
    for attr in BOX_WIDE:
        value = getattr(asked, attr)
        if value is not None and value != getattr(box_limits, attr):
            raise InvalidRequest(
                f"A run cannot change the sandbox's {attr} (it is {getattr(box_limits, attr)}"
                ", set when the sandbox was created). Create a sandbox with the limits you "
                "need."
            )
    # The sandbox's limits are this run's defaults and ceilings: less may be
    # asked for, more is refused, never clamped.
    return Policy(defaults=box_limits, ceilings=box_limits).resolve(asked)


@contextmanager
def attached(sandboxes: Sandboxes, sandbox_id: str) -> Iterator[tuple[SandboxRow, Box]]:
    """The sandbox's record (re-read under its lock) and its box, attached;
    let go of afterwards (the box stays in the engine)."""
    session = sandboxes.session
    row = _usable(sandboxes, sandbox_id)
    image = session.verified_image(row.image_name)
    if image.image_id != row.image_id:
        raise SandboxError(
            f"Sandbox {sandbox_id} was made from image {row.image_id[:19]}, but "
            f"{row.image_name} is now {image.image_id[:19]}. Create a new sandbox."
        )
    known = SandboxBox(
        box_id=row.sandbox_id,
        container_id=row.container_id or row.container_name,
        owner=row.owner,
        code_name=RUN_PROGRAM,
        expires_at=int(row.expires_at),
        idle_s=row.idle_ttl_s,
        uid=int(row.limits["uid"]),
        store=sandboxes.tag,
        egress=plan_for(row),
        link_key=str(row.limits.get("link_key") or ""),
    )
    try:
        context = session.box_context(_lane(sandboxes, row))
        box = reattach(context, image, Limits(**row.limits["box"]), known)
    except SandboxGone as exc:
        # Its box has ended (or is gone): removed now, with its egress, not left
        # to the sweep.
        sandboxes._destroy_locked(row, str(exc)[:300])
        raise SandboxNotFound(f"Sandbox {sandbox_id} is gone: {exc}") from exc
    try:
        yield row, box
    finally:
        box.let_go_of("the operation ended")


def _lane(sandboxes: Sandboxes, row: SandboxRow) -> RuntimeChoice | None:
    """The lane the sandbox was made in (a record from before lanes were kept:
    the session's default, as then). One the operator no longer allows, or the
    engine no longer has, is refused with that reason."""
    lane = row.limits.get("runtime")
    return sandboxes.session.runtime_choice(lane) if isinstance(lane, str) else None


def _usable(sandboxes: Sandboxes, sandbox_id: str) -> SandboxRow:
    row = sandboxes._get(sandbox_id)
    now = time.time()
    if row.state not in ("ready", "busy"):
        raise SandboxNotFound(
            f"Sandbox {sandbox_id} is {row.state} ({row.reason}). Create a new one."
        )
    expired = now >= row.expires_at or now >= row.last_used_at + row.idle_ttl_s
    if expired:
        sandboxes._destroy_locked(row, "expired (idle time or lifetime over)")
        raise SandboxNotFound(
            f"Sandbox {sandbox_id} expired (idle for {row.idle_ttl_s:g} s, or its lifetime "
            "ended) and was destroyed. Create a new one."
        )
    return row


def with_libraries(request: RunRequest, libraries: tuple[str, ...]) -> RunRequest:
    """The caller's code and commands see the sandbox's installed libraries;
    pybox's file program gets no PYTHON* variable (it starts isolated, `-I -S`,
    and needs nothing but the standard library)."""
    if not libraries or request.program == PROGRAM_FILES:
        return request
    return with_packages_path(request)


def with_packages_path(request: RunRequest) -> RunRequest:
    """The sandbox's installed libraries first on the program's sys.path."""
    folder = f"{WORK_DIR}/{PACKAGES_FOLDER}"
    env = dict(request.env)
    env["PYTHONPATH"] = folder + (":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return replace(request, env=tuple(env.items()))


def _request_facts(request: RunRequest) -> dict[str, Any]:
    """What the store keeps of a request: never a variable's value."""
    return {
        "code_name": request.code_name,
        "program": request.program,
        "code_bytes": len(request.code),
        "argv_count": len(request.argv),
        "env_names": sorted(name for name, _ in request.env),
        "stdin_bytes": len(request.stdin_bytes),
        "inputs": [item.name for item in request.inputs],
    }
