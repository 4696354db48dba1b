"""The byte protocol between pybox and the in-box bootstrap (pure, no I/O).

The constants mirror `pybox/_inbox/bootstrap.py` (which cannot import pybox);
a unit test keeps both sides equal. Everything decoded here came from inside
the box and is untrusted: sizes are bounded and malformed input raises
`ProtocolError` instead of growing a buffer.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pybox._core.errors import SandboxError

# Protocol 1: the box runs one program, then ends (one-shot and warm-pool boxes).
# Protocol 2: the box runs programs one after another, each a fresh process with
# its own deadline; between them nothing the previous one started is left running.
# Protocol 3 (a sandbox): protocol 2 in a box that outlives the process that made
# it. Its stdin stays open when pybox's connection ends (StdinOnce is false), so
# another pybox process can attach later; it waits for its next program until
# its idle time or its lifetime runs out, then ends itself; a controller that
# vanishes mid-program costs that program, never the box.
# A box's protocol is fixed when it is created (it is part of the entrypoint).
ONE_PROGRAM, MANY_PROGRAMS, SANDBOX = 1, 2, 3
PROTOCOLS = (ONE_PROGRAM, MANY_PROGRAMS, SANDBOX)
KEEPS_BOX = frozenset({MANY_PROGRAMS, SANDBOX})  # the box stays up between programs
VERSION = SANDBOX  # the newest protocol the bootstrap speaks
MAGIC = b"PBX1"
ACK = b"A"
# Protocols 2 and 3: stop the running program (sent at its deadline or on cancel);
# the box stays usable for the next program.
STOP = b"K"
# Protocol 3: PING and a nonce of PING_NONCE_CHARS lowercase hex digits. A box
# waiting for a program answers with a ready report carrying the nonce; STOP and
# ACK bytes before a payload are skipped. A newly attached pybox finds its place
# in the stream this way (see `Box.resync`).
PING = b"?"
PING_NONCE_CHARS = 32
# Protocol 3: LINK_KEY and LINK_KEY_CHARS lowercase hex digits, the first thing
# the pybox that made a sandbox's box sends it, before any program. The box's
# answer to a ping carries the nonce's HMAC-SHA256 under that key (`proof`):
# under gVisor a program can read the box's stdin and write to its stdout
# (docs/isolation.md), so a nonce alone would not prove the answer is PID 1's.
LINK_KEY = b"L"
LINK_KEY_CHARS = 64
# Every report of a run but the ready one carries the run's token (`token`),
# sent in its payload's header: a report without it was not written by PID 1.
RUN_TOKEN_CHARS = 32
CHUNK = 65536
K_READY, K_STARTED, K_STDOUT, K_STDERR = b"R", b"S", b"1", b"2"
K_FILE, K_DATA, K_EXIT, K_ERROR, K_FILES_DONE = b"F", b"D", b"X", b"E", b"Z"
KINDS = frozenset(
    {K_READY, K_STARTED, K_STDOUT, K_STDERR, K_FILE, K_DATA, K_EXIT, K_ERROR, K_FILES_DONE}
)
BACKSTOP_EXIT = 124
# JSON frames are small; data frames are at most one pipe read.
MAX_FRAME_BYTES = CHUNK
MAX_JSON_FRAME_BYTES = 1 << 20
# The box's files-done report lists this many skipped files at most (the bootstrap
# mirrors it), and counts the rest.
MAX_SKIPPED_LISTED = 100
MAX_SKIPPED_JSON_BYTES = 256 * 1024


class ProtocolError(SandboxError):
    """The box sent bytes that do not follow the bootstrap protocol."""


@dataclass(frozen=True)
class Frame:
    kind: bytes
    data: bytes

    def json(self) -> dict[str, Any]:
        try:
            value = json.loads(self.data)
        except ValueError:
            raise ProtocolError(f"The box sent a {self.kind!r} frame that is not JSON.") from None
        if not isinstance(value, dict):
            raise ProtocolError(f"The box sent a {self.kind!r} frame that is not a JSON object.")
        return value


class FrameDecoder:
    """Turns the box's stdout byte stream into frames, with bounded memory."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> Iterator[Frame]:
        self._buffer += data
        while len(self._buffer) >= 5:
            kind = bytes(self._buffer[:1])
            size = int.from_bytes(self._buffer[1:5], "big")
            if kind not in KINDS:
                raise ProtocolError(f"The box sent an unknown frame kind {kind!r}.")
            limit = (
                MAX_FRAME_BYTES if kind in (K_STDOUT, K_STDERR, K_DATA) else MAX_JSON_FRAME_BYTES
            )
            if size > limit:
                raise ProtocolError(
                    f"The box sent a {kind!r} frame of {size} bytes; the most allowed is {limit}."
                )
            if len(self._buffer) < 5 + size:
                return
            payload = bytes(self._buffer[5 : 5 + size])
            del self._buffer[: 5 + size]
            yield Frame(kind, payload)

    @property
    def pending_bytes(self) -> int:
        return len(self._buffer)


