"""Progress notifications for a run, carrying its output as it arrives.

A client that sends a `progressToken` gets `notifications/progress` while the
tool call waits for the run: `progress` is the seconds so far, `total` the
run's timeout, and `message` says how far the run is and, when the program
printed something since the last notification, that output, in the same
untrusted sections as the final result (see `_sections.output_sections`).

Bounds, so neither a chatty program nor a slow client costs more than this:
- at most one notification per `OUTPUT_INTERVAL_S` with output (chunks that
  arrive meanwhile are coalesced), and one per `HEARTBEAT_S` without;
- at most `OUTPUT_NOTICE_BYTES` of shown output text per notification, over
  both streams, escapes included: when more arrived since the last one, the
  newest part is shown and the notification names the bytes skipped (the
  result and `get_result` with offsets have all of it);
- the notifications are sent from the waiting call's own thread: a client
  that reads slowly delays the next notification, never the run, which ends
  at its own limits in its own thread; the output waits in the run's live
  buffer, at most the output cap per stream.
"""

from __future__ import annotations

import time

from pybox._core.display import neutralise_text, plural
from pybox._frontends.mcp._live import STREAMS, Page, Stream
from pybox._frontends.mcp._present import Offsets
from pybox._frontends.mcp._runs import Run
from pybox._frontends.mcp._sections import output_sections
from pybox._frontends.mcp._toolbox import Progress

HEARTBEAT_S = 1.0
OUTPUT_INTERVAL_S = 0.15
OUTPUT_NOTICE_BYTES = 16 * 1024
MIN_SHOWN_BYTES = 64  # the smallest tail shrinking to fit ever goes down to


class OutputProgress:
    """Sends one run's progress, with its new output, when one is due (`tick`)."""

    def __init__(
        self,
        run: Run,
        progress: Progress,
        total_s: float,
        offsets: Offsets | None = None,
        *,
        notice_bytes: int = OUTPUT_NOTICE_BYTES,
        interval_s: float = OUTPUT_INTERVAL_S,
        heartbeat_s: float = HEARTBEAT_S,
    ) -> None:
        self._run = run
        self._progress = progress
        self._total_s = total_s
        self._sent: dict[Stream, int] = {s: (offsets or {}).get(s, 0) for s in STREAMS}
        self._notice_bytes = notice_bytes
        self._interval_s = interval_s
        self._heartbeat_s = heartbeat_s
        self._last_at: float | None = None
        self._last_value = -1.0

    def tick(self) -> None:
        """Send a notification if one is due: new output after the interval, or the
        heartbeat. Call it often; it decides."""
        now = time.monotonic()
        since = None if self._last_at is None else now - self._last_at
        if since is not None and since < self._interval_s:
            return
        sizes = self._run.live.sizes()
        pages = self._new_output(sizes)
        if not pages and since is not None and since < self._heartbeat_s:
            return
        self._send(now, sizes, pages)

    def _new_output(self, sizes: dict[Stream, int]) -> list[tuple[Page, int]]:
        """The newest output of each stream since the last notification, within the
        budget, with where the skipped part began; [] when nothing new is whole yet."""
        waiting = [s for s in STREAMS if sizes[s] > self._sent[s]]
        found = []
        for stream in waiting:
            budget = self._notice_bytes // len(waiting)
            page = self._fitting_tail(stream, budget)
            if page is not None and page.data:
                found.append((page, self._sent[stream]))
        return found

    def _fitting_tail(self, stream: Stream, budget: int) -> Page | None:
        """The newest output whose shown (escaped) text fits `budget` bytes."""
        size = budget
        while True:
            page = self._run.live.tail(stream, self._sent[stream], size)
            if page is None or size <= MIN_SHOWN_BYTES:
                return page
            if len(_shown(page).encode("utf-8", "surrogatepass")) <= budget:
                return page
            size //= 2

    def _send(self, now: float, sizes: dict[Stream, int], pages: list[tuple[Page, int]]) -> None:
        elapsed = self._run.elapsed_s()
        value = round(max(elapsed, self._last_value + 0.001), 3)  # must grow every time
        for page, _ in pages:  # output may have arrived since the sizes were read
            sizes[page.stream] = max(sizes[page.stream], page.buffered)
        so_far = ", ".join(f"{s} {sizes[s]} B" for s in STREAMS)
        lines = [f"run {self._run.run_id}: {elapsed:.1f} s of at most {self._total_s:g} s"]
        if pages:
            lines[0] += f"; output so far: {so_far}"
        sections = []
        for page, sent in pages:
            notes = [f"offset {page.offset}, {plural(len(page.data), 'byte')}"]
            if page.offset > sent:
                notes.append(
                    f"{page.offset - sent} earlier bytes from offset {sent} not shown live: "
                    f"get_result with {page.stream}_offset={sent} has them"
                )
            sections.append((page.stream, page.data.decode("utf-8", "replace"), notes))
            self._sent[page.stream] = page.next_offset
        lines.extend(output_sections(sections))
        self._last_at = now
        self._last_value = value
        self._progress(value, self._total_s, "\n".join(lines))


def _shown(page: Page) -> str:
    return neutralise_text(page.data.decode("utf-8", "replace"))
