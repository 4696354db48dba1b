"""Why a repair ends: the loop's two exceptions, caught in `RepairLoop.run`.

They never escape the loop: `run` turns each into the report's stop reason.
"""

from __future__ import annotations

from pybox._core.repair import RepairRun, StopReason


class Stop(Exception):
    """Why the loop ends; caught in `run`, never escapes it."""

    def __init__(self, reason: StopReason, detail: str, exhausted: str | None = None) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail
        self.exhausted = exhausted


class StopWithRun(Exception):
    """The run in progress was cancelled; its receipt is kept."""

    def __init__(self, run: RepairRun) -> None:
        super().__init__("cancelled")
        self.run = run
