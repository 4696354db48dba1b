"""A sandbox's box from any pybox process: found in the engine, its posture read
back again, attached, and its place in the box's stream found.

A sandbox (protocol 3) outlives the process that made it, so a later process,
or the same one after a let-go, attaches anew. What the box sent while nobody
was attached is gone, and a program a vanished pybox left running may still be
talking, so the new stream is not at a frame boundary: `resync` pings with a
fresh nonce and reads raw bytes, never decoding them, until the box's ready
report with that nonce. Only the bootstrap can send it: under runc the program
never sees the box's stdin, so it cannot know the nonce; under gVisor it can (PID 1's
descriptors are open to it, docs/isolation.md), so the report must also carry
the nonce's HMAC under the sandbox's link key, which only PID 1 holds.
"""

from __future__ import annotations

import dataclasses
import secrets
import time

from pybox._boxes.box import Box
from pybox._boxes.spec import BoxContext, refuse_if_weakened
from pybox._core import wire
from pybox._core.egress import EgressPlan
from pybox._core.errors import SandboxError
from pybox._core.images import ImageRecord
from pybox._core.limits import Limits
from pybox._core.seal import BoxFacts, check
from pybox._engine.keeper import KeeperGone

# A program a vanished pybox left running is stopped by the first ping; its
# bootstrap then waits for an acknowledgement, which the next ping carries.
PING_EVERY_S = 0.5
RESYNC_WAIT_S = 30.0
# On Podman the box's input is held open by its keeper (`pybox._engine.keeper`).
KEEPER_ENDED = "its keeper process ended (Podman then closes the box's input), "
_RAW_KEPT_BYTES = 1 << 16


class SandboxGone(SandboxError):
    """The sandbox's box is not in the engine, or no longer running."""


@dataclasses.dataclass(frozen=True)
class SandboxBox:
    """What identifies a sandbox's box: everything its spec was made from."""

    box_id: str
    container_id: str
    owner: str
    code_name: str
    expires_at: int
    idle_s: float
    uid: int
    store: str  # the tag of the store that records the sandbox
    egress: EgressPlan | None = None  # its network mode, when not none
    # Its link key (hex), sent to its PID 1 at creation ("": a sandbox made before
    # pybox kept one, whose answers to pings carry no proof).
    link_key: str = ""


def reattach(
    context: BoxContext,
    image: ImageRecord,
    limits: Limits,
    known: SandboxBox,
    *,
    resync_wait_s: float = RESYNC_WAIT_S,
) -> Box:
    """The sandbox's box, attached and ready for its next program. Its posture is
    read back and checked as at its creation: a changed box is refused."""
    engine = context.engine
    box = Box(
        dataclasses.replace(context, owner=known.owner),
        image,
        limits,
        known.code_name,
        box_id=known.box_id,
        expires_at=known.expires_at,
        protocol=wire.SANDBOX,
        payload_wait_s=known.idle_s,
        source="same_box",
        uid=known.uid,
        sandbox_store=known.store,
        egress=known.egress,
        link_key=known.link_key,
    )
    inspected = engine.inspect_container(known.container_id)
    if inspected is None:
        raise SandboxGone(f"The sandbox's box {box.spec.name} is no longer in the engine.")
    state = inspected.get("State") or {}
    if not state.get("Running"):
        raise SandboxGone(
            f"The sandbox's box {box.spec.name} is no longer running (it ended "
            f"{state.get('FinishedAt') or 'at a time the engine did not say'}, exit code "
            f"{state.get('ExitCode')}): its idle time or lifetime ran out, "
            f"{KEEPER_ENDED if engine.stdin_keeper else ''}or it failed."
        )
    box.create_sent = True
    box.container_id = str(inspected.get("Id") or known.container_id)
    box.created_at = str(inspected.get("Created") or box.created_at)
    box.posture = check(box.spec.box(), BoxFacts(engine.seal, inspected))
    refuse_if_weakened(box.posture)
    box.marks["verified"] = box.marks["started"] = time.monotonic()
    box.programs = 1  # never its first: each program's counters start at its code
    try:
        box.stream = engine.attach(box.container_id)
    except KeeperGone as exc:
        raise SandboxGone(str(exc)) from exc
    box.sampler = context.sampler_factory(box.container_id)
    try:
        resync(box, resync_wait_s)
    except BaseException:
        box.let_go = "pybox could not find its place in the box's stream"
        box._close()
        raise
    box.idle_since = time.monotonic()
    return box


def resync(box: Box, wait_s: float) -> None:
    """Ping until the box answers with this ping's nonce; what came before is
    dropped undecoded, and the next frame is the next program's."""
    stream = box.stream
    assert stream is not None
    nonce = secrets.token_hex(wire.PING_NONCE_CHARS // 2).encode("ascii")
    marker = b'"ping":"' + nonce + b'"}'
    if box.link_key:
        # Under gVisor a program can read the box's stdin, ping and all: only
        # PID 1 holds the link key that the proof needs.
        proof = wire.ping_proof(bytes.fromhex(box.link_key), nonce)
        marker = b'"ping":"' + nonce + b'","proof":"' + proof + b'"}'
    ping = wire.STOP + wire.ACK + wire.PING + nonce
    raw = bytearray()
    deadline = time.monotonic() + wait_s
    next_ping = 0.0
    while (now := time.monotonic()) < deadline:
        if now >= next_ping:
            stream.send(ping)
            next_ping = now + PING_EVERY_S
        chunk = stream.read(max(min(next_ping, deadline) - now, 0.0))
        if chunk is None:
            continue
        source, data = chunk
        if source == 0:
            raise SandboxGone(f"The sandbox's box {box.spec.name} ended while pybox attached.")
        if source != 1:
            continue  # the bootstrap's diagnostics
        raw += data
        found = raw.find(marker)
        if found >= 0:
            if len(raw) > found + len(marker):
                raise SandboxError(
                    f"The sandbox's box {box.spec.name} sent bytes after its ready report, "
                    "before any program: it does not follow the protocol."
                )
            box.decoder = wire.FrameDecoder()
            return
        del raw[: max(len(raw) - _RAW_KEPT_BYTES, 0)]
    raise SandboxError(
        f"The sandbox's box {box.spec.name} did not answer pybox within {wait_s:g} s; "
        "destroy the sandbox and create a new one."
    )
