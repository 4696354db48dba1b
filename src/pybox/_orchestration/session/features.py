"""The session's features with state of their own, each opened on first use:
the store, the sandboxes and the experiments (one service per session). Mixed
into `Session`; uses its lock, state and settings."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from pybox._adapters.state import StateStore
    from pybox._core.experiment_settings import ExperimentSettings
    from pybox._core.sandbox_settings import SandboxSettings
    from pybox._features.experiments.service import Experiments
    from pybox._features.sandboxes.service import Sandboxes
    from pybox._features.store import Store
    from pybox._orchestration.session import Session


class SessionFeatures:
    _lock: threading.Lock
    _store: Store | None
    _sandboxes: Sandboxes | None
    _experiments: Experiments | None
    state: StateStore
    sandbox_settings: SandboxSettings
    experiment_settings: ExperimentSettings
    experiment_events: TextIO | None

    @property
    def environ(self) -> Mapping[str, str]:
        raise NotImplementedError

    def store(self) -> Store:
        """pybox's store of runs, sandboxes and the audit log (docs/store.md)."""
        with self._lock:
            if self._store is None:
                from pybox._features.store import Store

                self._store = Store.open(self.state.root)
            return self._store

    def sandboxes(self) -> Sandboxes:
        """This state directory's sandboxes (the store opened on first use)."""
        store = self.store()  # takes the lock itself
        with self._lock:
            if self._sandboxes is None:
                from pybox._features.sandboxes.service import Sandboxes

                self._sandboxes = Sandboxes(self._session(), store, self.sandbox_settings)
            return self._sandboxes

    def experiments(self) -> Experiments:
        """This state directory's experiments, one service per session: it alone
        holds the values of the environment variables an experiment forwards."""
        sandboxes = self.sandboxes()
        with self._lock:
            if self._experiments is None:
                from pybox._features.experiments.service import Experiments, events_stream

                events = self.experiment_events or events_stream(self.environ)
                self._experiments = Experiments(
                    self._session(), sandboxes, self.experiment_settings, events=events
                )
            return self._experiments

    def _session(self) -> Session:
        return self  # type: ignore[return-value]