@dataclass(frozen=True)
class PayloadFile:
    name: str
    data: bytes


def encode_payload(
    *,
    argv: list[str],
    code_name: str,
    code: bytes,
    inputs: tuple[PayloadFile, ...],
    backstop_s: float,
    collect_outputs: bool,
    max_files: int,
    max_file_bytes: int,
    args: tuple[str, ...] = (),
    env: tuple[tuple[str, str], ...] = (),
    stdin: bytes = b"",
    version: int = VERSION,
    require_status: tuple[tuple[str, str], ...] = (),
    token: str = "",
) -> Iterator[bytes]:
    """The stdin payload for the bootstrap, as a sequence of byte chunks.

    The header is tab-separated lines (the bootstrap parses it without `json`);
    names never hold tabs or newlines: requests with control characters in
    names are refused before this point. The program's own arguments and
    environment variables may hold anything but NUL, so they travel as hex.
    After the code and inputs comes the program's stdin. `version` is the
    box's protocol; the bootstrap refuses a payload for another one.
    `require_status` are the lines of /proc/self/status (name, value) the box's
    PID 1 must read before it hands the code to the program (its seccomp mode and
    no-new-privileges); any other value and the program is never run. `token`
    is the run's: the bootstrap puts it in every report of the run.
    """
    lines: list[list[str]] = [
        ["version", str(version)],
        ["argv", *argv],
        ["code", code_name, str(len(code))],
        *(["input", item.name, str(len(item.data))] for item in inputs),
        *(["arg", _hex(arg)] for arg in args),
        *(["env", _hex(name), _hex(value)] for name, value in env),
        ["stdin", str(len(stdin))],
        ["backstop_s", repr(float(backstop_s))],
        ["collect_outputs", "1" if collect_outputs else "0"],
        ["max_files", str(max_files)],
        ["max_file_bytes", str(max_file_bytes)],
        *(["require_status", name, value] for name, value in require_status),
        *([["token", token]] if token else []),
    ]
    for fields in lines:
        if any("\t" in field or "\n" in field for field in fields):
            raise ValueError(f"a payload header field holds a tab or newline: {fields!r}")
    encoded = "".join("\t".join(fields) + "\n" for fields in lines).encode(
        "utf-8", "surrogateescape"
    )
    yield MAGIC + len(encoded).to_bytes(4, "big") + encoded
    yield code
    for item in inputs:
        yield item.data
    if stdin:
        yield stdin


def ping_proof(key: bytes, nonce: bytes) -> bytes:
    """What a sandbox's PID 1 answers a ping's `nonce` with: its HMAC under the link key."""
    return hmac.new(key, nonce, hashlib.sha256).hexdigest().encode("ascii")


def _hex(text: str) -> str:
    return text.encode("utf-8", "surrogateescape").hex()
