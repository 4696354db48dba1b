"""A session: the engine, the operator's policy and pybox's state, ready to run boxes.

Front ends (CLI, Python API, MCP) open a session and ask it to run; they never
talk to the engine themselves. The session's parts: its engine (`engine`), its
images (`images`) and its features with state of their own (`features`); this
module puts them together and runs.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from pybox._adapters.cgroups import SamplerFactory, engine_path_sampler_factory
from pybox._adapters.config import Settings, load_settings
from pybox._adapters.host_facts import current_owner, owner_alive
from pybox._adapters.state import StateStore
from pybox._boxes.egress import EgressRequest
from pybox._boxes.oneshot import run_once
from pybox._boxes.outputs import FileMarker
from pybox._boxes.program import SAMPLE_INTERVAL_S
from pybox._boxes.record import RunInterrupted, RunOutcome
from pybox._boxes.spec import new_run_id
from pybox._core.egress import NONE, PACKAGES, EgressSettings, choose_mode
from pybox._core.errors import LimitExceeded
from pybox._core.events import EventSink
from pybox._core.experiment_settings import ExperimentSettings
from pybox._core.images import ImageRecord
from pybox._core.limits import Limits, Policy
from pybox._core.pool import PoolSettings
from pybox._core.repair import RepairPolicy
from pybox._core.request import PreparedRun, RunRequest, check_request
from pybox._core.runtimes import (
    RuntimeChoice,
    RuntimePolicy,
    refuse_egress_without_network,
)
from pybox._core.sandbox_settings import SandboxSettings
from pybox._core.seccomp import Confinement
from pybox._engine import Engine
from pybox._inbox import bootstrap_source
from pybox._orchestration.admission import SessionAdmission
from pybox._orchestration.hosts import Host, open_host
from pybox._orchestration.session.engine import SessionEngine
from pybox._orchestration.session.features import SessionFeatures
from pybox._orchestration.session.images import SessionImages
from pybox._orchestration.staging import OutputStaging, stage_outputs

# What only images, the VM, doctor and the warm pool need is imported where they
# are used: a one-shot `pybox exec` does not pay for it.
if TYPE_CHECKING:
    from pybox._boxes.pool_values import PoolStats, ProfileStats
    from pybox._core.admission import AdmissionConfig
    from pybox._features.experiments.service import Experiments
    from pybox._features.sandboxes.service import Sandboxes
    from pybox._features.store import Store


class Session(SessionEngine, SessionFeatures, SessionImages):
    """Lazily connected: checking a request needs no engine, so a bad request is
    refused even when the engine is down."""

    def __init__(
        self,
        engine: Engine | Callable[[], Engine],
        state: StateStore,
        policy: Policy,
        *,
        owner: str | None = None,
        sampler_factory: SamplerFactory | None = None,
        is_owner_alive: Callable[[str], bool | None] = owner_alive,
        runtimes: RuntimePolicy | None = None,
        pool: PoolSettings | None = None,
        log: Callable[[str], None] | None = None,
        host: Host | None = None,
        environ: Mapping[str, str] | None = None,
        repair_policy: RepairPolicy | None = None,
        sandbox_settings: SandboxSettings | None = None,
        admission: AdmissionConfig | None = None,
        experiment_settings: ExperimentSettings | None = None,
        pool_service: bool = False,
        egress_settings: EgressSettings | None = None,
        forward_env: tuple[str, ...] = (),
    ) -> None:
        self._engine: Engine | None = None if callable(engine) else engine
        self._connect: Callable[[], Engine] | None = engine if callable(engine) else None
        self.state = state
        self.policy = policy
        self.repair_policy = repair_policy or RepairPolicy()
        self.owner = owner or current_owner()
        self.is_owner_alive = is_owner_alive
        if sampler_factory is None:
            sampler_factory = (
                host.sampler_factory()
                if host
                else engine_path_sampler_factory(SAMPLE_INTERVAL_S, lambda: self._engine)
            )
        self._sampler_factory = sampler_factory
        self.pool_service = pool_service  # the CLI pool service's session
        self.runtimes = runtimes or RuntimePolicy()
        self._default_runtime: RuntimeChoice | None = None
        self._environ = os.environ if environ is None else environ
        self._bootstrap = bootstrap_source()
        self._swept: int | None = None  # boxes the session's one sweep removed
        self._sweep_lock = threading.Lock()  # not _lock: the sweep connects through it
        self._lock = threading.Lock()
        self._sandboxes: Sandboxes | None = None
        self.sandbox_settings = sandbox_settings or SandboxSettings()
        self.experiment_settings = experiment_settings or ExperimentSettings()
        self.egress_settings = egress_settings or EgressSettings()
        # The operator's `forward_env` (config): what an MCP server lets agents take
        # from its environment by name. The front end decides whose names apply.
        self.forward_env = forward_env
        self._experiments: Experiments | None = None
        self.experiment_events: TextIO | None = None  # the MCP server: stderr
        self._engine_info: dict[str, Any] | None = None
        self._confinement: Confinement | None = None
        self.admission = SessionAdmission(
            state.root, admission, self._info, policy.defaults.memory_bytes
        )
        # Long-lived users (the MCP server, a Client) get a warm pool; one-shot
        # CLI calls do not pay to fill one.
        self._pool = None
        if pool is not None:
            from pybox._boxes.pool import WarmPool

            self._pool = WarmPool(self._context, pool, log, gate=self.admission.pool_gate())
        # Where boxes run (`open` chooses; sessions built directly are local).
        self.host = host
        self.platform = host.name if host else "linux"
        self.in_vm = host is not None and host.in_vm
        self._output_marker: FileMarker | None = host.output_marker() if host else None
        # Image IDs are content hashes, so an image checked once stays checked.
        self._verified_images: set[tuple[str, str, str]] = set()
        self._store: Store | None = None  # opened on first use (sqlite3 with it)

    @classmethod
    def open(
        cls,
        environ: Mapping[str, str] | None = None,
        config_path: str | None = None,
        *,
        warm_pool: bool = False,
        log: Callable[[str], None] | None = None,
        pool_service: bool = False,
    ) -> Session:
        env = os.environ if environ is None else environ
        settings: Settings = load_settings(env, config_path)
        host = open_host(settings, env)
        return cls(
            host.connect,
            StateStore(settings.state_dir),
            settings.policy,
            host=host,
            is_owner_alive=host.owner_alive,
            pool=settings.pool if warm_pool else None,
            log=log,
            environ=env,
            repair_policy=settings.repair_policy,
            sandbox_settings=settings.sandboxes,
            admission=settings.admission,
            experiment_settings=settings.experiments,
            pool_service=pool_service,
            runtimes=settings.runtimes,
            egress_settings=settings.egress,
            forward_env=settings.forward_env,
        )

    @property
    def state_dir(self) -> Path:
        """The folder holding pybox's state (image records, attempts)."""
        return self.state.root

    @property
    def environ(self) -> Mapping[str, str]:
        return self._environ

    def recorded_images(self) -> dict[str, ImageRecord]:
        """The recorded images by name, as values: front ends never hold the store."""
        return self.state.images()

    def egress_request(self, requested: str | None) -> EgressRequest:
        """A box's egress: its mode within the operator's policy (refused, never
        narrowed), with what this machine's pip and npm configuration names."""
        mode = choose_mode(requested, self.egress_settings)
        machine = None
        if mode == PACKAGES:  # configparser and pip's files: only for a `packages` box
            from pybox._adapters.egress_config import machine_registries

            machine = machine_registries(self._environ)
        return EgressRequest(mode, self.egress_settings, machine)

    def prepare(self, request: RunRequest) -> PreparedRun:
        """`request` made ready to run, or a clear refusal; creates nothing.

        The limits are resolved here, once, and the request checked against them
        before the engine is touched; then the image is checked against the engine
        (an unreachable engine is an error) and the run gets its one id.
        """
        limits = self.resolve(request)
        self.runtimes.choose(request.runtime)  # a lane the operator refuses: before the engine
        mode = choose_mode(request.egress, self.egress_settings)  # more than allowed: refused
        image = self.verified_image(request.image)
        runtime = self.runtime_choice(request.runtime)
        refuse_egress_without_network(mode, runtime)
        return PreparedRun(
            request=request,
            limits=limits,
            image=image,
            run_id=new_run_id(),
            runtime=runtime,
        )

    def resolve(self, request: RunRequest) -> Limits:
        """Effective limits for a request, or a clear refusal. Creates nothing.
        (Part of `prepare`; runs take a PreparedRun.)"""
        limits = self.policy.resolve(request.limits)
        check_request(request, limits, allow_credential_env=self.policy.allow_credential_env)
        if limits.cpus > 1:
            cpus = self._cpus()
            if limits.cpus > cpus:
                raise LimitExceeded(
                    f"Requested {limits.cpus:g} CPUs; the engine has only {cpus}. "
                    f"Ask for at most {cpus}."
                )
        return limits

    def stage_outputs(
        self,
        prepared: PreparedRun,
        destination: Path | None = None,
        *,
        keep_under: Path | None = None,
    ) -> OutputStaging | None:
        """Where `prepared`'s returned files land (None when it returns none): beside
        `destination` to publish there at once (quarantined on macOS), in
        `keep_under/<run id>` to keep, else a temporary directory. Every front end
        stages this way; call it after `prepare`, before `run`."""
        return stage_outputs(
            prepared, destination, keep_under=keep_under, marker=self._output_marker
        )

    def run(
        self,
        prepared: PreparedRun | RunRequest,
        *,
        files_dir: Path | None = None,
        cancel: threading.Event | None = None,
        on_event: EventSink | None = None,
    ) -> RunOutcome:
        """Run a prepared request in a fresh box. A failing program is data in the receipt.

        Front ends `prepare` first (to refuse before they stage anything) and pass
        the PreparedRun; a bare RunRequest (tests, scripts) is prepared here.
        """
        if isinstance(prepared, RunRequest):
            prepared = self.prepare(prepared)
        request, limits, image = prepared.request, prepared.limits, prepared.image
        swept = self._sweep_once()  # connects (and on macOS verifies the VM) first
        if self.host is not None:
            self.host.check_before_run()
        warm = None
        egress = self.egress_request(request.egress)
        # The warm pool keeps boxes per lane, with no network; a run with egress
        # makes its own box.
        if self._pool is not None and egress.mode == NONE:
            from pybox._boxes.pool_values import PoolKey

            key = PoolKey.of(image, limits, request.code_name, prepared.runtime)
            warm = self._pool.take(key)
        # The box's whole life holds a box slot (a warm box brought its own); the run
        # may wait for one, or is refused with Busy before anything is created.
        with self.admission.hold(
            warm is None, cancel=cancel, what=f"run {prepared.run_id}", expected_s=limits.timeout_s
        ):
            try:
                outcome = run_once(
                    self._context(prepared.runtime),
                    request,
                    limits,
                    image,
                    run_id=prepared.run_id,
                    files_dir=files_dir,
                    cancel=cancel,
                    leftovers_swept=swept,
                    warm=warm,
                    on_event=on_event,
                    egress=egress,
                )
            except RunInterrupted as stop:
                stop.outcome = self._recorded(prepared, stop.outcome)
                raise
            finally:
                if warm is not None and self._pool is not None:
                    self._pool.done(key, warm)
        return self._recorded(prepared, outcome)

    def _recorded(self, prepared: PreparedRun, outcome: RunOutcome) -> RunOutcome:
        """Recorded in the store; a store failure is an `unknown` of the receipt, not an error."""
        from pybox._features.store.recording import record_run

        receipt = record_run(self.store, prepared, outcome.receipt, owner=self.owner)
        return replace(outcome, receipt=receipt)

    def warm_up(self, request: RunRequest | None = None, wait_s: float = 0.0) -> bool:
        """Keep warm boxes for `request`'s profile (default: the default run).

        With `wait_s`, wait until they are ready. False without a pool, or when
        they were not ready in time.
        """
        if self._pool is None:
            return False
        from pybox._boxes.pool_values import PoolKey

        prepared = self.prepare(request or RunRequest(code=b""))
        key = PoolKey.of(
            prepared.image, prepared.limits, prepared.request.code_name, prepared.runtime
        )
        self._sweep_once()
        if wait_s > 0:
            return self._pool.wait_ready(key, wait_s)
        self._pool.want(key)
        return True

    def pool_stats(self) -> PoolStats | None:
        return None if self._pool is None else self._pool.stats()

    def pool_profiles(self) -> list[ProfileStats]:
        """The warm pool's boxes per profile (none without a pool)."""
        return [] if self._pool is None else self._pool.profile_stats()

    def close(self) -> list[str]:
        """Remove the warm pool's waiting boxes (return the names not confirmed gone);
        close the store."""
        if self._store is not None:
            self._store.close()
        return [] if self._pool is None else self._pool.close()
