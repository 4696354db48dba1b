"""What a run tells its watcher while it happens (pure values).

A run emits `RunStarted` when its code is about to be sent, an `OutputChunk`
for each piece of stdout or stderr as it arrives (in arrival order), a
`FileReturned` for each returned file, and `RunEnded` once the receipt is
known. Output events stop once a stream has delivered `limits.output_bytes`
bytes live; the receipt's head-and-tail capture, byte counts and hashes are
unaffected. Everything in an `OutputChunk` came from inside the box and is
untrusted: a sink must not print it raw.

A sink that raises is not called again; the run goes on and its box is
removed as always.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class RunStarted:
    """The code is about to be sent into the box."""

    run_id: str
    box_source: str  # "fresh", "warm_pool" or "same_box", as in the receipt


@dataclass(frozen=True)
class OutputChunk:
    stream: Literal["stdout", "stderr"]
    data: bytes
    # The byte position of data[0] in everything that stream printed so far.
    offset: int


@dataclass(frozen=True)
class FileReturned:
    name: str
    size_bytes: int


@dataclass(frozen=True)
class RunEnded:
    run_id: str
    status: str
    exit_code: int | None


RunEvent = RunStarted | OutputChunk | FileReturned | RunEnded
EventSink = Callable[[RunEvent], None]
