"""Admission control: at most N boxes at once, a bounded queue, then "busy".

The limit holds across every pybox process of a user that shares a state
directory (the MCP server, CLI runs, API clients): a box slot is one of N lock
files `<state>/admission/slot-NN`, held with `flock` for the box's whole life,
from before it is created until its removal is confirmed. A run that finds
every slot held takes a place in the queue, one of M files `wait-NN`, and waits
at most `wait_s` for a slot; when every place is taken, or the wait runs out,
it is refused with `Busy`, which says how many run and wait, the settings, and
when to retry. Nothing is ever created for a refused run, and no request is
lost: it either gets its slot or hears `Busy` (or, when cancelled, `WaitCancelled`).
The kernel drops the locks of a process that dies, however it dies.

Order: first come, first served, across processes. A waiter's place file
holds its ticket (arrival time, pid, a counter); a waiter takes a slot only
when fewer waiters with older tickets are ahead of it than slots are free, and
a new run goes straight to a free slot only when nobody waits. Waiters look
every 5 to 50 ms, and at once when a slot of their own process frees. A waiter
past its own deadline (a stopped process) no longer holds the others up.

The warm pool's started, waiting boxes are boxes: each holds a slot too. The
pool only takes a slot that is free while nobody waits, and gives a waiting
box's slot back (removes the box) as soon as a run waits (see `PoolGate`).
"""

from __future__ import annotations

import itertools
import json
import math
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import Any

from pybox._adapters.lockfiles import LockFiles, lock_files
from pybox._core.admission import AdmissionConfig, AdmissionSettings
from pybox._core.errors import Busy, WaitCancelled

__all__ = [
    "Admission",
    "AdmissionConfig",
    "AdmissionSettings",
    "Busy",
    "PoolGate",
    "SessionAdmission",
    "Slot",
    "WaitCancelled",
]

SLOTS_FOLDER = "admission"
POLL_FIRST_S = 0.005
POLL_MAX_S = 0.05  # a waiter looks (and checks its cancel) at least this often
# An older waiter this far past its own deadline is stuck (stopped): not waited for.
STUCK_GRACE_S = 1.0
# A box takes about this long beyond its timeout to start and to be removed.
BOX_MARGIN_S = 5.0
RETRY_AFTER_MAX_S = 300.0


class _Local:
    """What this process's waiters for one folder share: a wake-up when one of the
    process's slots frees, and the runs' recent lengths (for "retry after")."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.mean_hold_s: float | None = None  # until a run has ended here


_TICKETS = itertools.count()


_LOCALS: dict[str, _Local] = {}
_LOCALS_LOCKS = [threading.Lock()]  # a list: a forked child replaces it


def _local(directory: Path) -> _Local:
    with _LOCALS_LOCKS[0]:
        return _LOCALS.setdefault(os.path.abspath(directory), _Local())


def _after_fork_in_child() -> None:
    """A forked child has none of its parent's waiters, and no lock another thread held."""
    _LOCALS.clear()
    _LOCALS_LOCKS[0] = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


class Slot:
    """One held box slot. `release()` (or leaving the `with` block) gives it back; once."""

    def __init__(self, table: LockFiles, local: _Local, index: int, what: str) -> None:
        self.index = index
        self.what = what
        self._table = table
        self._local = local
        self._since = time.monotonic()
        self._released = False
        self._lock = threading.Lock()

    def release(self) -> None:
        with self._lock:
            if self._released:
                return
            self._released = True
        self._table.release(self.index)
        held_s = time.monotonic() - self._since
        local = self._local
        with local.cond:
            mean = local.mean_hold_s
            local.mean_hold_s = held_s if mean is None else 0.8 * mean + 0.2 * held_s
            local.cond.notify_all()

    def __enter__(self) -> Slot:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()


