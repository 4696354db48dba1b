"""`pybox exec`'s program output, shown as it arrives.

Each stream's head (the first half of the output cap, the part the receipt
keeps from the start) is shown live, in arrival order; at the end, whatever
else the receipt kept follows: the rest of a stream that fit, or the omission
notice and the tail of one that did not. What is printed is therefore exactly
the receipt's captured output, never more, whatever the program prints.

The writing happens on a thread of its own, so a stalled reader (`| less`, a
pipe nobody drains) never delays the box's deadline, kill or removal. A reader
that goes away (`| head -1`) ends the showing of that stream, not the run: the
program runs to its end, its box is removed, and the receipt says what was lost.
On a terminal the output goes through `neutralise_output`, piece by piece
exactly as it would have gone whole (see SECURITY.md, "Output pybox prints").
"""

from __future__ import annotations

import codecs
import os
import sys
from typing import Literal, TextIO

from pybox._boxes.record import RunOutcome
from pybox._core.display import neutralise_text
from pybox._core.events import OutputChunk, RunEvent
from pybox._frontends.cli._common import is_terminal
from pybox._orchestration.live import EventPump

StreamName = Literal["stdout", "stderr"]
STREAMS: tuple[StreamName, ...] = ("stdout", "stderr")


class ShownStream:
    """One of pybox's output streams, showing one of the program's."""

    def __init__(self, target: TextIO) -> None:
        self.target = target
        self.terminal = is_terminal(target)
        # On a terminal, bytes are decoded across pieces (a character split between
        # two pieces is one character), and a CR at a piece's end waits for the next:
        # before an LF it ends a line, otherwise it is shown as an escape.
        self._decoder = codecs.getincrementaldecoder("utf-8")("surrogateescape")
        self._held_cr = False
        self.last = b""  # the last byte written
        self.closed = False  # a write failed: the reader is gone

    def neutralised(self, data: bytes, final: bool) -> bytes:
        text = self._decoder.decode(data, final)
        if self._held_cr:
            text, self._held_cr = "\r" + text, False
        if not final and text.endswith("\r"):
            text, self._held_cr = text[:-1], True
        return neutralise_text(text).encode("utf-8")

    def write(self, data: bytes, final: bool = False) -> bool:
        """Write `data` (shown safely on a terminal); whether anything was written."""
        if self.closed:
            return False
        shown = self.neutralised(data, final) if self.terminal else data
        if not shown:
            return False
        try:
            self.target.flush()
            self.target.buffer.write(shown)
            self.target.flush()
        except (OSError, ValueError):  # EPIPE, a closed or broken stream
            self.closed = True
            _discard_from_now_on(self.target)
            return False
        self.last = shown[-1:]
        return True


def _discard_from_now_on(target: TextIO) -> None:
    """Point the stream's descriptor at /dev/null, so what is still buffered in it
    cannot fail again (Python reports such a failure at exit with a traceback)."""
    try:
        fd = target.fileno()
        devnull = os.open(os.devnull, os.O_WRONLY)
    except (OSError, ValueError):
        return
    try:
        os.dup2(devnull, fd)
    except OSError:
        pass
    finally:
        os.close(devnull)


class LiveOutput:
    """The sink of `pybox exec`'s run events (`sink`), then the rest at the end (`finish`)."""

    def __init__(
        self, output_bytes: int, stdout: TextIO | None = None, stderr: TextIO | None = None
    ) -> None:
        self._head_bytes = output_bytes - output_bytes // 2  # as HeadTailCapture keeps
        self._streams: dict[StreamName, ShownStream] = {
            "stdout": ShownStream(stdout or sys.stdout),
            "stderr": ShownStream(stderr or sys.stderr),
        }
        self._taken: dict[StreamName, int] = {"stdout": 0, "stderr": 0}
        self._last_written: StreamName | None = None
        self._pump = EventPump(self._show, name="pybox-live-output")
        self._finished = False

    def sink(self, event: RunEvent) -> None:
        """On the thread that watches the box: count, cut to the head, hand on. Never blocks."""
        if not isinstance(event, OutputChunk):
            return
        taken = self._taken[event.stream]
        room = self._head_bytes - taken
        if room <= 0 or event.offset != taken:  # only the head, and only without a gap
            return
        data = event.data[:room]
        self._taken[event.stream] = taken + len(data)
        self._pump(OutputChunk(event.stream, data, event.offset))

    def _show(self, event: RunEvent) -> None:
        if isinstance(event, OutputChunk):
            self._write(event.stream, event.data)

    def _write(self, name: StreamName, data: bytes, final: bool = False) -> None:
        if self._streams[name].write(data, final):
            self._last_written = name

    def finish(self, outcome: RunOutcome | None) -> tuple[bool, list[str]]:
        """Show the rest of what the receipt kept (nothing more when the run raised).

        Returns whether the output last shown where the receipt goes ended its
        line, and pybox's notes about output that could not be shown.
        """
        if self._finished:
            return self.ended_line(), []
        self._finished = True
        self._pump.close()
        for name in STREAMS:
            kept = (
                b"" if outcome is None else (outcome.stdout if name == "stdout" else outcome.stderr)
            )
            self._write(name, kept[self._taken[name] :], final=True)
        notes = [
            f"pybox: {name} was closed (its reader went away); the rest of the "
            f"program's {name} was not shown (the receipt counts all of it)."
            for name, stream in self._streams.items()
            if stream.closed
        ]
        return self.ended_line(), notes

    def ended_line(self) -> bool:
        """Whether the output last shown where the receipt goes (stderr) ended its line."""
        out, err = self._streams["stdout"], self._streams["stderr"]
        if out.terminal and err.terminal and self._last_written is not None:
            # Both on the one screen: whichever was written last.
            return self._streams[self._last_written].last in (b"", b"\n")
        return err.last in (b"", b"\n")
