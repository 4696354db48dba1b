"""One run, start to finish: a fresh sealed box, used once, removed, confirmed gone.

create -> posture read back and verified -> attach, start -> code and inputs
in on stdin -> watch (kernel samples, output relayed, deadline) -> collect
output and files -> final sample -> final inspect -> remove -> confirm gone.

Every exit path (an exception, Ctrl-C, an engine error halfway) goes through
the same removal. An attempt record is written before create so a crashed
run's box is swept by the next one.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pybox._adapters.cgroups import Sampler, SamplerFactory, empty_observation
from pybox._adapters.confinement import confinement
from pybox._adapters.state import StateStore
from pybox._core import wire
from pybox._core.capture import HeadTailCapture
from pybox._core.errors import (
    EngineAPIError,
    EngineError,
    ImageError,
    PostureMismatch,
    SandboxError,
)
from pybox._core.images import ImageRecord
from pybox._core.limits import MIB, Limits
from pybox._core.posture import (
    BOX_UID_COUNT,
    BOX_UID_FIRST,
    INPUT_DIR,
    OUTPUT_DIR,
    PAYLOAD_WAIT_S,
    PYBOX_ROOT,
    TMP_DIR,
    BoxSpec,
    PostureReport,
    create_body,
    verify,
)
from pybox._core.receipt import (
    Configured,
    ConfinementFacts,
    EngineFacts,
    EngineObserved,
    FileDigest,
    ImageFacts,
    KernelObserved,
    PostureMismatchFact,
    ProgramReported,
    PyboxObserved,
    Receipt,
    SkippedFile,
    Unknown,
    rebase_kernel,
)
from pybox._core.request import RunRequest
from pybox._core.seccomp import PROFILE_NAME, Confinement
from pybox._core.status import Evidence, classify
from pybox._engine import AttachStream, Engine, JSONObject
from pybox._orchestration.cleanup import remove_and_confirm
from pybox._orchestration.outputs import FilesReceiver, ReturnedFile

BACKSTOP_GRACE_S = 2.0
EXPIRY_MARGIN_S = 120.0
SAMPLE_INTERVAL_S = 0.01
DRAIN_AFTER_KILL_S = 5.0
DRAIN_AFTER_EXIT_S = 15.0
BOOTSTRAP_DIAGNOSTICS_BYTES = 16384
CANCEL_POLL_S = 0.1


@dataclass(frozen=True)
class RunOutcome:
    receipt: Receipt
    stdout: bytes
    stderr: bytes
    output_files: tuple[ReturnedFile, ...]


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM) during a run: the box was cleaned up; the receipt is kept."""

    def __init__(self, outcome: RunOutcome) -> None:
        super().__init__("the run was interrupted")
        self.outcome = outcome


def new_run_id() -> str:
    return secrets.token_hex(8)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def iso_now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class BoxContext:
    """What a run needs from its session: engine, state, identity, bootstrap."""

    engine: Engine
    state: StateStore
    owner: str
    pybox_version: str
    bootstrap_source: str
    sampler_factory: SamplerFactory
    runtime: str = "runc"
    # Sessions pass the engine's own; a context made without one assumes a
    # local engine that reports nothing (this machine's AppArmor decides).
    confinement: Confinement = field(default_factory=lambda: confinement({}, local_host=True))


def new_box_uid() -> int:
    return BOX_UID_FIRST + secrets.randbelow(BOX_UID_COUNT)


def box_spec(
    context: BoxContext,
    image: ImageRecord,
    limits: Limits,
    code_name: str,
    *,
    run_id: str,
    expires_at: int,
    payload_wait_s: float = PAYLOAD_WAIT_S,
) -> BoxSpec:
    return BoxSpec(
        run_id=run_id,
        image_id=image.image_id,
        python_path=image.python_path,
        bootstrap_source=context.bootstrap_source,
        limits=limits,
        owner=context.owner,
        expires_at=expires_at,
        pybox_version=context.pybox_version,
        confinement=context.confinement,
        code_name=code_name,
        runtime=context.runtime,
        image_env=image.env,
        uid=new_box_uid(),
        payload_wait_s=payload_wait_s,
    )