class Admission:
    """The box slots and queue places of one state directory, as this process sees them.

    Cheap to make: every Admission of a directory in a process shares its lock
    files (lockfiles.py) and its wake-ups."""

    def __init__(self, state_dir: Path, settings: AdmissionSettings) -> None:
        self.settings = settings
        directory = state_dir / SLOTS_FOLDER
        self.directory = directory
        self._slots = lock_files(directory, "slot")
        self._places = lock_files(directory, "wait")
        self._local = _local(directory)

    @classmethod
    def for_engine(
        cls,
        state_dir: Path,
        config: AdmissionConfig,
        engine_info: Mapping[str, Any],
        default_memory_bytes: int,
    ) -> Admission:
        """Settled against the machine the engine runs boxes on (its `/info`; this
        machine's own figures when the engine does not say)."""
        memory = engine_info.get("MemTotal")
        cpus = engine_info.get("NCPU")
        if not isinstance(memory, int) or memory <= 0:
            memory = _local_memory_bytes()
        if not isinstance(cpus, int) or cpus <= 0:
            cpus = os.cpu_count()
        settings = config.settle(
            machine_memory_bytes=memory, cpus=cpus, default_memory_bytes=default_memory_bytes
        )
        return cls(state_dir, settings)

    # -- what runs see ----------------------------------------------------------------

    @contextmanager
    def slot(
        self,
        *,
        cancel: threading.Event | None = None,
        what: str = "a run",
        expected_s: float | None = None,
    ) -> Iterator[Slot]:
        """Hold a box slot for the `with` block, waiting in the queue if need be.

        Raises `Busy` when the queue is full or the wait ran out, `WaitCancelled`
        when `cancel` is set while waiting; Ctrl-C while waiting propagates. Either
        way the queue place is given back. `expected_s` (the run's timeout) only
        helps other runs' "retry after"."""
        held = self._acquire(cancel, what, expected_s)
        try:
            yield held
        finally:
            held.release()

    def try_slot(self, what: str, expected_s: float | None = None) -> Slot | None:
        """A free slot at once, or None; never ahead of a run that waits."""
        if self._places.any_held(self.settings.max_waiting):
            return None
        return self._take(what, expected_s)

    def running(self) -> int:
        """Box slots held now, by any process."""
        return len(self._slots.held(self.settings.max_running))

    def waiting(self) -> int:
        """Runs waiting for a slot now, in any process."""
        return len(self._places.held(self.settings.max_waiting))

    def anyone_waiting(self) -> bool:
        return self._places.any_held(self.settings.max_waiting)

    # -- the inside ----------------------------------------------------------------------

    def _take(self, what: str, expected_s: float | None) -> Slot | None:
        now = time.time()
        until = None if expected_s is None else now + expected_s + BOX_MARGIN_S
        note = json.dumps({"pid": os.getpid(), "what": what, "since": now, "until": until})
        index = self._slots.take(self.settings.max_running, note.encode())
        return None if index is None else Slot(self._slots, self._local, index, what)

    def _acquire(self, cancel: threading.Event | None, what: str, expected_s: float | None) -> Slot:
        if not self.anyone_waiting():  # nobody waits: no need to queue
            held = self._take(what, expected_s)
            if held is not None:
                return held
        ticket = (time.time_ns(), os.getpid(), next(_TICKETS))
        deadline = time.monotonic() + self.settings.wait_s
        place = self._take_place(what, ticket, time.time() + self.settings.wait_s)
        local = self._local
        pause = POLL_FIRST_S
        try:
            with local.cond:
                while True:
                    if self._my_turn(ticket):
                        held = self._take(what, expected_s)
                        if held is not None:
                            return held
                    if cancel is not None and cancel.is_set():
                        raise WaitCancelled(
                            f"{what[:1].upper()}{what[1:]} was stopped while it waited for a "
                            "box slot; nothing was started."
                        )
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    local.cond.wait(min(pause, left))
                    pause = min(pause * 2, POLL_MAX_S)
        finally:
            self._places.release(place)
            with local.cond:  # the next in line may be this process's
                local.cond.notify_all()
        raise self._busy(what, timed_out=True)

    def _my_turn(self, ticket: tuple[int, int, int]) -> bool:
        """Whether fewer live waiters are ahead of `ticket` than slots are free."""
        now = time.time()
        ahead = 0
        for note in self._places.held(self.settings.max_waiting):
            other = _ticket(note)
            if other is not None and other[0] < ticket and other[1] + STUCK_GRACE_S > now:
                ahead += 1
        if ahead == 0:
            return True
        free = self.settings.max_running - self.running()
        return free > ahead

    def _take_place(self, what: str, ticket: tuple[int, int, int], until: float) -> int:
        note = json.dumps({"ticket": list(ticket), "until": until}).encode()
        place = self._places.take(self.settings.max_waiting, note)
        if place is None:
            raise self._busy(what, timed_out=False)
        return place

    def _busy(self, what: str, *, timed_out: bool) -> Busy:
        settings = self.settings
        holders = self._slots.held(settings.max_running)
        running = len(holders)
        waiting = self.waiting()
        retry = self._retry_after_s(holders, waiting)
        if timed_out:
            head = (
                f"Busy: {what} waited {settings.wait_s:g} s (admission_wait_s) for a box "
                f"slot and none came free"
            )
        else:
            full = "the queue is full" if settings.max_waiting else "no run may wait"
            head = f"Busy: {what} was not started: every box slot is taken and {full}"
        message = (
            f"{head}; boxes running: {running} of at most {settings.max_running} "
            f"(max_running_boxes); runs waiting: {waiting} of at most {settings.max_waiting} "
            f"(max_waiting_runs). Nothing was started. Retry after {retry:g} s."
        )
        return Busy(
            message,
            retry_after_s=retry,
            running=running,
            max_running=settings.max_running,
            waiting=waiting,
            max_waiting=settings.max_waiting,
        )

    def _retry_after_s(self, holders: list[bytes], waiting: int) -> float:
        """When a slot is likely free for one more run: a run's length (the mean of
        those that ended here, else as long as the holders have held theirs) times
        the rounds the queue needs, no later than the holders' timeouts allow."""
        now = time.time()
        notes = [_fields(note) for note in holders]
        hold_s = self._local.mean_hold_s
        if hold_s is None:
            ages = sorted(now - since for since, _ in notes if since is not None)
            hold_s = ages[len(ages) // 2] if ages else 1.0
        slots = max(self.settings.max_running, 1)
        estimate = hold_s * (waiting // slots + 1)
        ends = sorted(max(until - now, 0.0) for _, until in notes if until is not None)
        if ends:
            estimate = min(estimate, ends[min(waiting, len(ends) - 1)])
        return float(min(max(math.ceil(estimate), 1), RETRY_AFTER_MAX_S))


def _ticket(note: bytes) -> tuple[tuple[int, int, int], float] | None:
    """A waiter's ticket and deadline from its place file; None if unreadable."""
    try:
        data = json.loads(note.decode("utf-8"))
        first, pid, count = (int(part) for part in data["ticket"])
        return (first, pid, count), float(data["until"])
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def _fields(note: bytes) -> tuple[float | None, float | None]:
    """A slot holder's `since` and `until` (seconds since the epoch), where it says."""
    try:
        data = json.loads(note.decode("utf-8"))
        found = (data.get("since"), data.get("until"))
    except (ValueError, AttributeError):
        return None, None
    since, until = (float(v) if isinstance(v, (int, float)) else None for v in found)
    return since, until


def _local_memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return None


class PoolGate:
    """What the warm pool asks admission (it sits below and cannot import it).

    A box the pool starts holds a slot like any box, taken only when one is free
    and no run waits (a pool that gets none does not start the box); while its
    boxes hold slots the pool asks `wanted()` and, when a run waits anywhere,
    removes a waiting box to give its slot back. So the pool never holds a run up
    for longer than one box's removal."""

    def __init__(self, admission: Callable[[], Admission]) -> None:
        self._admission = admission

    def try_hold(self, what: str) -> Slot | None:
        return self._admission().try_slot(what)

    def wanted(self) -> bool:
        return self._admission().anyone_waiting()


class SessionAdmission:
    """A session's Admission, settled on first use: the default cap needs the engine's
    machine, and a refused request must not have to reach the engine."""

    def __init__(
        self,
        state_dir: Path,
        config: AdmissionConfig | None,
        engine_info: Callable[[], Mapping[str, Any]],
        default_memory_bytes: int,
    ) -> None:
        self._state_dir = state_dir
        self.config = config or AdmissionConfig()
        self._engine_info = engine_info
        self._default_memory_bytes = default_memory_bytes
        self._admission: Admission | None = None
        self._lock = threading.Lock()

    def get(self) -> Admission:
        with self._lock:
            if self._admission is None:
                self._admission = Admission.for_engine(
                    self._state_dir, self.config, self._engine_info(), self._default_memory_bytes
                )
            return self._admission

    def hold(
        self,
        needed: bool,
        *,
        cancel: threading.Event | None = None,
        what: str = "a run",
        expected_s: float | None = None,
    ) -> AbstractContextManager[Slot | None]:
        """`Admission.slot(...)` when `needed`; nothing to hold for a box that has one."""
        if not needed:
            return nullcontext()
        return self.get().slot(cancel=cancel, what=what, expected_s=expected_s)

    def pool_gate(self) -> PoolGate:
        return PoolGate(self.get)
