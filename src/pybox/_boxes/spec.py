"""What a box is and how it is made: the session's context, the spec, create,
the posture read back, the refusal of a weakened box before it starts, and the
wait for a started box's bootstrap to report ready."""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from pybox._adapters.cgroups import SamplerFactory
from pybox._adapters.confinement import confinement
from pybox._adapters.state import StateStore
from pybox._core import wire
from pybox._core.display import plural
from pybox._core.egress import EgressPlan
from pybox._core.errors import EngineAPIError, ImageError, PostureMismatch, SandboxError
from pybox._core.images import ImageRecord
from pybox._core.limits import Limits
from pybox._core.posture import BOX_UID_COUNT, BOX_UID_FIRST, PAYLOAD_WAIT_S, RunBoxSpec
from pybox._core.runtimes import RUNC_CHOICE, RuntimeChoice
from pybox._core.seal import PostureReport, check
from pybox._core.seccomp import Confinement
from pybox._engine import AttachStream, Engine

EXPIRY_MARGIN_S = 120.0
# How long a started box's bootstrap has to report ready, when the starter waits for it.
READY_WAIT_S = 15.0


@dataclass(frozen=True)
class BoxContext:
    """What a box needs from its session: engine, state, identity, bootstrap."""

    engine: Engine
    state: StateStore
    owner: str
    pybox_version: str
    bootstrap_source: str
    sampler_factory: SamplerFactory
    isolation: RuntimeChoice = RUNC_CHOICE
    # Sessions pass the engine's own; a context made without one assumes a
    # local engine that reports nothing (this machine's AppArmor decides).
    confinement: Confinement = field(default_factory=lambda: confinement({}, local_host=True))
    # The CLI pool service's session (`pybox pool start`): its runs' receipts say so.
    pool_service: bool = False


def new_run_id() -> str:
    return secrets.token_hex(8)


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
    protocol: int = wire.ONE_PROGRAM,
    uid: int | None = None,
    sandbox_store: str = "",
    egress: EgressPlan | None = None,
    preload: tuple[str, ...] = (),
) -> RunBoxSpec:
    return RunBoxSpec(
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
        isolation=context.isolation,
        image_env=image.env,
        uid=new_box_uid() if uid is None else uid,
        sandbox_store=sandbox_store,
        payload_wait_s=payload_wait_s,
        protocol=protocol,
        egress=egress or EgressPlan(),
        preload=preload,
        # From the recorded image's recipe only: no request can ask for it.
        workspace_exec=image.workspace_exec,
    )


def create_box(engine: Engine, spec: RunBoxSpec, image: ImageRecord) -> str:
    """Create the box; a recorded image the engine no longer has is an image error."""
    try:
        return engine.create_box(spec.name, spec.box())
    except EngineAPIError as exc:
        if exc.status == 404 and "image" in exc.engine_message.lower():
            raise ImageError(
                f"The recorded image {image.name} ({image.image_id}) is no longer in "
                f"the engine. Rebuild it with `{image.rebuild_command}`."
            ) from exc
        raise


def read_back_posture(engine: Engine, spec: RunBoxSpec, container_id: str) -> PostureReport:
    facts = engine.box_facts(container_id)
    if facts is None:
        raise SandboxError("The box vanished between create and inspect.")
    return check(spec.box(), facts)


def refuse_if_weakened(posture: PostureReport) -> None:
    if not posture.ok:
        fields = tuple(m.field for m in posture.mismatches)
        details = "; ".join(m.describe() for m in posture.mismatches[:5])
        raise PostureMismatch(
            f"The box was refused before start: {plural(len(fields), 'setting')} "
            f"{'differs' if len(fields) == 1 else 'differ'} from what "
            f"pybox asked for: {details}",
            fields=fields,
        )


def wait_until_ready(stream: AttachStream, decoder: wire.FrameDecoder) -> dict[str, Any]:
    """Wait for the bootstrap's ready report: only a box whose bootstrap is up waits."""
    deadline = time.monotonic() + READY_WAIT_S
    diagnostics = bytearray()
    while (left := deadline - time.monotonic()) > 0:
        chunk = stream.read(left)
        if chunk is None:
            continue
        source, data = chunk
        if source == 0:
            break
        if source == 2:
            diagnostics += data[: 2000 - len(diagnostics)]
            continue
        frames = list(decoder.feed(data))
        if frames:
            if len(frames) > 1 or frames[0].kind != wire.K_READY:
                kinds = [frame.kind for frame in frames]
                raise SandboxError(
                    f"A waiting box's bootstrap sent {kinds} before its code arrived; "
                    "only its ready report was expected."
                )
            return frames[0].json()
    said = diagnostics.decode("utf-8", "replace").strip()
    raise SandboxError(
        f"A waiting box's bootstrap did not report ready within {READY_WAIT_S:g} s"
        + (f": {said}" if said else ".")
    )
