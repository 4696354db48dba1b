"""A session's engine: connected on first use, its `/info` asked once, and what a
box needs of it (the lane, the confinement, the box context); its facts for
receipts and doctor, and the sweep of leftovers (part of `Session`)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from pybox._adapters.cgroups import SamplerFactory
from pybox._adapters.confinement import confinement
from pybox._adapters.state import StateStore
from pybox._boxes.cleanup import SweepReport, sweep
from pybox._boxes.egress import sweep_egress
from pybox._boxes.spec import BoxContext
from pybox._core.receipt import EngineFacts
from pybox._core.runtimes import RuntimeChoice, RuntimePolicy, resolve_on_engine
from pybox._core.seccomp import Confinement
from pybox._engine import Engine
from pybox._orchestration.engine_checks import refuse_unsafe_engine
from pybox._version import __version__


class SessionEngine:
    """The engine half of `Session`, which sets these attributes."""

    _engine: Engine | None
    _connect: Callable[[], Engine] | None
    _lock: threading.Lock
    _sweep_lock: threading.Lock
    _swept: int | None
    _engine_info: dict[str, Any] | None
    _confinement: Confinement | None
    _default_runtime: RuntimeChoice | None
    _bootstrap: str
    _sampler_factory: SamplerFactory
    state: StateStore
    owner: str
    runtimes: RuntimePolicy
    pool_service: bool
    in_vm: bool
    is_owner_alive: Callable[[str], bool | None]

    @property
    def engine(self) -> Engine:
        with self._lock:
            if self._engine is None:
                assert self._connect is not None
                self._engine = self._connect()
            return self._engine

    def runtime_choice(self, requested: str | None = None) -> RuntimeChoice:
        """The lane for a run asking for `requested` (None: the operator's default),
        checked against the engine's registered runtimes; or a clear refusal."""
        if requested is None and self._default_runtime is not None:
            return self._default_runtime
        choice = self.runtimes.choose(requested)
        if not choice.shares_host_kernel:  # runc needs no look at the engine's runtimes
            choice = resolve_on_engine(choice, self._info())
        if requested is None:
            self._default_runtime = choice
        return choice

    def use_runtime(self, lane: str) -> RuntimeChoice:
        """Make `lane` this session's default (`pybox verify --runtime`), where the
        operator allows it and the engine has it; or a clear refusal."""
        choice = self.runtime_choice(lane)
        self._default_runtime = choice
        return choice

    def _context(self, runtime: RuntimeChoice | None = None) -> BoxContext:
        return BoxContext(
            engine=self.engine,
            state=self.state,
            owner=self.owner,
            pybox_version=__version__,
            bootstrap_source=self._bootstrap,
            sampler_factory=self._sampler_factory,
            isolation=self.runtime_choice() if runtime is None else runtime,
            confinement=self.confinement(),
            pool_service=self.pool_service,
        )

    def box_context(self, runtime: RuntimeChoice | None = None) -> BoxContext:
        """What a box needs from this session (for the features that make their own),
        in lane `runtime` (None: the session's default)."""
        return self._context(runtime)

    def confinement(self) -> Confinement:
        """pybox's seccomp profile and the AppArmor profile boxes on this engine need."""
        if self._confinement is None:
            # Only a local engine shares this machine's kernel, and so its AppArmor.
            self._confinement = confinement(self._info(), local_host=not self.in_vm)
        return self._confinement

    def _info(self) -> dict[str, Any]:
        """The engine's `/info`, asked once per session."""
        if self._engine_info is None:
            info = dict(self.engine.info())
            # A rootless engine on cgroup v1 ignores the caps: no box runs on it.
            refuse_unsafe_engine(self.engine.name, info)
            self._engine_info = info
        return self._engine_info

    def _cpus(self) -> int:
        return int(self._info().get("NCPU") or 1)

    def engine_facts(self) -> EngineFacts:
        engine = self.engine
        return EngineFacts(
            endpoint=f"{engine.endpoint.url} ({engine.endpoint.found_by})",
            api_version=engine.api_version,
            server_version=engine.server_version,
            name=engine.name,
        )

    def engine_report(self) -> dict[str, Any]:
        """Socket, versions, cgroup version and runtimes of the engine."""
        from pybox._orchestration.doctor import engine_facts

        engine = self.engine
        facts = engine_facts(engine, engine.info())
        return {"socket": engine.endpoint.url, "found_by": engine.endpoint.found_by, **facts}

    def leftovers(self) -> list[dict[str, Any]]:
        from pybox._orchestration.doctor import leftover_boxes

        return leftover_boxes(self.engine, self.is_owner_alive)

    def sweep(self) -> SweepReport:
        report = sweep(self.engine, self.state, self.is_owner_alive)
        sweep_egress(self.engine)  # networks and proxies whose box is gone
        return report

    def _sweep_once(self) -> int:
        """Sweep before the session's first run (or warm-up), once; return how many
        boxes that sweep removed. Every run of the session reports that number, so a
        server's runs show the sweep it made at start instead of 0. Runs arriving
        during the sweep wait for it: no box starts beside a leftover being removed."""
        with self._sweep_lock:
            if self._swept is None:
                self._swept = len(self.sweep().removed)
            return self._swept
