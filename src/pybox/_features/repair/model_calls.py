"""The repair loop's calls to the model: one reply per round, within the budgets.

Each call is counted against the model-call, reply-byte and time budgets
before it is made; a rate limit is waited out only while the time budget
still allows a run after it. `ModelCalls` is part of `RepairLoop`, whose
budgets and counters it reads and updates.
"""

from __future__ import annotations

import threading
import time

from pybox._adapters.model_providers import ModelProvider
from pybox._core.display import plural
from pybox._core.errors import ModelError, ModelRateLimited, ModelReplyTooLarge, ModelTimeout
from pybox._core.limits import Limits
from pybox._core.repair import Prompt, RepairLimits, RepairRound, StopReason
from pybox._features.repair.stops import Stop

# Without a Retry-After, a rate-limited call is retried after this long.
DEFAULT_RATE_LIMIT_WAIT_S = 2.0


class ModelCalls:
    """Asks the model for one reply, waiting out rate limits within the repair's budgets."""

    # Set by `RepairLoop`: its bounds, its counters, its deadline.
    limits: RepairLimits
    run_limits: Limits
    provider: ModelProvider
    rounds: list[RepairRound]
    model_calls: int
    reply_bytes: int
    deadline: float

    def _left_s(self) -> float:
        return self.deadline - time.monotonic()

    def _ask(
        self, prompt: Prompt, cancel: threading.Event, number: int
    ) -> tuple[str, int, tuple[float, ...]]:
        """One reply from the model, waiting out rate limits within the budgets."""
        limits = self.limits
        calls = 0
        waits: list[float] = []
        asked_at = time.monotonic()

        def stop(reason: StopReason, detail: str, exhausted: str | None = None) -> Stop:
            # A round that called the model but got no reply still counts its calls and waits.
            if calls:
                self.rounds.append(
                    RepairRound(
                        number=number,
                        prompt_bytes=prompt.size_bytes,
                        model_calls=calls,
                        rate_limit_waits_s=tuple(waits),
                        reply_bytes=0,
                        reply_sha256=None,
                        proposal_sha256=None,
                        proposal_bytes=None,
                        invalid_reason=None,
                        run=None,
                        duration_s=round(time.monotonic() - asked_at, 3),
                    )
                )
            return Stop(reason, detail, exhausted)

        while True:
            if cancel.is_set():
                raise stop(StopReason.CANCELLED, "the repair was cancelled")
            if self.model_calls >= limits.model_calls:
                raise stop(
                    StopReason.BUDGET_EXHAUSTED,
                    f"all {plural(limits.model_calls, 'model call')} used",
                    "model_calls",
                )
            reply_left = limits.reply_bytes - self.reply_bytes
            if reply_left <= 0:
                raise stop(
                    StopReason.BUDGET_EXHAUSTED,
                    f"all {limits.reply_bytes} reply bytes were used",
                    "reply_bytes",
                )
            # Leave time for the proposal's run after the model's answer.
            time_left = self._left_s() - self.run_limits.timeout_s
            if time_left <= 0:
                raise stop(
                    StopReason.BUDGET_EXHAUSTED,
                    f"no time is left for a model call and a run within {limits.total_s:g} s",
                    "total_s",
                )
            self.model_calls += 1
            calls += 1
            try:
                reply = self.provider.ask(
                    prompt, timeout_s=time_left, max_reply_bytes=reply_left, cancel=cancel
                )
            except KeyboardInterrupt:
                raise stop(StopReason.CANCELLED, "the repair was interrupted") from None
            except ModelRateLimited as exc:
                wait = DEFAULT_RATE_LIMIT_WAIT_S if exc.retry_after_s is None else exc.retry_after_s
                if wait > self._left_s() - self.run_limits.timeout_s:
                    raise stop(
                        StopReason.BUDGET_EXHAUSTED,
                        f"{exc} Waiting {wait:g} s would pass the time budget",
                        "total_s",
                    ) from None
                waits.append(round(wait, 3))
                if cancel.wait(wait):
                    raise stop(StopReason.CANCELLED, "the repair was cancelled") from None
                continue
            except ModelTimeout as exc:
                if cancel.is_set():
                    raise stop(StopReason.CANCELLED, "the repair was cancelled") from None
                raise stop(StopReason.BUDGET_EXHAUSTED, str(exc), "total_s") from None
            except ModelReplyTooLarge as exc:
                self.reply_bytes = limits.reply_bytes
                raise stop(StopReason.BUDGET_EXHAUSTED, str(exc), "reply_bytes") from None
            except ModelError as exc:
                if cancel.is_set():
                    raise stop(StopReason.CANCELLED, "the repair was cancelled") from None
                raise stop(StopReason.MODEL_ERROR, str(exc)) from None
            self.reply_bytes += len(reply.encode("utf-8", "surrogatepass"))
            return reply, calls, tuple(waits)
