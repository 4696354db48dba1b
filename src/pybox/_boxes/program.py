"""One program in a started box: feed it, watch it, collect what it left.

The code and inputs go in on stdin; the watch relays output (and events),
samples the kernel's counters, and enforces the deadline and cancellation: a
one-shot box (protocol 1) is killed through the engine, a box kept for more
programs (protocol 2) is asked to stop the program and killed only if it does
not. What happened is frozen into a `RunRecord` for the receipt.
"""

from __future__ import annotations

import secrets
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pybox._adapters.cgroups import empty_observation
from pybox._boxes.handshake import check_ready, program_payload
from pybox._boxes.outputs import FilesReceiver
from pybox._boxes.record import iso_now
from pybox._boxes.relay import EventRelay
from pybox._core import wire
from pybox._core.boxquote import BoxQuote, quoting
from pybox._core.capture import HeadTailCapture
from pybox._core.errors import EngineError, SandboxError
from pybox._core.events import EventSink, FileReturned, RunStarted
from pybox._core.limits import MIB, Limits
from pybox._core.receipt import KernelObserved, Unknown
from pybox._core.request import RunRequest
from pybox._engine import AttachStream

if TYPE_CHECKING:
    from pybox._boxes.box import Box

SAMPLE_INTERVAL_S = 0.01
DRAIN_AFTER_KILL_S = 5.0
DRAIN_AFTER_EXIT_S = 15.0
# Protocol 2: how long the bootstrap has to end a program pybox stopped before
# pybox ends the whole box instead.
STOP_GRACE_S = 5.0
# Protocol 1: a stopped box is killed once its output has been quiet this long
# (what the bootstrap was still relaying is taken in), or this late at most.
STOP_QUIET_S = 0.05
STOP_SETTLE_S = 0.5
BOOTSTRAP_DIAGNOSTICS_BYTES = 16384
CANCEL_POLL_S = 0.1


_REPORTS = {
    wire.K_STARTED: "a start report",
    wire.K_EXIT: "an exit report",
    wire.K_FILE: "a returned file's header",
    wire.K_FILES_DONE: "a returned-files report",
    wire.K_ERROR: "a bootstrap error",
}


