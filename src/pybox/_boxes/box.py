"""A sealed box: create -> posture read back and verified -> attach, start ->
programs -> remove, confirmed gone.

One type for every use: a one-shot run (`oneshot.run_once`: protocol 1, one
program, no extra round trip), the warm pool (started boxes waiting for their one
program) and boxes that run programs one after another (protocol 2,
`Box.run_program`). The protocol is fixed at create time: it is part of the
entrypoint, which is read back with the rest of the posture before start.

Every exit path (an exception, Ctrl-C, an engine error halfway) goes through
the same removal, confirmed against the engine. An attempt record is written
before create so a crashed run's box is swept by the next one.
"""

from __future__ import annotations

import secrets
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from pybox._adapters.cgroups import Sampler
from pybox._boxes.cleanup import remove_and_confirm
from pybox._boxes.outcome import close_observers, finish
from pybox._boxes.program import ProgramRun
from pybox._boxes.record import RunOutcome, iso_now
from pybox._boxes.spec import (
    BoxContext,
    box_spec,
    create_box,
    read_back_posture,
    refuse_if_weakened,
    wait_until_ready,
)
from pybox._core import wire
from pybox._core.egress import EgressPlan
from pybox._core.errors import EngineError, InvalidRequest, SandboxError
from pybox._core.events import EventSink
from pybox._core.images import ImageRecord
from pybox._core.limits import Limits
from pybox._core.posture import PAYLOAD_WAIT_S
from pybox._core.receipt import Unknown
from pybox._core.request import RunRequest
from pybox._core.seal import PostureReport
from pybox._engine import AttachStream, JSONObject


@dataclass(frozen=True)
class Removal:
    confirmed: bool
    error: str | None


