"""A one-shot run: one program in a single-use box (a fresh one, or a warm one
from the pool), the box removed and its removal confirmed on every path."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from pybox._boxes.box import Box
from pybox._boxes.egress import EgressRequest, open_for_run
from pybox._boxes.outcome import close_observers, finish
from pybox._boxes.program import ProgramRun
from pybox._boxes.record import RunOutcome
from pybox._boxes.spec import EXPIRY_MARGIN_S, BoxContext
from pybox._core.errors import EngineError, SandboxError
from pybox._core.events import EventSink
from pybox._core.images import ImageRecord
from pybox._core.limits import Limits
from pybox._core.request import RunRequest


def run_once(
    context: BoxContext,
    request: RunRequest,
    limits: Limits,
    image: ImageRecord,
    *,
    run_id: str,
    files_dir: Path | None = None,
    cancel: threading.Event | None = None,
    leftovers_swept: int = 0,
    warm: Box | None = None,
    on_event: EventSink | None = None,
    egress: EgressRequest | None = None,
) -> RunOutcome:
    """One program in a single-use box: a fresh one, or `warm` (started ahead, from
    the pool). The box is removed, and its removal confirmed, on every path; so is
    its egress network (and proxy), made first when its mode is not none."""
    expires_at = int(time.time() + limits.timeout_s + EXPIRY_MARGIN_S)
    net, plan, request = open_for_run(
        context, egress, request, box_id=run_id, image=image, expires_at=expires_at, warm=warm
    )
    box = warm or Box(
        context,
        image,
        limits,
        request.code_name,
        box_id=run_id,
        expires_at=expires_at,
        egress=plan,
    )
    program = ProgramRun(
        box,
        request,
        run_id=run_id,
        files_dir=files_dir,
        cancel=cancel,
        on_event=on_event,
        leftovers_swept=leftovers_swept,
    )
    if warm is None:
        box.record_attempt()
    interrupted = False
    seen = None
    try:
        try:
            if warm is None:
                box.create()
                box.start()
            program.run()
        except KeyboardInterrupt:
            interrupted = program.cancelled = True
        except (SandboxError, EngineError) as exc:
            if isinstance(exc, EngineError) and box.container_id is None:
                raise  # before the box exists: an error for the caller, no receipt
            program.box_failed(exc)
    finally:
        # Every path, including Ctrl-C and engine errors, ends here.
        close_observers(program)
        box.remove(exit_reported=program.exit_info is not None, unknown=program.unknown)
        if net is not None:  # after the box: its connections are closed and logged
            seen = net.observed_then_close(program.unknown)
    return finish(program, interrupted, seen)
