"""Sandboxes: boxes that keep their workspace between runs, usable from any pybox
process of the same state directory.

Each operation takes the sandbox's lock, re-reads its record from the store,
attaches to its box (posture read back again) and runs one program in it: the
agent's code, a command, or one of pybox's own file operations. The record, not
memory, says who owns the sandbox and what state it is in; the audit log gets
every operation. An unreachable engine is an error and the record is kept.
"""

from __future__ import annotations

import builtins
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pybox._boxes.box import Box
from pybox._boxes.cleanup import remove_and_confirm
from pybox._boxes.reattach import SandboxBox, SandboxGone, reattach
from pybox._boxes.record import RunOutcome
from pybox._core import wire
from pybox._core.display import plural
from pybox._core.errors import (
    InvalidRequest,
    LimitExceeded,
    SandboxError,
    SandboxNotFound,
)
from pybox._core.events import EventSink
from pybox._core.limits import LimitRequest, Limits, Policy
from pybox._core.posture import WORK_DIR
from pybox._core.receipt import LibraryFact
from pybox._core.request import RunRequest, check_request
from pybox._core.requirements import parse_libraries
from pybox._core.runtimes import RuntimeChoice
from pybox._features.sandboxes.egress import (
    close_egress,
    open_egress,
    plan_for,
    with_ca_bundle,
    with_hosts_reached,
)
from pybox._features.sandboxes.fileops import SandboxFile
from pybox._features.sandboxes.locking import sandbox_lock
from pybox._features.sandboxes.records import (
    BOX_WIDE,
    LIVE_STATES,
    PACKAGES_FOLDER,
    RUN_PROGRAM,
    SandboxInfo,
    SandboxSettings,
    store_tag,
)
from pybox._features.store import SandboxRow, Store

if TYPE_CHECKING:
    from pybox._orchestration.session import Session


def new_sandbox_id() -> str:
    return "sbx-" + secrets.token_hex(6)


def info_of(row: SandboxRow) -> SandboxInfo:
    return SandboxInfo(
        sandbox_id=row.sandbox_id,
        image=row.image_name,
        image_id=row.image_id,
        limits=Limits(**row.limits["box"]),
        state=row.state,
        reason=row.reason,
        created_at=row.created_at,
        last_used_at=row.last_used_at,
        expires_at=row.expires_at,
        idle_ttl_s=row.idle_ttl_s,
        libraries=row.libraries,
        runs=row.runs,
        runtime=str(row.limits.get("runtime") or ""),
    )