class Box:
    """One box, from before create to confirmed removal. Not thread-safe."""

    def __init__(
        self,
        context: BoxContext,
        image: ImageRecord,
        limits: Limits,
        code_name: str,
        *,
        box_id: str,
        expires_at: int,
        protocol: int = wire.ONE_PROGRAM,
        payload_wait_s: float = PAYLOAD_WAIT_S,
        source: str = "fresh",
        uid: int | None = None,
        sandbox_store: str = "",
        egress: EgressPlan | None = None,
        preload: tuple[str, ...] = (),
        link_key: str = "",
    ) -> None:
        self.context = context
        self.image = image
        self.limits = limits
        self.protocol = protocol
        self.source = source  # fresh, or warm_pool for a box started ahead of its run
        self.spec = box_spec(
            context,
            image,
            limits,
            code_name,
            run_id=box_id,
            expires_at=expires_at,
            payload_wait_s=payload_wait_s,
            protocol=protocol,
            uid=uid,
            sandbox_store=sandbox_store,
            egress=egress,
            preload=preload,
        )
        # A sandbox's link key (hex): sent to its PID 1 before any program, kept in
        # the sandbox's record; it proves the box's answers to pings are PID 1's.
        self.link_key = link_key or (
            secrets.token_hex(wire.LINK_KEY_CHARS // 2) if protocol == wire.SANDBOX else ""
        )
        self.t0 = time.monotonic()
        self.created_at = iso_now()
        self.marks: dict[str, float] = {}  # monotonic: created, verified, started, removed
        self.create_sent = False
        self.container_id: str | None = None
        self.posture: PostureReport | None = None
        self.stream: AttachStream | None = None
        self.sampler: Sampler | None = None
        self.decoder = wire.FrameDecoder()  # holds anything read ahead of a program
        self.ready_report: dict[str, Any] | None = None  # untrusted, like all the box says
        self.ready_at = self.t0  # monotonic: when it was verified, started and ready
        self.idle_since: float | None = None  # since when it has waited for a program
        self.programs = 0
        self.broken: str | None = None  # why it can take no further program
        # A sandbox this object let go of (kept in the engine): why it takes no
        # further program through this object.
        self.let_go: str | None = None
        self.final_inspect: JSONObject | None = None
        self.removal: Removal | None = None

    @property
    def started(self) -> bool:
        return "started" in self.marks

    # -- create, verify, start -----------------------------------------------------

    def record_attempt(self, **extra: object) -> None:
        spec = self.spec
        self.context.state.record_attempt(
            spec.run_id,
            {
                "run_id": spec.run_id,
                "owner": self.context.owner,
                "container_name": spec.name,
                "created_at": self.created_at,
                "expires_at": spec.expires_at,
                **extra,
            },
        )

    def create(self) -> None:
        """Create, read the posture back, refuse a weakened box before it starts."""
        engine = self.context.engine
        self.create_sent = True
        self.container_id = create_box(engine, self.spec, self.image)
        self.marks["created"] = time.monotonic()
        self.posture = read_back_posture(engine, self.spec, self.container_id)
        self.marks["verified"] = time.monotonic()
        refuse_if_weakened(self.posture)

    def start(self, *, await_ready: bool = False) -> None:
        """Attach, start, first kernel sample; with `await_ready`, wait for the
        bootstrap's ready report (a box that waits for its program must be up)."""
        engine = self.context.engine
        assert self.container_id is not None and self.posture is not None and self.posture.ok
        self.stream = engine.attach(self.container_id)
        engine.start_container(self.container_id)
        self.marks["started"] = time.monotonic()
        if self.protocol == wire.SANDBOX:
            # The first thing PID 1 reads, before any program exists in the box.
            self.stream.send(wire.LINK_KEY + self.link_key.encode("ascii"))
        self.sampler = self.context.sampler_factory(self.container_id)
        if self.sampler is not None:
            self.sampler.sample(force=True)
        if await_ready:
            self.ready_report = wait_until_ready(self.stream, self.decoder)
            self.ready_at = self.idle_since = time.monotonic()

    def open(self) -> None:
        """Attempt record, create, verify, start and wait for the bootstrap. On an
        error the box is half made: remove it (`with Box(...)` does)."""
        self.record_attempt()
        self.create()
        self.start(await_ready=True)

    def has_news(self) -> bool:
        """Anything to read from a waiting box (or the end of its stream) means it
        did something on its own: it is not usable."""
        return self.stream is None or self.stream.has_pending()

    # -- programs -------------------------------------------------------------------

    def run_program(
        self,
        request: RunRequest,
        *,
        run_id: str,
        files_dir: Path | None = None,
        cancel: threading.Event | None = None,
        on_event: EventSink | None = None,
        leftovers_swept: int = 0,
        limits: Limits | None = None,
    ) -> RunOutcome:
        """Run one more program in this protocol-2 or -3 box; its own receipt comes back.

        It runs within the box's limits, or `limits` where a program's own may be
        lower (its timeout, its output): the caller checks them against the box's
        first, as the request's own are not consulted here. A program that
        fails, times out or is stopped leaves the box usable; one that breaks the
        box (or Ctrl-C) removes it, and later calls are refused.
        """
        if self.protocol not in wire.KEEPS_BOX:
            raise ValueError("only a protocol-2 or -3 box runs more than one program")
        if self.removal is not None or self.broken is not None or self.let_go is not None:
            why = self.broken or self.let_go or "it was removed"
            raise SandboxError(
                f"The box {self.spec.name} takes no more programs: {why.rstrip('.')}."
            )
        if not self.started:
            raise ValueError("open() the box before running programs in it")
        if (
            self.protocol == wire.MANY_PROGRAMS
            and self.programs == 0
            and request.code_name != self.spec.code_name
        ):
            raise InvalidRequest(
                f"This box's first program is {self.spec.code_name!r} (its interpreter "
                f"was started for it), not {request.code_name!r}."
            )
        program = ProgramRun(
            self,
            request,
            run_id=run_id,
            files_dir=files_dir,
            cancel=cancel,
            on_event=on_event,
            leftovers_swept=leftovers_swept,
            limits=limits,
        )
        interrupted = False
        try:
            try:
                program.run()
            except KeyboardInterrupt:
                interrupted = program.cancelled = True
                if self.protocol == wire.SANDBOX:
                    self._let_go()
                else:
                    self.broken = "the run was interrupted"
            except (SandboxError, EngineError) as exc:
                # Recorded even when the box is already known broken: else the
                # receipt would read the engine's exit code (the bootstrap's 125)
                # as the program's.
                reason = program.box_failed(exc)
                self.broken = self.broken or reason
        finally:
            close_observers(program)
            if self.broken is None and self.let_go is None:
                self._look(program.unknown)
            if self.broken is not None:
                self.remove(exit_reported=program.exit_info is not None, unknown=program.unknown)
            self.idle_since = time.monotonic()
        return finish(program, interrupted)

    def _let_go(self) -> None:
        """A sandbox outlives an interrupted run: ask its bootstrap to stop the
        program, and let go of the box (this stream's place in the protocol is
        lost; the next pybox to attach finds its own, see `resync`)."""
        self.let_go = "the run was interrupted; attach to the sandbox again"
        try:
            if self.stream is not None:
                self.stream.send(wire.STOP)
        except (OSError, EngineError):
            pass  # the box stops the program itself at its deadline
        self._close()

    def let_go_of(self, why: str) -> None:
        """A sandbox's box stays in the engine; this object takes no further program
        (a later operation attaches anew, see `pybox._boxes.reattach`)."""
        if self.removal is None and self.let_go is None:
            self.let_go = why
            self._close()

    def _look(self, unknown: list[Unknown]) -> None:
        """The engine's view of a box kept for its next program."""
        assert self.container_id is not None
        try:
            self.final_inspect = self.context.engine.inspect_container(self.container_id)
        except EngineError as exc:
            unknown.append(Unknown("the engine's view of the box after the program", str(exc)))
            return
        state = (self.final_inspect or {}).get("State") or {}
        if not state.get("Running"):
            self.broken = "it is no longer running"

    # -- removal --------------------------------------------------------------------

    def remove(
        self,
        *,
        exit_reported: bool = False,
        unknown: list[Unknown] | None = None,
        look: bool = True,
    ) -> Removal:
        """Final inspect (unless `look` is False: a waiting box the pool discards),
        remove, confirm gone. Runs on every exit path; never raises an engine error
        (it is recorded), so it cannot hide the error that led here."""
        if self.removal is not None:
            return self.removal
        self._close()
        engine = self.context.engine
        confirmed, error = False, None
        try:
            container_id = self.container_id
            if container_id is None and self.create_sent:
                # The create call may have succeeded without pybox learning the ID.
                found = engine.inspect_container(self.spec.name)
                container_id = None if found is None else str(found.get("Id"))
            if container_id is None:
                self.removal = Removal(True, None)
                self.context.state.finish_attempt(self.spec.run_id)
                return self.removal
            try:
                if look and self.started:
                    self.final_inspect = engine.inspect_container(container_id)
                    state = (self.final_inspect or {}).get("State") or {}
                    if exit_reported and state.get("Running") and self.protocol == wire.ONE_PROGRAM:
                        # The box reported its end but the engine has not recorded
                        # it yet: wait for the engine's own exit code.
                        engine.wait_container(container_id, timeout_s=5.0)
                        self.final_inspect = engine.inspect_container(container_id)
            except EngineError as exc:
                if unknown is not None:
                    unknown.append(Unknown("the engine's final view of the box", str(exc)))
            confirmed = remove_and_confirm(engine, container_id)
            if not confirmed:
                error = "the engine still lists the box after removal"
        except EngineError as exc:
            error = str(exc)
        self.marks["removed"] = time.monotonic()
        self.removal = Removal(confirmed, error)
        if confirmed:
            self.context.state.finish_attempt(self.spec.run_id)
        return self.removal

    def _close(self) -> None:
        if self.stream is not None:
            self.stream.close()
        if self.sampler is not None:
            self.sampler.close()

    def __enter__(self) -> Box:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.remove()