def create_box(engine: Engine, spec: BoxSpec, image: ImageRecord) -> str:
    """Create the box; a recorded image the engine no longer has is an image error."""
    try:
        return engine.create_container(spec.name, create_body(spec))
    except EngineAPIError as exc:
        if exc.status == 404 and "image" in exc.engine_message.lower():
            raise ImageError(
                f"The recorded image {image.name} ({image.image_id}) is no longer in "
                f"the engine. Rebuild it with `{image.rebuild_command}`."
            ) from exc
        raise


def read_back_posture(engine: Engine, spec: BoxSpec, container_id: str) -> PostureReport:
    inspected = engine.inspect_container(container_id)
    if inspected is None:
        raise SandboxError("The box vanished between create and inspect.")
    return verify(spec, inspected)


def refuse_if_weakened(posture: PostureReport) -> None:
    if not posture.ok:
        fields = tuple(m.field for m in posture.mismatches)
        details = "; ".join(m.describe() for m in posture.mismatches[:5])
        raise PostureMismatch(
            f"The box was refused before start: {len(fields)} setting(s) differ from what "
            f"pybox asked for: {details}",
            fields=fields,
        )


@dataclass
class WarmBox:
    """A single-use box, created, verified and started ahead of its run.

    Its bootstrap waits for code on stdin; the run that takes it owns it from
    then on and removes it like any other box.
    """

    spec: BoxSpec
    container_id: str
    posture: PostureReport
    stream: AttachStream
    sampler: Sampler | None
    created_at: str
    ready_at: float  # monotonic: verified, started, and its bootstrap ready
    ready: dict[str, Any]  # the bootstrap's ready report (untrusted, like all it says)
    decoder: wire.FrameDecoder  # holds anything that arrived after the report


