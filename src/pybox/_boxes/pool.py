"""A warm pool of pre-started, single-use boxes.

Each waiting box is a complete box: created with the same posture, read back
and verified, attached and started, its bootstrap waiting for code on stdin.
A run takes one, uses it once, and removes it like any other box; a worker
thread starts replacements in the background (up to the settings'
`concurrent_starts` at once, each in a thread of its own). Every run still gets a box nobody else
has used.

Boxes are kept per profile (image, limits, code file name). A profile exists
once something asked for it; it is emptied when nobody asked for it for
`idle_s`, and a box that waited that long is replaced, so no box waits
forever. The sum of the waiting boxes' memory limits stays within the budget.

The pool sizes itself to demand: each profile starts at `boxes_per_profile`;
a run that finds no box ready raises that profile's target by one (up to
`max_boxes_per_profile`, and the budget), and while runs miss, replacements
start at once instead of waiting for the run to end. After `SHRINK_AFTER_S`
without a miss the target falls by one (not below `boxes_per_profile`), and
a box beyond it is removed.

Waiting boxes carry the owner and expiry labels of every box, so a crashed
pybox's pool is swept like any leftover; and a waiting box's bootstrap exits
as soon as its owner's connection closes.

A waiting box is a box: with a `gate` (admission control) each one holds a box
slot from before it is created until it is removed, and a run that takes it
keeps that slot. The pool takes only a slot that is free while no run waits,
and does not start the box otherwise; while a run waits anywhere, it removes a
waiting box to give its slot back. So the pool never deadlocks against the cap.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from pybox._boxes.box import Box
from pybox._boxes.pool_values import (
    Held,
    PoolKey,
    PoolStats,
    ProfileState,
    ProfileStats,
    SlotGate,
)
from pybox._boxes.spec import EXPIRY_MARGIN_S, BoxContext, new_run_id
from pybox._core.errors import PyboxError
from pybox._core.pool import PoolSettings
from pybox._core.posture import PAYLOAD_WAIT_S
from pybox._core.runtimes import RuntimeChoice

FAILURE_BACKOFF_S = (1.0, 5.0, 30.0, 120.0)
# A replacement waits until the run that took a box is done (or this long):
# starting a box competes for the CPUs with the run's own end and teardown.
# Only while the boxes still waiting cover the runs in progress (see _next_job).
REFILL_HOLD_S = 1.0
# With no slot free for a box, look again after this long (not a failure).
SLOT_RETRY_S = 1.0
# A profile whose runs missed within this long is in demand: its replacements
# start at once (the hold above is for a caller with think-time).
DEMAND_WINDOW_S = 10.0
# Without a miss for this long, a profile's target falls by one box.
SHRINK_AFTER_S = 30.0


class WarmPool:
    """Thread-safe. `take()` never waits for a box: no box means the normal path."""

    def __init__(
        self,
        context: Callable[[RuntimeChoice], BoxContext],
        settings: PoolSettings,
        log: Callable[[str], None] | None = None,
        gate: SlotGate | None = None,
    ) -> None:
        self._context = context
        self._gate = gate
        self._slots: dict[str, Held] = {}  # box name -> the slot it holds
        self.settings = settings
        self._log = log or (lambda message: None)
        self._profiles: dict[PoolKey, ProfileState] = {}
        self._cond = threading.Condition()
        self._closed = False
        self._worker: threading.Thread | None = None
        self._starters: set[threading.Thread] = set()  # boxes being started now
        self._taken = self._missed = self._started = self._failed = 0
        self._dead: list[Box] = []  # waiting boxes found unusable, to remove

    # -- what runs see ---------------------------------------------------------------

    def want(self, key: PoolKey) -> None:
        """Keep boxes ready for this profile (from now until it idles out)."""
        with self._cond:
            self._touch(key)

    def take(self, key: PoolKey) -> Box | None:
        """A waiting box for this profile, if one is ready.

        Its replacement starts once `done(key)` says the run is over, or after
        `REFILL_HOLD_S`, whichever comes first.
        """
        with self._cond:
            profile = self._touch(key)
            if profile is None:
                self._missed += 1
                return None
            if not profile.waiting:
                self._miss(profile)
                return None
            while profile.waiting:
                box = profile.waiting.pop(0)
                # A waiting box says nothing until its code arrives: anything waiting
                # to be read (or the end of its stream) means it is no longer usable.
                # One that waited its idle time is close to ending itself: replace it.
                stale = time.monotonic() - box.ready_at > self.settings.idle_s
                if stale or box.has_news():
                    self._dead.append(box)
                    self._cond.notify_all()
                    continue
                self._taken += 1
                profile.in_use += 1
                profile.hold_until = time.monotonic() + REFILL_HOLD_S
                return box
            self._miss(profile)
            return None

    def _miss(self, profile: ProfileState) -> None:
        """No box was ready: count it, and keep one more ready from now on. Caller
        holds the lock."""
        self._missed += 1
        profile.misses += 1
        profile.last_miss = profile.last_resize = time.monotonic()
        ceiling = max(self.settings.max_boxes_per_profile, self.settings.boxes_per_profile)
        profile.target = min(profile.target + 1, ceiling)
        self._cond.notify_all()

    def done(self, key: PoolKey, box: Box | None = None) -> None:
        """The run that took `box` of this profile has ended (the box is removed):
        its slot is free, and the pool refills now."""
        if box is not None:
            self._release_slot(box)
        with self._cond:
            profile = self._profiles.get(key)
            if profile is not None and profile.in_use > 0:
                profile.in_use -= 1
                if profile.in_use == 0:
                    profile.hold_until = 0.0
            self._cond.notify_all()

    def stats(self) -> PoolStats:
        with self._cond:
            profiles = list(self._profiles.values())
            return PoolStats(
                profiles=len(profiles),
                waiting=sum(len(p.waiting) for p in profiles),
                starting=sum(p.starting for p in profiles),
                taken=self._taken,
                missed=self._missed,
                started=self._started,
                failed=self._failed,
                last_error=next((p.last_error for p in profiles if p.last_error), None),
            )

    def profile_stats(self) -> list[ProfileStats]:
        with self._cond:
            return [
                ProfileStats(p.key, len(p.waiting), p.starting, p.in_use, p.target, p.misses)
                for p in self._profiles.values()
            ]

    def wait_ready(self, key: PoolKey, timeout_s: float) -> bool:
        """Block until the profile has its boxes waiting (for warm-up and benchmarks)."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            self._touch(key)
            while True:
                profile = self._profiles.get(key)
                if profile is not None and len(profile.waiting) >= self.settings.boxes_per_profile:
                    return True
                left = deadline - time.monotonic()
                if left <= 0 or self._closed:
                    return False
                self._cond.wait(min(left, 0.05))

    def close(self) -> list[str]:
        """Stop refilling and remove every waiting box; names not confirmed gone."""
        with self._cond:
            self._closed = True
            boxes = [box for p in self._profiles.values() for box in p.waiting] + self._dead
            self._dead = []
            for profile in self._profiles.values():
                profile.waiting.clear()
            self._cond.notify_all()
            worker = self._worker
        if worker is not None and worker is not threading.current_thread():
            worker.join(timeout=30.0)
        with self._cond:
            starters = list(self._starters)
        for starter in starters:  # each removes the box it was starting
            starter.join(timeout=30.0)
        return [box.spec.name for box in boxes if not self._discard(box)]

    # -- the worker -------------------------------------------------------------------

    def _touch(self, key: PoolKey) -> ProfileState | None:
        """Note that the profile was asked for; start the worker. Caller holds the lock."""
        if self._closed or self.settings.boxes_per_profile == 0:
            return None
        now = time.monotonic()
        profile = self._profiles.get(key)
        if profile is None:
            if key.limits.memory_bytes > self.settings.memory_budget_bytes:
                return None
            profile = self._profiles[key] = ProfileState(
                key, now, target=self.settings.boxes_per_profile, last_resize=now
            )
        profile.last_asked = now
        if self._worker is None:
            self._worker = threading.Thread(target=self._work, name="pybox-pool", daemon=True)
            self._worker.start()
        self._cond.notify_all()
        return profile

    def _committed_memory(self) -> int:
        return sum(
            p.key.limits.memory_bytes * (len(p.waiting) + p.starting)
            for p in self._profiles.values()
        )

    def _next_job(self, now: float) -> tuple[str, ProfileState | None, Box | None] | None:
        """Caller holds the lock: what to do next, in order of urgency."""
        if self._dead:
            return "discard", None, self._dead.pop(0)
        holding = [p for p in self._profiles.values() if p.waiting]
        if holding and self._gate is not None and self._gate.wanted():
            # A run waits for a box slot: give the oldest waiting box's back.
            profile = min(holding, key=lambda p: p.waiting[0].ready_at)
            return "discard", profile, profile.waiting.pop(0)
        idle_s = self.settings.idle_s
        for key, profile in list(self._profiles.items()):
            if now - profile.last_asked > idle_s:
                if profile.waiting:
                    return "discard", profile, profile.waiting.pop(0)
                if profile.starting == 0:
                    del self._profiles[key]
                continue
            for box in profile.waiting:
                if now - box.ready_at > idle_s:
                    profile.waiting.remove(box)
                    return "discard", profile, box
            base = self.settings.boxes_per_profile
            if profile.target > base and now - profile.last_resize > SHRINK_AFTER_S:
                profile.target, profile.last_resize = profile.target - 1, now  # demand fell
            if len(profile.waiting) > profile.target:
                return "discard", profile, profile.waiting.pop(0)
        if len(self._starters) >= self.settings.concurrent_starts:
            return None
        for profile in self._profiles.values():
            short = len(profile.waiting) + profile.starting < profile.target
            room = (
                self._committed_memory() + profile.key.limits.memory_bytes
                <= self.settings.memory_budget_bytes
            )
            in_demand = now - profile.last_miss < DEMAND_WINDOW_S
            # Runs that overlap, more than the boxes waiting: the hold would be
            # renewed by each take and the next call miss, so start now. One run
            # at a time keeps the hold (its caller may think before the next).
            covered = profile.in_use < 2 or len(profile.waiting) >= profile.in_use
            hold = profile.hold_until if covered and not in_demand else 0.0
            if short and room and now >= max(profile.retry_at, hold):
                profile.starting += 1
                return "start", profile, None
        return None

    def _work(self) -> None:
        while True:
            with self._cond:
                job = None
                while not self._closed:
                    job = self._next_job(time.monotonic())
                    if job is not None:
                        break
                    self._cond.wait(timeout=0.25)
                if self._closed:
                    return
                assert job is not None
                action, profile, box = job
                if action == "start" and profile is not None:
                    starter = threading.Thread(
                        target=self._start_one,
                        args=(profile,),
                        name="pybox-pool-start",
                        daemon=True,
                    )
                    self._starters.add(starter)
                    starter.start()
                    continue
            if action == "discard" and box is not None:
                self._discard(box)

    def _start_one(self, profile: ProfileState) -> None:
        try:
            self._start_and_keep(profile)
        finally:
            with self._cond:
                self._starters.discard(threading.current_thread())
                self._cond.notify_all()

    def _start_and_keep(self, profile: ProfileState) -> None:
        held: Held | None = None
        try:
            if self._gate is not None:
                held = self._gate.try_hold("a warm pool box")
                if held is None:
                    with self._cond:  # every slot is in use or wanted: not a failure
                        profile.starting -= 1
                        profile.retry_at = time.monotonic() + SLOT_RETRY_S
                    return
            box: Box | None = self._start_box(profile.key)
            error = None
        except PyboxError as exc:
            box, error = None, str(exc)
        except (
            Exception
        ) as exc:  # the worker must survive anything; the run path does not depend on it
            box, error = None, f"{type(exc).__name__}: {exc}"
        with self._cond:
            profile.starting -= 1
            if box is not None and held is not None:
                self._slots[box.spec.name] = held
                held = None
            if box is not None and not self._closed:
                profile.waiting.append(box)
                profile.failures, profile.last_error = 0, None
                self._started += 1
                box = None
            elif error is not None:
                self._failed += 1
                profile.last_error = error
                delay = FAILURE_BACKOFF_S[min(profile.failures, len(FAILURE_BACKOFF_S) - 1)]
                profile.failures += 1
                profile.retry_at = time.monotonic() + delay
            self._cond.notify_all()
        if held is not None:  # no box holds it
            held.release()
        if error is not None:
            self._log(f"warm pool: could not start a box ({error}); runs take the normal path")
        if box is not None:  # the pool closed while it was starting
            self._discard(box)

    def _start_box(self, key: PoolKey) -> Box:
        """A box created, verified and started exactly as a fresh one, its bootstrap
        up and waiting for code."""
        context = self._context(key.runtime)
        limits = key.limits
        box = Box(
            context,
            key.image,
            limits,
            key.code_name,
            box_id=new_run_id(),
            expires_at=int(time.time() + self.settings.idle_s + limits.timeout_s + EXPIRY_MARGIN_S),
            # It waits its idle time, then ends itself even if this pybox froze.
            payload_wait_s=self.settings.idle_s + PAYLOAD_WAIT_S,
            source="warm_pool",
            # Its interpreter imports the image's modules while it waits.
            preload=key.image.preload,
        )
        box.record_attempt(warm_pool=True)
        try:
            box.create()
            box.start(await_ready=True)
            return box
        except BaseException:
            self._discard(box)
            raise

    def _discard(self, box: Box) -> bool:
        removal = box.remove(look=False)
        self._release_slot(box)
        if removal.error is not None:
            self._log(
                f"warm pool: could not remove {box.spec.name}: {removal.error}; `pybox sweep` will"
            )
        return removal.confirmed

    def _release_slot(self, box: Box) -> None:
        with self._cond:
            held = self._slots.pop(box.spec.name, None)
        if held is not None:
            held.release()