class Sandboxes:
    """Every sandbox of one state directory. Thread-safe; processes share it via the store."""

    def __init__(
        self, session: Session, store: Store, settings: SandboxSettings | None = None
    ) -> None:
        self.session = session
        self.store = store
        self.settings = settings or SandboxSettings()
        self.tag = store_tag(session.state_dir)
        self._locks = session.state_dir / "sandboxes"

    # -- create, list, destroy ------------------------------------------------------

    def create(
        self,
        *,
        image: str = "stdlib",
        limits: LimitRequest | None = None,
        libraries: tuple[str, ...] | list[str] = (),
        say: Callable[[str], None] | None = None,
        egress: str | None = None,
        runtime: str | None = None,
    ) -> SandboxInfo:
        """A new sandbox, its box started and its posture verified; with
        `libraries`, installed before it is handed over. Refused before anything
        is made when a limit is over the operator's ceiling or too many live.
        `runtime` is its isolation lane (None: the operator's default), kept for
        its lifetime: every run in it is in that lane."""
        wanted = parse_libraries(libraries)
        egress_request = self.session.egress_request(egress)  # more than allowed: refused
        prepared = self.session.prepare(
            RunRequest(
                code=b"",
                image=image,
                limits=limits or LimitRequest(),
                egress=egress,
                runtime=runtime,
            )
        )
        self.sweep()
        live = [row for row in self.store.list_sandboxes() if row.state in LIVE_STATES]
        if len(live) >= self.settings.max_sandboxes:
            raise LimitExceeded(
                f"{plural(len(live), 'sandbox')} live; the operator allows "
                f"{self.settings.max_sandboxes}. Destroy one (destroy_sandbox) first."
            )
        now = time.time()
        sandbox_id = new_sandbox_id()
        expires_at = int(now + self.settings.max_lifetime_s)
        net = open_egress(self.session, egress_request, sandbox_id, prepared.image, expires_at)
        box = Box(
            self.session.box_context(prepared.runtime),
            prepared.image,
            prepared.limits,
            RUN_PROGRAM,
            box_id=sandbox_id,
            expires_at=expires_at,
            protocol=wire.SANDBOX,
            payload_wait_s=self.settings.idle_ttl_s,
            sandbox_store=self.tag,
            egress=net.plan if net else None,
        )
        box_limits: dict[str, Any] = {
            "box": prepared.limits.to_dict(),
            "uid": box.spec.uid,
            "runtime": prepared.runtime.lane,
        }
        if net is not None:
            box_limits["egress"] = net.record()
        row = SandboxRow(
            sandbox_id=sandbox_id,
            owner=box.spec.owner,
            container_name=box.spec.name,
            container_id=None,
            image_name=prepared.image.name,
            image_id=prepared.image.image_id,
            limits=box_limits,
            created_at=now,
            last_used_at=now,
            expires_at=float(box.spec.expires_at),
            idle_ttl_s=self.settings.idle_ttl_s,
            state="creating",
            reason="create requested",
            libraries=(),
            runs=0,
        )
        self.store.add_sandbox(row, "create requested")
        self.store.audit("sandbox.create", sandbox_id, {"image": row.image_name})
        with self._lock(sandbox_id):
            try:
                box.open()
            except BaseException as exc:
                removal = box.remove()
                if net is not None:
                    net.close()
                reason = f"its box could not be started: {exc}"[:300]
                if removal.confirmed:
                    self._close(sandbox_id, reason)
                else:
                    self.store.transition(sandbox_id, "broken", reason)
                raise
            box.context.state.finish_attempt(sandbox_id)  # the store records it now
            self.store.transition(
                sandbox_id, "ready", "box started, posture verified", container_id=box.container_id
            )
            box.let_go_of("created")
            if wanted:
                try:
                    self._install(self._get(sandbox_id), wanted, say)
                except BaseException:
                    self._destroy_locked(self._get(sandbox_id), "its libraries failed to install")
                    raise
        return info_of(self._get(sandbox_id))

    def list(self) -> builtins.list[SandboxInfo]:
        self.sweep()
        return [info_of(row) for row in self.store.list_sandboxes() if row.state in LIVE_STATES]

    def get(self, sandbox_id: str) -> SandboxInfo:
        return info_of(self._get(sandbox_id))

    def destroy(self, sandbox_id: str) -> tuple[SandboxInfo, bool]:
        """Remove the sandbox's box and confirm it gone; idempotent. Returns the
        record and whether it was live before."""
        self._check_id(sandbox_id)
        with self._lock(sandbox_id):
            row = self.store.get_sandbox(sandbox_id)
            if row is None:
                raise SandboxNotFound(self._unknown(sandbox_id))
            if row.state not in LIVE_STATES and row.state != "broken":
                return info_of(row), False
            self._destroy_locked(row, "destroy requested")
            return info_of(self._get(sandbox_id)), True

    def _destroy_locked(self, row: SandboxRow, reason: str) -> None:
        engine = self.session.engine  # unreachable: an error, the record kept
        confirmed = True
        if row.container_id is not None:
            confirmed = remove_and_confirm(engine, row.container_id)
        if not confirmed:
            self.store.transition(row.sandbox_id, "broken", "its removal was not confirmed")
            raise SandboxError(
                f"The engine still lists sandbox {row.sandbox_id}'s box {row.container_name} "
                "after removal. Retry destroy_sandbox; check `pybox doctor`."
            )
        problems = close_egress(self.session, row)  # after the box: nothing uses them
        self.store.transition(row.sandbox_id, "destroyed", reason)
        self.store.audit(
            "sandbox.destroy", row.sandbox_id, {"reason": reason, "egress_left": problems}
        )

    # -- programs in a sandbox ------------------------------------------------------

    def run(
        self,
        sandbox_id: str,
        request: RunRequest,
        *,
        kind: str = "sandbox.run",
        files_dir: Path | None = None,
        cancel: threading.Event | None = None,
        on_event: EventSink | None = None,
        installed: tuple[LibraryFact, ...] = (),
    ) -> RunOutcome:
        """One program in the sandbox, under its limits (a run may ask for a lower
        timeout or output cap; more is refused). A failing program is data.
        `installed`: the libraries installed for this run, for its receipt."""
        self._check_id(sandbox_id)
        with self._lock(sandbox_id, cancel), self._attached(sandbox_id) as (row, box):
            limits = self._run_limits(box.limits, request)
            check_request(
                replace(request, limits=LimitRequest()),
                limits,
                allow_credential_env=self.session.policy.allow_credential_env,
            )
            if row.libraries:
                request = with_packages_path(request)
            request = with_ca_bundle(row, request)
            return self._program(
                row, box, request, limits, kind, files_dir, cancel, on_event, installed
            )

    def _program(
        self,
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
        run_id = secrets.token_hex(8)
        self.store.record_run_started(
            run_id,
            kind=kind,
            owner=self.session.owner,
            request=_request_facts(request),
            sandbox_id=row.sandbox_id,
        )
        self.store.transition(row.sandbox_id, "busy", f"{kind} {run_id}")
        outcome: RunOutcome | None = None
        since = time.time()
        try:
            outcome = box.run_program(
                request,
                run_id=run_id,
                files_dir=files_dir,
                cancel=cancel,
                on_event=on_event,
                limits=limits,
            )
            outcome = with_hosts_reached(self.session, row, since, outcome)
            if installed:
                receipt = outcome.receipt
                configured = replace(receipt.configured, libraries=installed)
                outcome = replace(outcome, receipt=replace(receipt, configured=configured))
        finally:
            self._after_program(row, box, run_id, kind, outcome)
        return outcome

    def _after_program(
        self, row: SandboxRow, box: Box, run_id: str, kind: str, outcome: RunOutcome | None
    ) -> None:
        now = time.time()
        if outcome is not None:
            receipt = outcome.receipt.to_dict()
            self.store.record_run_finished(
                run_id, status=outcome.receipt.status.value, receipt=receipt
            )
        status = "interrupted" if outcome is None else outcome.receipt.status.value
        self.store.audit(kind, row.sandbox_id, {"run_id": run_id, "status": status})
        if box.removal is not None:
            why = f"its box broke during run {run_id}: {box.broken or 'removed'}"[:300]
            self.store.transition(
                row.sandbox_id, "destroyed", why, last_used_at=now, runs=row.runs + 1
            )
        else:
            self.store.transition(
                row.sandbox_id,
                "ready",
                f"{kind} {run_id} ended",
                last_used_at=now,
                runs=row.runs + 1,
            )

    def _run_limits(self, box_limits: Limits, request: RunRequest) -> Limits:
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

    # -- internals ------------------------------------------------------------------

    @contextmanager
    def _lock(
        self, sandbox_id: str, cancel: threading.Event | None = None, wait_s: float | None = None
    ) -> Iterator[None]:
        wait = self.settings.lock_wait_s if wait_s is None else wait_s
        with sandbox_lock(self._locks, sandbox_id, wait, cancel):
            yield

    @contextmanager
    def _attached(self, sandbox_id: str) -> Iterator[tuple[SandboxRow, Box]]:
        """The sandbox's record (re-read under its lock) and its box, attached;
        let go of afterwards (the box stays in the engine)."""
        row = self._usable(sandbox_id)
        image = self.session.verified_image(row.image_name)
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
            store=self.tag,
            egress=plan_for(row),
        )
        try:
            context = self.session.box_context(self._lane(row))
            box = reattach(context, image, Limits(**row.limits["box"]), known)
        except SandboxGone as exc:
            # Its box has ended (or is gone): removed now, with its egress, not left
            # to the sweep.
            self._destroy_locked(row, str(exc)[:300])
            raise SandboxNotFound(f"Sandbox {sandbox_id} is gone: {exc}") from exc
        try:
            yield row, box
        finally:
            box.let_go_of("the operation ended")

    def _lane(self, row: SandboxRow) -> RuntimeChoice | None:
        """The lane the sandbox was made in (a record from before lanes were kept:
        the session's default, as then). One the operator no longer allows, or the
        engine no longer has, is refused with that reason."""
        lane = row.limits.get("runtime")
        return self.session.runtime_choice(lane) if isinstance(lane, str) else None

    def _usable(self, sandbox_id: str) -> SandboxRow:
        row = self._get(sandbox_id)
        now = time.time()
        if row.state not in ("ready", "busy"):
            raise SandboxNotFound(
                f"Sandbox {sandbox_id} is {row.state} ({row.reason}). Create a new one."
            )
        expired = now >= row.expires_at or now >= row.last_used_at + row.idle_ttl_s
        if expired:
            self._destroy_locked(row, "expired (idle time or lifetime over)")
            raise SandboxNotFound(
                f"Sandbox {sandbox_id} expired (idle for {row.idle_ttl_s:g} s, or its lifetime "
                "ended) and was destroyed. Create a new one."
            )
        return row

    def _get(self, sandbox_id: str) -> SandboxRow:
        row = self.store.get_sandbox(sandbox_id)
        if row is None:
            raise SandboxNotFound(self._unknown(sandbox_id))
        return row

    def _check_id(self, sandbox_id: object) -> None:
        if (
            not isinstance(sandbox_id, str)
            or not sandbox_id.startswith("sbx-")
            or not (sandbox_id[4:].isalnum() and len(sandbox_id) <= 40)
        ):
            raise SandboxNotFound(self._unknown(str(sandbox_id)[:60]))

    def _unknown(self, sandbox_id: str) -> str:
        return (
            f"No sandbox {sandbox_id!r} is known here. List them with list_sandboxes "
            "(`pybox sandbox list`); create one with create_sandbox."
        )

    def _close(self, sandbox_id: str, reason: str) -> None:
        self.store.transition(sandbox_id, "destroyed", reason)
        self.store.audit("sandbox.closed", sandbox_id, {"reason": reason})

    def sweep(self) -> builtins.list[str]:
        """Destroy expired sandboxes, close records whose box is gone, remove this
        store's unrecorded sandbox boxes past a grace period (see `sweep`)."""
        from pybox._features.sandboxes.sweep import sweep_sandboxes

        return sweep_sandboxes(self)

    def _install(
        self, row: SandboxRow, libraries: tuple[str, ...], say: Callable[[str], None] | None
    ) -> dict[str, Any]:
        from pybox._features.sandboxes.installing import install_into

        return install_into(self, row, libraries, say)

    # -- the rest of the contract (pybox._features.sandboxes.operations) -------------

    def exec(self, sandbox_id: str, argv: Any, **options: Any) -> RunOutcome:
        from pybox._features.sandboxes import operations

        return operations.exec_command(self, sandbox_id, argv, **options)

    def write_file(self, sandbox_id: str, path: object, data: bytes) -> dict[str, Any]:
        from pybox._features.sandboxes import operations

        return operations.write_file(self, sandbox_id, path, data)

    def read_file(self, sandbox_id: str, path: object) -> bytes:
        from pybox._features.sandboxes import operations

        return operations.read_file(self, sandbox_id, path)

    def list_files(
        self, sandbox_id: str, path: object = ""
    ) -> tuple[tuple[SandboxFile, ...], bool]:
        from pybox._features.sandboxes import operations

        return operations.list_files(self, sandbox_id, path)

    def install(
        self, sandbox_id: str, libraries: Any, say: Callable[[str], None] | None = None
    ) -> dict[str, Any]:
        """Install `libraries` into the sandbox (see `installing`)."""
        wanted = parse_libraries(libraries)
        self._check_id(sandbox_id)
        with self._lock(sandbox_id):
            return self._install(self._get(sandbox_id), wanted, say)


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
        "code_bytes": len(request.code),
        "argv_count": len(request.argv),
        "env_names": sorted(name for name, _ in request.env),
        "stdin_bytes": len(request.stdin_bytes),
        "inputs": [item.name for item in request.inputs],
    }