class ProgramRun:
    """The mutable state of one program in `box`. `run()` once, then `record()`."""

    def __init__(
        self,
        box: Box,
        request: RunRequest,
        *,
        run_id: str,
        files_dir: Path | None,
        cancel: threading.Event | None,
        on_event: EventSink | None,
        leftovers_swept: int,
        limits: Limits | None = None,
    ) -> None:
        self.box = box
        self.request = request
        self.limits = limits = box.limits if limits is None else limits
        self.run_id = run_id
        # In the payload's header and in every report of the run PID 1 sends back:
        # a report without it was written by something else in the box.
        self.token = secrets.token_hex(wire.RUN_TOKEN_CHARS // 2)
        self.cancel = cancel
        self.leftovers_swept = leftovers_swept
        self.many = box.protocol in wire.KEEPS_BOX
        # A fresh box's first program counts from the box's own beginning.
        self.first_in_fresh_box = box.programs == 0 and box.source == "fresh"
        if self.first_in_fresh_box:
            self.t0, self.started_at = box.t0, box.created_at
        else:
            self.t0, self.started_at = time.monotonic(), iso_now()
        self.source = box.source if box.programs == 0 else "same_box"
        # The ready report a box's starter already read (the pool's, or `Box.open`'s).
        self.ready_ahead = box.ready_report if box.programs == 0 else None
        waited = None if self.first_in_fresh_box else box.idle_since
        self.waited_s = None if waited is None else round(self.t0 - waited, 4)
        box.programs += 1
        self.marks: dict[str, float] = {}
        self.sandbox_error: str | None = None
        self.sandbox_error_quote: BoxQuote | None = None
        self.deadline_kill = False
        self.cancelled = False
        self._killer: threading.Thread | None = None
        self.exit_info: dict[str, Any] | None = None
        self.files_report: dict[str, Any] | None = None
        self.bootstrap_error: str | None = None
        self.preload_report: dict[str, Any] | None = None
        # After the exit report only the returned files are at stake: a failure
        # there is listed in `unknown` and never replaces the program's status.
        self.files_lost: str | None = None
        self.files_lost_quote: BoxQuote | None = None
        self.acked = False  # the program's end acknowledged: protocol 2's next may follow
        self.stdout = HeadTailCapture(limits.output_bytes)
        self.stderr = HeadTailCapture(limits.output_bytes)
        self.diagnostics = bytearray()
        self.kernel: KernelObserved = empty_observation(SAMPLE_INTERVAL_S)
        self.kernel_baseline: KernelObserved | None = None
        self.unknown: list[Unknown] = []
        self.files = (
            FilesReceiver(files_dir, limits.output_files, limits.output_files_bytes)
            if files_dir is not None and request.collect_outputs
            else None
        )
        self.events = EventRelay(on_event, limits.output_bytes)

    def box_failed(self, exc: SandboxError | EngineError) -> str:
        """Record that the box (not the program) failed; the short reason for the box."""
        if isinstance(exc, SandboxError):
            self.sandbox_error, self.sandbox_error_quote = str(exc), exc.quote
            return str(exc)[:300]
        self.sandbox_error = f"The engine failed during the run: {exc}"
        return "the engine failed"

    def _mark(self, name: str) -> None:
        self.marks[name] = time.monotonic()

    # -- the program ----------------------------------------------------------------

    def run(self) -> None:
        """Send the code and watch it to its end (or its kill)."""
        box = self.box
        stream = box.stream
        assert stream is not None and box.container_id is not None
        try:
            if self.ready_ahead is not None:
                self._bootstrap_ready(self.ready_ahead)
            sampler = box.sampler
            if not self.first_in_fresh_box and sampler is not None and sampler.sample(force=True):
                # Counted totals start when the code arrives, not when the box did.
                self.kernel_baseline, _ = sampler.observation()
            self._send_payload(stream)
            self._watch(stream)
        finally:
            if self._killer is not None:
                self._killer.join(timeout=DRAIN_AFTER_KILL_S)
        if self.exit_info is None and not (self.deadline_kill or self.cancelled):
            box_words = self.bootstrap_error or self._diagnostics_text()
            reason = box_words or "no exit report"
            # The box ended without reporting: let the engine's evidence speak (OOM, exit code).
            if box_words:
                text, quote = quoting("the box ended without one (", box_words, ")")
                self.unknown.append(Unknown("the program's own exit report", text, quote))
            else:
                self.unknown.append(
                    Unknown(
                        "the program's own exit report", f"the box ended without one ({reason})"
                    )
                )
            if self.many:
                box.broken = box.broken or f"it ended without an exit report ({reason[:200]})"
            if self.bootstrap_error is not None:
                message, quote = quoting("The in-box bootstrap failed: ", self.bootstrap_error)
                raise SandboxError(message, quote=quote)

    def _send_payload(self, stream: AttachStream) -> None:
        box = self.box
        payload = program_payload(
            self.request,
            self.limits,
            python_path=box.image.python_path,
            collect_outputs=self.files is not None,
            protocol=box.protocol,
            isolation=box.spec.isolation,
            token=self.token,
        )
        self.events.emit(RunStarted(self.run_id, self.source))
        for chunk in payload:
            stream.send(chunk)
        self._mark("code_sent")

    def _watch(self, stream: AttachStream) -> None:
        box = self.box
        decoder = box.decoder
        sampler = box.sampler
        deadline = self.marks["code_sent"] + self.limits.timeout_s
        drain_until: float | None = None
        stop_until: float | None = None  # a stop was asked for: kill by then if still running
        settle_end: float | None = None  # protocol 1's stop: the latest kill, however busy
        next_sample = time.monotonic() + SAMPLE_INTERVAL_S
        data = b""  # first, whatever the box sent after the last program
        ended = False
        while True:
            if self._take(decoder, data, stream) and drain_until is None:
                # Time to receive the returned files, at a modest 32 MiB/s.
                budget = DRAIN_AFTER_EXIT_S + self.limits.output_files_bytes / (32 * MIB)
                drain_until = time.monotonic() + budget
            if self.many and self.acked:
                return
            now = time.monotonic()
            if drain_until is None and stop_until is None:
                cancelled = self.cancel is not None and self.cancel.is_set()
                if self.exit_info is None and (now >= deadline or cancelled):
                    if self.many:
                        self._stop(stream, deadline_kill=now >= deadline)
                        stop_until = now + STOP_GRACE_S
                    elif now < deadline:
                        # A kill loses what the bootstrap has read from the program
                        # but not yet sent: let it settle first.
                        self.cancelled = True
                        settle_end = min(now + STOP_SETTLE_S, deadline)
                        stop_until = min(now + STOP_QUIET_S, settle_end)
                    else:
                        self._kill(deadline_kill=now >= deadline)
                        drain_until = now + DRAIN_AFTER_KILL_S
            elif drain_until is None and stop_until is not None and self.exit_info is None:
                if now >= stop_until:
                    if self.many:
                        # The bootstrap did not end the program: end the box.
                        box.broken = "its bootstrap did not stop the program when asked"
                    self._kill(deadline_kill=self.deadline_kill)
                    drain_until = now + DRAIN_AFTER_KILL_S
            elif drain_until is not None and now >= drain_until:
                break  # the forced removal ends whatever is left
            if sampler is not None and now >= next_sample and self.exit_info is None:
                sampler.sample()
                next_sample = now + SAMPLE_INTERVAL_S
            until = drain_until or (stop_until if self.exit_info is None else None) or deadline
            wait = until - now
            if sampler is not None and self.exit_info is None:
                wait = min(wait, next_sample - now)
            if self.cancel is not None:
                wait = min(wait, CANCEL_POLL_S)
            chunk = stream.read(max(wait, 0.0))
            data = b""
            if chunk is None:
                continue
            source, data = chunk
            if settle_end is not None and drain_until is None:
                stop_until = min(time.monotonic() + STOP_QUIET_S, settle_end)  # not quiet yet
            if source == 0:
                ended = True
                break
            if source == 2:
                room = BOOTSTRAP_DIAGNOSTICS_BYTES - len(self.diagnostics)
                self.diagnostics += data[: max(room, 0)]
                data = b""
        if self.many:
            box.broken = box.broken or (
                "it ended" if ended else "it did not finish sending its results"
            )
        if decoder.pending_bytes and self.exit_info is None and not self.deadline_kill:
            self.unknown.append(
                Unknown(
                    "the end of the box's output", "the stream stopped in the middle of a frame"
                )
            )

    def _take(self, decoder: wire.FrameDecoder, data: bytes, stream: AttachStream) -> bool:
        """Decode and act on the box's bytes; True once the exit report arrived."""
        if self.files_lost is not None:
            return False  # the transfer broke off; wait for the box's end, decode nothing
        exited = False
        try:
            for frame in decoder.feed(data):
                exited = self._handle(frame, stream) or exited
                if self.many and self.acked:
                    # What follows belongs to the next program (the box's ready report).
                    break
        except wire.ProtocolError as exc:
            if self.exit_info is None:
                raise
            self._files_broke_off(
                "the box broke the protocol while sending them", str(exc), exc.quote
            )
            self._ack(stream)
            if self.many:
                self.box.broken = "it broke the protocol"
        return exited

    def _report(self, frame: wire.Frame, *, token_optional: bool = False) -> dict[str, Any]:
        """A report of this run: it must carry the run's token, which only PID 1
        knows. Under gVisor a program can write to the box's stdout (its PID 1's
        descriptors are open to it, docs/isolation.md): such a forged report ends
        the run as a sandbox error and the box with it, never taken for PID 1's.
        `token_optional`: a bootstrap error before the program started may come
        from before PID 1 read the header."""
        report = frame.json()
        token = report.get("token")
        if token == self.token or (token is None and token_optional):
            return report
        what = _REPORTS.get(frame.kind, f"{frame.kind!r}")
        raise wire.ProtocolError(
            f"The box sent {what} that does not carry this run's token: "
            "something in the box other than pybox's bootstrap wrote it (the program "
            "reached the bootstrap's output). The run and the box end."
        )

    def _handle(self, frame: wire.Frame, stream: AttachStream) -> bool:
        """Act on one frame; True once the program's exit report arrived."""
        kind = frame.kind
        if kind == wire.K_STDOUT:
            self.stdout.feed(frame.data)
            self.events.output("stdout", frame.data)
        elif kind == wire.K_STDERR:
            self.stderr.feed(frame.data)
            self.events.output("stderr", frame.data)
        elif kind in (wire.K_DATA, wire.K_FILE):
            if self.files is None:
                raise wire.ProtocolError("The box sent a file that was not asked for.")
            received = len(self.files.files)
            if kind == wire.K_DATA:
                self.files.data(frame.data)
            else:
                self.files.begin(self._report(frame))
            for returned in self.files.files[received:]:
                self.events.emit(FileReturned(returned.path, returned.size_bytes))
        elif kind == wire.K_STARTED:
            self._mark("program_started")
            preload = self._report(frame).get("preload")
            self.preload_report = preload if isinstance(preload, dict) else None
        elif kind == wire.K_READY:
            self._bootstrap_ready(frame.json())
        elif kind == wire.K_ERROR and self.exit_info is not None:
            last_words = str(self._report(frame).get("message"))[:2000]
            self._files_broke_off(
                "the bootstrap failed while sending them", last_words, BoxQuote(0, len(last_words))
            )
            self._ack(stream)
        elif kind == wire.K_ERROR:
            started = "program_started" in self.marks
            message = self._report(frame, token_optional=not started).get("message")
            self.bootstrap_error = str(message)[:2000]
        elif kind == wire.K_EXIT and self.exit_info is None:
            return self._exit_reported(frame, stream)
        elif kind == wire.K_FILES_DONE and self.exit_info is not None and self.files_report is None:
            self.files_report = self._report(frame)
            self._ack(stream)
        return False

    def _ack(self, stream: AttachStream) -> None:
        if not self.acked:
            try:
                stream.send(wire.ACK)
            except EngineError:
                # Protocol 1's ACK only lets the bootstrap end before its short wait
                # is over: a box that has already ended (Podman closes the attach
                # connection with the box) has lost nothing. Protocol 2's is needed.
                if self.many:
                    raise
            self.acked = True

    def _files_broke_off(self, what: str, detail: str, quote: BoxQuote | None) -> None:
        """Why the returned files broke off: `what (detail)`, where `quote` (relative
        to `detail`) marks the box's words in the detail."""
        if self.files_lost is None:
            self.files_lost = f"{what} ({detail})"
            self.files_lost_quote = None if quote is None else quote.shifted(len(what) + 2)

    def _bootstrap_ready(self, report: dict[str, Any]) -> None:
        self._mark("bootstrap_ready")
        self.unknown.extend(check_ready(report, self.box.spec.isolation))

    def _exit_reported(self, frame: wire.Frame, stream: AttachStream) -> bool:
        self.exit_info = self._report(frame)
        self._mark("program_ended")
        if self.many:
            refused = not_started_for_room(self.exit_info, self.limits.writable_bytes)
            if refused is not None:
                self.sandbox_error = refused
        # The box is still there (it waits for the acknowledgement): last sample.
        if self.box.sampler is not None:
            self.box.sampler.sample(force=True)
        stopped = self.many and self.exit_info.get("stopped") is True
        if self.files is None or self.exit_info.get("backstop") or stopped:
            self._ack(stream)
        return True

    def _stop(self, stream: AttachStream, *, deadline_kill: bool) -> None:
        """Protocol 2: ask the bootstrap to end the program (and all it started)."""
        if self.box.sampler is not None:
            self.box.sampler.sample(force=True)
        self._mark("killed")
        if deadline_kill:
            self.deadline_kill = True
        else:
            self.cancelled = True
        stream.send(wire.STOP)

    def _kill(self, *, deadline_kill: bool) -> None:
        """Record the kill, then ask the engine for it without waiting on the answer.

        The engine may not report a killed box as stopped until its output has
        been read, so waiting here while not reading would deadlock.
        """
        container_id = self.box.container_id
        assert container_id is not None
        if self.box.sampler is not None:
            self.box.sampler.sample(force=True)
        self.marks.setdefault("killed", time.monotonic())
        if deadline_kill:
            self.deadline_kill = True
        else:
            self.cancelled = True
        if self.many:
            self.box.broken = self.box.broken or "pybox killed it"
        engine = self.box.context.engine

        def kill() -> None:
            try:
                engine.kill_container(container_id)
            except EngineError as exc:
                self.unknown.append(Unknown("the engine's answer to pybox's kill", str(exc)))

        self._killer = threading.Thread(target=kill, name=f"pybox-kill-{self.run_id}", daemon=True)
        self._killer.start()

    def _diagnostics_text(self) -> str:
        return self.diagnostics.decode("utf-8", "replace").strip()[-2000:]


def not_started_for_room(exit_info: dict[str, Any], writable_bytes: int) -> str | None:
    """pybox's words for a later program the box did not start because the
    workspace had no room for its files (None: the box did not say so). Only
    numbers are taken from the box's report; the box and its files stay."""
    if exit_info.get("not_started") != "workspace_full":
        return None

    def count(key: str) -> str:
        value = exit_info.get(key)
        ok = isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**63
        return f"{value} bytes" if ok else "an unknown number of bytes"

    return (
        f"The sandbox's workspace is full: this run's files need {count('needed_bytes')} and "
        f"{count('free_bytes')} of its {count('workspace_bytes')} are free (the box's count, "
        f"untrusted; /pybox holds at most {writable_bytes} bytes, the writable space limit). "
        "The program was not started and the sandbox is kept: delete files in its "
        "workspace to make room."
    )
