"""Sandboxes: boxes that keep their workspace between runs, usable from any pybox
process of the same state directory.

Each operation takes the sandbox's lock, re-reads its record from the store,
attaches to its box (posture read back again) and runs one program in it: the
agent's code, a command, or one of pybox's own file operations. The record, not
memory, says who owns the sandbox and what state it is in; the audit log gets
every operation. An unreachable engine is an error and the record is kept.

This module is a sandbox's lifecycle (create, list, destroy, the records); one
program in a live sandbox is `programs`, the commands and files `operations`.
"""

from __future__ import annotations

import builtins
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pybox._boxes.box import Box
from pybox._boxes.cleanup import remove_and_confirm
from pybox._boxes.record import RunOutcome
from pybox._core import wire
from pybox._core.display import plural
from pybox._core.errors import (
    LimitExceeded,
    SandboxError,
    SandboxNotFound,
)
from pybox._core.events import EventSink
from pybox._core.limits import LimitRequest, Limits
from pybox._core.receipt import LibraryFact
from pybox._core.request import RunRequest
from pybox._core.requirements import parse_libraries
from pybox._features.sandboxes.egress import (
    close_egress,
    open_egress,
)
from pybox._features.sandboxes.fileops import SandboxFile
from pybox._features.sandboxes.locking import sandbox_lock
from pybox._features.sandboxes.programs import run_in
from pybox._features.sandboxes.records import (
    LIVE_STATES,
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
            # Never shown: it proves the box's answers are its PID 1's (reattach.resync).
            "link_key": box.link_key,
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

    # -- programs in a sandbox (pybox._features.sandboxes.programs) -------------------

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
        return run_in(
            self,
            sandbox_id,
            request,
            kind=kind,
            files_dir=files_dir,
            cancel=cancel,
            on_event=on_event,
            installed=installed,
        )

    # -- internals ------------------------------------------------------------------

    @contextmanager
    def _lock(
        self, sandbox_id: str, cancel: threading.Event | None = None, wait_s: float | None = None
    ) -> Iterator[None]:
        wait = self.settings.lock_wait_s if wait_s is None else wait_s
        with sandbox_lock(self._locks, sandbox_id, wait, cancel):
            yield

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