class BoxRun:
    """The mutable state of one run. Use `execute()` once."""

    def __init__(
        self,
        context: BoxContext,
        request: RunRequest,
        limits: Limits,
        image: ImageRecord,
        files_dir: Path | None,
        cancel: threading.Event | None,
        leftovers_swept: int,
        warm: WarmBox | None = None,
        *,
        run_id: str,
    ) -> None:
        self.context = context
        self.engine = context.engine
        self.request = request
        self.limits = limits
        self.image = image
        self.files_dir = files_dir
        self.cancel = cancel
        self.warm = warm
        if warm is not None:
            self.spec = warm.spec
        else:
            self.spec = box_spec(
                context,
                image,
                limits,
                request.code_name,
                run_id=run_id,
                expires_at=int(time.time() + limits.timeout_s + EXPIRY_MARGIN_S),
            )
        # The caller's id names the run (receipt); a warm box keeps its own in its
        # name, labels and attempt record, which were made before this run existed.
        self.run_id = run_id
        self.started_at = iso_now()
        self.t0 = time.monotonic()
        self.marks: dict[str, float] = {}
        self.container_id: str | None = None if warm is None else warm.container_id
        self.create_sent = warm is not None
        self.posture: PostureReport | None = None if warm is None else warm.posture
        self.sandbox_error: str | None = None
        self.deadline_kill = False
        self._killer: threading.Thread | None = None
        self.cancelled = False
        self.exit_info: dict[str, Any] | None = None
        self.files_report: dict[str, Any] | None = None
        self.bootstrap_error: str | None = None
        # After the exit report only the returned files are at stake: a failure
        # there is listed in `unknown` and never replaces the program's status.
        self.files_lost: str | None = None
        self.final_inspect: JSONObject | None = None
        self.removal_confirmed = False
        self.removal_error: str | None = None
        self.stdout = HeadTailCapture(limits.output_bytes)
        self.stderr = HeadTailCapture(limits.output_bytes)
        self.diagnostics = bytearray()
        self.sampler: Sampler | None = None if warm is None else warm.sampler
        self.kernel: KernelObserved = empty_observation(SAMPLE_INTERVAL_S)
        self.kernel_baseline: KernelObserved | None = None
        self.unknown: list[Unknown] = []
        self.files = (
            FilesReceiver(files_dir, limits.output_files, limits.output_files_bytes)
            if files_dir is not None and request.collect_outputs
            else None
        )
        self.leftovers_swept = leftovers_swept

    # -- helpers ------------------------------------------------------------------

    def _mark(self, name: str) -> None:
        self.marks[name] = time.monotonic()

    @property
    def _box_started(self) -> bool:
        """Started for this run, or taken from the pool already started."""
        return "started" in self.marks or self.warm is not None

    def _since_start(self, name: str) -> float | None:
        return round(self.marks[name] - self.t0, 4) if name in self.marks else None

    # -- the lifecycle ------------------------------------------------------------

    def execute(self) -> RunOutcome:
        self.context.state.record_attempt(
            self.spec.run_id,
            {
                "run_id": self.spec.run_id,
                "owner": self.context.owner,
                "container_name": self.spec.name,
                "created_at": self.started_at,
                "expires_at": self.spec.expires_at,
            },
        )
        interrupted = False
        try:
            try:
                if self.warm is None:
                    self._create_and_verify()
                self._run_box()
            except KeyboardInterrupt:
                interrupted = self.cancelled = True
            except SandboxError as exc:
                self.sandbox_error = str(exc)
            except EngineError as exc:
                if self.container_id is None:
                    raise
                self.sandbox_error = f"The engine failed during the run: {exc}"
        finally:
            # Every path, including Ctrl-C and engine errors, ends here.
            self._close_observers()
            self._remove()
            if self.removal_confirmed:
                self.context.state.finish_attempt(self.spec.run_id)
        if interrupted:
            raise RunInterrupted(self._outcome())
        return self._outcome()

    def _create_and_verify(self) -> None:
        self.create_sent = True
        self.container_id = create_box(self.engine, self.spec, self.image)
        self._mark("created")
        self.posture = read_back_posture(self.engine, self.spec, self.container_id)
        self._mark("verified")
        refuse_if_weakened(self.posture)

    def _run_box(self) -> None:
        assert self.container_id is not None
        if self.warm is not None:
            stream = self.warm.stream
        else:
            stream = self.engine.attach(self.container_id)
        try:
            if self.warm is None:
                self.engine.start_container(self.container_id)
                self._mark("started")
                self.sampler = self.context.sampler_factory(self.container_id)
                if self.sampler is not None:
                    self.sampler.sample(force=True)
            else:
                self._bootstrap_ready(self.warm.ready)
                if self.sampler is not None and self.sampler.sample(force=True):
                    # Counted totals start when the code arrives, not when the box did.
                    self.kernel_baseline, _ = self.sampler.observation()
            self._send_payload(stream)
            self._watch(stream)
        finally:
            stream.close()
            if self._killer is not None:
                self._killer.join(timeout=DRAIN_AFTER_KILL_S)
        if self.exit_info is None and not (self.deadline_kill or self.cancelled):
            reason = self.bootstrap_error or self._diagnostics_text() or "no exit report"
            # The box ended without reporting: let the engine's evidence speak (OOM, exit code).
            self.unknown.append(
                Unknown("the program's own exit report", f"the box ended without one ({reason})")
            )
            if self.bootstrap_error is not None:
                raise SandboxError(f"The in-box bootstrap failed: {self.bootstrap_error}")

    def _send_payload(self, stream: AttachStream) -> None:
        payload = wire.encode_payload(
            argv=[self.image.python_path, self.request.code_name],
            code_name=self.request.code_name,
            code=self.request.code,
            inputs=tuple(wire.PayloadFile(i.name, i.data) for i in self.request.inputs),
            backstop_s=self.limits.timeout_s + BACKSTOP_GRACE_S,
            collect_outputs=self.files is not None,
            max_files=self.limits.output_files,
            max_file_bytes=self.limits.output_files_bytes,
            args=tuple(self.request.argv),
            env=tuple(self.request.env),
            stdin=self.request.stdin_bytes,
        )
        for chunk in payload:
            stream.send(chunk)
        self._mark("code_sent")

    def _watch(self, stream: AttachStream) -> None:
        assert self.container_id is not None
        decoder = self.warm.decoder if self.warm is not None else wire.FrameDecoder()
        deadline = self.marks["code_sent"] + self.limits.timeout_s
        drain_until: float | None = None
        next_sample = time.monotonic() + SAMPLE_INTERVAL_S
        while True:
            now = time.monotonic()
            if drain_until is None:
                if self.exit_info is None and now >= deadline:
                    self._kill(deadline_kill=True)
                    drain_until = now + DRAIN_AFTER_KILL_S
                elif self.cancel is not None and self.cancel.is_set() and self.exit_info is None:
                    self._kill(deadline_kill=False)
                    drain_until = now + DRAIN_AFTER_KILL_S
            elif now >= drain_until:
                break  # the forced removal ends whatever is left
            if self.sampler is not None and now >= next_sample and self.exit_info is None:
                self.sampler.sample()
                next_sample = now + SAMPLE_INTERVAL_S
            wait = (drain_until if drain_until is not None else deadline) - now
            if self.sampler is not None and self.exit_info is None:
                wait = min(wait, next_sample - now)
            if self.cancel is not None:
                wait = min(wait, CANCEL_POLL_S)
            chunk = stream.read(max(wait, 0.0))
            if chunk is None:
                continue
            source, data = chunk
            if source == 0:
                break
            if source == 2:
                room = BOOTSTRAP_DIAGNOSTICS_BYTES - len(self.diagnostics)
                self.diagnostics += data[: max(room, 0)]
                continue
            if self.files_lost is not None:
                continue  # the transfer broke off; wait for the box's end, decode nothing
            try:
                for frame in decoder.feed(data):
                    if self._handle(frame, stream) and drain_until is None:
                        # Time to receive the returned files, at a modest 32 MiB/s.
                        budget = DRAIN_AFTER_EXIT_S + self.limits.output_files_bytes / (32 * MIB)
                        drain_until = time.monotonic() + budget
            except wire.ProtocolError as exc:
                if self.exit_info is None:
                    raise
                self._files_broke_off(f"the box broke the protocol while sending them ({exc})")
                stream.send(wire.ACK)
        if decoder.pending_bytes and self.exit_info is None and not self.deadline_kill:
            self.unknown.append(
                Unknown(
                    "the end of the box's output", "the stream stopped in the middle of a frame"
                )
            )

    def _handle(self, frame: wire.Frame, stream: AttachStream) -> bool:
        """Act on one frame; True once the program's exit report arrived."""
        kind = frame.kind
        if kind == wire.K_STDOUT:
            self.stdout.feed(frame.data)
        elif kind == wire.K_STDERR:
            self.stderr.feed(frame.data)
        elif kind == wire.K_DATA:
            if self.files is None:
                raise wire.ProtocolError("The box sent file data that was not asked for.")
            self.files.data(frame.data)
        elif kind == wire.K_FILE:
            if self.files is None:
                raise wire.ProtocolError("The box sent a file that was not asked for.")
            self.files.begin(frame.json())
        elif kind == wire.K_STARTED:
            self._mark("program_started")
        elif kind == wire.K_READY:
            self._bootstrap_ready(frame.json())
        elif kind == wire.K_ERROR and self.exit_info is not None:
            last_words = str(frame.json().get("message"))[:2000]
            self._files_broke_off(f"the bootstrap failed while sending them ({last_words})")
            stream.send(wire.ACK)
        elif kind == wire.K_ERROR:
            message = frame.json().get("message")
            self.bootstrap_error = str(message)[:2000]
        elif kind == wire.K_EXIT and self.exit_info is None:
            return self._exit_reported(frame, stream)
        elif kind == wire.K_FILES_DONE and self.exit_info is not None and self.files_report is None:
            self.files_report = frame.json()
            stream.send(wire.ACK)
        return False

    def _files_broke_off(self, why: str) -> None:
        if self.files_lost is None:
            self.files_lost = why

    def _bootstrap_ready(self, report: dict[str, Any]) -> None:
        self._mark("bootstrap_ready")
        if report.get("nondumpable") is not True:
            self.unknown.append(
                Unknown(
                    "the bootstrap's protection from the program",
                    "the box reports PID 1 could not make itself non-dumpable, so the "
                    "program may be able to trace it (everything the box reports is "
                    "untrusted either way)",
                )
            )

    def _exit_reported(self, frame: wire.Frame, stream: AttachStream) -> bool:
        self.exit_info = frame.json()
        self._mark("program_ended")
        # The box is still there (it waits for the acknowledgement): last sample.
        if self.sampler is not None:
            self.sampler.sample(force=True)
        if self.files is None or self.exit_info.get("backstop"):
            stream.send(wire.ACK)
        return True

    def _kill(self, *, deadline_kill: bool) -> None:
        """Record the kill, then ask the engine for it without waiting on the answer.

        The engine may not report a killed box as stopped until its output has
        been read, so waiting here while not reading would deadlock.
        """
        container_id = self.container_id
        assert container_id is not None
        if self.sampler is not None:
            self.sampler.sample(force=True)
        self._mark("killed")
        if deadline_kill:
            self.deadline_kill = True
        else:
            self.cancelled = True

        def kill() -> None:
            try:
                self.engine.kill_container(container_id)
            except EngineError as exc:
                self.unknown.append(Unknown("the engine's answer to pybox's kill", str(exc)))

        self._killer = threading.Thread(target=kill, name=f"pybox-kill-{self.run_id}", daemon=True)
        self._killer.start()

    def _diagnostics_text(self) -> str:
        return self.diagnostics.decode("utf-8", "replace").strip()[-2000:]

    def _close_observers(self) -> None:
        """Fold in the kernel samples and close any half-received file."""
        if self.sampler is not None:
            self.kernel, unknown = self.sampler.observation()
            if self.kernel_baseline is not None:
                self.kernel = rebase_kernel(self.kernel, self.kernel_baseline)
            self.unknown.extend(unknown)
            self.sampler.close()
        elif self._box_started:
            self.unknown.append(
                Unknown(
                    "kernel counters",
                    "the box's cgroup was not found (engine cgroup layout not recognised)",
                )
            )
        if self.files is not None and not self.files.close():
            self.unknown.append(Unknown("returned files", "the last file arrived incomplete"))

    def _remove(self) -> None:
        """Final inspect, remove, confirm gone. Runs on every exit path; never raises
        an engine error (it is recorded), so it cannot hide the error that led here."""
        engine = self.engine
        try:
            container_id = self.container_id
            if container_id is None and self.create_sent:
                # The create call may have succeeded without pybox learning the ID.
                found = engine.inspect_container(self.spec.name)
                container_id = None if found is None else str(found.get("Id"))
            if container_id is None:
                self.removal_confirmed = True
                return
            try:
                if self._box_started:
                    self.final_inspect = engine.inspect_container(container_id)
                    state = (self.final_inspect or {}).get("State") or {}
                    if self.exit_info is not None and state.get("Running"):
                        # The box reported its end but the engine has not recorded
                        # it yet: wait for the engine's own exit code.
                        engine.wait_container(container_id, timeout_s=5.0)
                        self.final_inspect = engine.inspect_container(container_id)
            except EngineError as exc:
                self.unknown.append(Unknown("the engine's final view of the box", str(exc)))
            self.removal_confirmed = remove_and_confirm(engine, container_id)
            if not self.removal_confirmed:
                self.removal_error = "the engine still lists the box after removal"
        except EngineError as exc:
            self.removal_error = str(exc)
        self._mark("removed")

    # -- the receipt --------------------------------------------------------------------

    def _engine_observed(self) -> EngineObserved:
        state: dict[str, Any] = (self.final_inspect or {}).get("State") or {}
        posture = self.posture
        started = self._box_started
        # A box still running has no exit code, whatever ExitCode says (0 until it ends).
        ended = bool(state) and not state.get("Running")
        return EngineObserved(
            container_id=self.container_id,
            container_name=self.spec.name if self.create_sent else None,
            posture_verified=bool(posture and posture.ok),
            posture_fields_checked=len(posture.checked) if posture else 0,
            posture_mismatches=tuple(
                PostureMismatchFact(m.field, m.expected, m.actual)
                for m in (posture.mismatches if posture else ())
            ),
            state=state.get("Status"),
            exit_code=state.get("ExitCode") if started and ended else None,
            oom_killed=state.get("OOMKilled") if state else None,
            created_at=(self.final_inspect or {}).get("Created"),
            started_at=state.get("StartedAt") if started else None,
            finished_at=state.get("FinishedAt") if started else None,
            removal_confirmed=self.removal_confirmed,
        )

    def _outcome(self) -> RunOutcome:
        if self.removal_error is not None and self.sandbox_error is None:
            self.sandbox_error = (
                f"The box {self.spec.name} could not be confirmed removed: {self.removal_error}. "
                "Run `pybox sweep` once the engine answers."
            )
        engine_observed = self._engine_observed()
        code_sent = self.marks.get("code_sent")
        end = self.marks.get("program_ended") or self.marks.get("killed")
        if end is None and code_sent is not None:
            end = self.marks.get("removed")
        duration = None if code_sent is None or end is None else round(end - code_sent, 4)
        exit_info = self.exit_info or {}
        status, cause, exit_code = classify(
            Evidence(
                sandbox_error=self.sandbox_error,
                cancelled=self.cancelled,
                deadline_kill=self.deadline_kill,
                timeout_s=self.limits.timeout_s,
                run_duration_s=duration,
                engine_exit_code=engine_observed.exit_code,
                engine_oom_killed=engine_observed.oom_killed,
                kernel_oom_kills=self.kernel.oom_kill_count,
                backstop_claimed=_bool_or_none(exit_info.get("backstop")),
                reported_exit_code=_int_or_none(exit_info.get("exit_code")),
            )
        )
        unknown = list(self.unknown)
        if self.files is not None and (self.deadline_kill or self.cancelled):
            unknown.append(Unknown("returned files", "not collected: the box was ended early"))
        if (
            self.exit_info is None
            and "code_sent" in self.marks
            and (self.deadline_kill or self.cancelled)
        ):
            unknown.append(
                Unknown("the program's own exit status", "the box was ended before it exited")
            )
        unknown.extend(self._files_unknown())
        skipped, more = self._skipped()
        if more:
            unknown.append(
                Unknown(
                    "the other skipped files",
                    f"{more} more files were not returned; the receipt lists the first "
                    f"{len(skipped)} (the box's part of the count is untrusted)",
                )
            )
        receipt = Receipt(
            run_id=self.run_id,
            status=status,
            exit_code=exit_code,
            cause=cause,
            configured=self._configured(),
            observed_by_engine=engine_observed,
            observed_by_kernel=self.kernel,
            observed_by_pybox=PyboxObserved(
                started_at=self.started_at,
                create_s=self._since_start("created"),
                verify_s=self._since_start("verified"),
                start_s=self._since_start("started"),
                code_sent_s=self._since_start("code_sent"),
                program_ended_s=self._since_start("program_ended"),
                removed_s=self._since_start("removed"),
                run_duration_s=duration,
                deadline_kill=self.deadline_kill,
                cancelled=self.cancelled,
                leftovers_swept=self.leftovers_swept,
                box_source="fresh" if self.warm is None else "warm_pool",
                box_created_at=self.started_at if self.warm is None else self.warm.created_at,
                box_waited_s=None if self.warm is None else round(self.t0 - self.warm.ready_at, 4),
            ),
            reported_by_program=ProgramReported(
                exit_code=_int_or_none(exit_info.get("exit_code")),
                backstop_fired=_bool_or_none(exit_info.get("backstop")),
                stdout=self.stdout.report(),
                stderr=self.stderr.report(),
                output_files=self.files.digests() if self.files is not None else (),
                output_files_skipped=tuple(skipped),
            ),
            unknown=tuple(unknown),
        )
        return RunOutcome(
            receipt=receipt,
            stdout=self.stdout.kept(),
            stderr=self.stderr.kept(),
            output_files=tuple(self.files.files) if self.files is not None else (),
        )

    def _files_unknown(self) -> list[Unknown]:
        """What was lost of the returned files after the program's exit report."""
        if self.files is None or self.exit_info is None or self.exit_info.get("backstop"):
            return []
        received = len(self.files.files)
        if self.files_lost is not None:
            return [
                Unknown(
                    "returned files",
                    f"{self.files_lost}; the {received} file(s) received before that are kept",
                )
            ]
        report = self.files_report
        if report is None:
            return [
                Unknown(
                    "returned files",
                    f"the box ended before it reported the end of the transfer; "
                    f"the {received} file(s) received are kept",
                )
            ]
        problem = report.get("problem")
        if isinstance(problem, str):
            return [Unknown("returned files", f"{problem[:300]} (the box's report)")]
        return []

    def _skipped(self) -> tuple[list[SkippedFile], int]:
        """The skipped files, pybox's and the box's, the first few listed; and how
        many more there were. A box may skip (or send) any number of files."""
        skipped = list(self.files.skipped) if self.files is not None else []
        report = self.files_report or {}
        items = report.get("files_skipped")
        for item in items if isinstance(items, list) else []:
            if isinstance(item, dict):
                skipped.append(
                    SkippedFile(str(item.get("path", ""))[:1024], str(item.get("reason", ""))[:200])
                )
        more = max(_int_or_none(report.get("files_skipped_more")) or 0, 0)
        more += max(len(skipped) - wire.MAX_SKIPPED_LISTED, 0)
        if self.files is not None:
            more += self.files.skipped_more
        return skipped[: wire.MAX_SKIPPED_LISTED], more

    def _configured(self) -> Configured:
        engine = self.engine
        return Configured(
            pybox_version=self.context.pybox_version,
            engine=EngineFacts(
                endpoint=engine.endpoint.url,
                api_version=engine.api_version,
                server_version=engine.server_version,
            ),
            runtime=self.spec.runtime,
            image=ImageFacts(
                self.image.name, self.image.image_id, self.image.recipe_hash, self.image.digest
            ),
            limits=self.limits.to_dict(),
            network="none",
            user=self.spec.user,
            confinement=ConfinementFacts(
                seccomp_profile=PROFILE_NAME,
                seccomp_profile_sha256=self.spec.confinement.seccomp_sha256,
                apparmor_profile=self.spec.confinement.apparmor_profile,
                apparmor=self.spec.confinement.apparmor_basis,
            ),
            writable_paths=(PYBOX_ROOT, TMP_DIR, "/dev/shm"),
            input_dir=INPUT_DIR,
            output_dir=OUTPUT_DIR,
            code=FileDigest(
                self.request.code_name, len(self.request.code), _sha256(self.request.code)
            ),
            inputs=tuple(
                FileDigest(i.name, len(i.data), _sha256(i.data)) for i in self.request.inputs
            ),
            collect_outputs=self.files is not None,
        )


def _int_or_none(value: object) -> int | None:
    """An exit code from inside the box, if it is one (it is untrusted)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _bool_or_none(value: object) -> bool | None:
    """A yes/no from inside the box, if it is one (it is untrusted)."""
    return value if isinstance(value, bool) else None
