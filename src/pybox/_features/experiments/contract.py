"""The operations every front end calls on `Experiments`, each one observed:
one JSON event per operation (its experiment and job ids, status, duration),
written by `Experiments.event` in one place, whatever the outcome."""

from __future__ import annotations

import builtins
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from pybox._core.errors import PyboxError, RequestRejected
from pybox._core.host_env import NOTHING_FROM_HOST, HostEnvPolicy

if TYPE_CHECKING:
    from collections.abc import Sequence

    from pybox._core.limits import LimitRequest
    from pybox._features.experiments.ledger import ExperimentRecord, JobRecord
    from pybox._features.experiments.service import Experiments

T = TypeVar("T")


class ExperimentOperations:
    """Mixed into `Experiments`: the contract of docs/experiments.md."""

    def _observed(
        self, operation: str, experiment_id: object, call: Callable[[], T], job_id: object = None
    ) -> T:
        experiments: Experiments = self  # type: ignore[assignment]
        started = time.monotonic()
        ids = {
            "experiment": experiment_id if isinstance(experiment_id, str) else None,
            "job": job_id if isinstance(job_id, str) else None,
        }
        try:
            result = call()
        except PyboxError as exc:
            status = "refused" if isinstance(exc, RequestRejected) else "failed"
            experiments.observe(operation, ids, status, started, error=type(exc).__name__)
            raise
        job = getattr(result, "job_id", None)
        made = getattr(result, "experiment_id", None)
        state = getattr(result, "state", "ok")
        seen = {"experiment": made or ids["experiment"], "job": job or ids["job"]}
        experiments.observe(operation, seen, str(state), started)
        return result

    def create(
        self,
        project: object,
        *,
        environment: str = "stdlib",
        limits: LimitRequest | None = None,
        env: object = (),
        libraries: Sequence[str] = (),
        egress: str | None = None,
        host_env: HostEnvPolicy = NOTHING_FROM_HOST,
    ) -> ExperimentRecord:
        """Copy `project` into a new sandbox (see `Experiments._create`)."""
        experiments = self._self()
        record = self._observed(
            "create",
            None,
            lambda: experiments._create(
                project,
                environment=environment,
                limits=limits,
                env=env,
                libraries=libraries,
                egress=egress,
                host_env=host_env,
            ),
        )
        return record

    def execute(
        self,
        experiment_id: object,
        argv: object,
        *,
        timeout_s: float | None = None,
        background: bool = False,
    ) -> JobRecord:
        jobs = self._self().jobs
        return self._observed(
            "execute",
            experiment_id,
            lambda: jobs.start(experiment_id, argv, timeout_s=timeout_s, background=background),
        )

    def run_tests(
        self, experiment_id: object, argv: object = None, *, background: bool = False
    ) -> JobRecord:
        jobs = self._self().jobs
        return self._observed(
            "run_tests",
            experiment_id,
            lambda: jobs.run_tests(experiment_id, argv, background=background),
        )

    def read_file(self, experiment_id: object, path: object) -> bytes:
        from pybox._features.experiments import lifecycle

        return self._observed(
            "read_file",
            experiment_id,
            lambda: lifecycle.read_file(self._self(), experiment_id, path),
        )

    def write_file(self, experiment_id: object, path: object, data: bytes) -> dict[str, Any]:
        from pybox._features.experiments import lifecycle

        return self._observed(
            "write_file",
            experiment_id,
            lambda: lifecycle.write_file(self._self(), experiment_id, path, data),
        )

    def inspect_changes(self, experiment_id: object) -> dict[str, Any]:
        from pybox._features.experiments import workspace

        return self._observed(
            "inspect_changes",
            experiment_id,
            lambda: workspace.inspect_changes(self._self(), experiment_id),
        )

    def collect_artifacts(
        self, experiment_id: object, paths: object
    ) -> builtins.list[dict[str, Any]]:
        from pybox._features.experiments import workspace

        return self._observed(
            "collect_artifacts",
            experiment_id,
            lambda: workspace.collect_artifacts(self._self(), experiment_id, paths),
        )

    def report(self, experiment_id: object) -> dict[str, Any]:
        from pybox._features.experiments import lifecycle

        experiments = self._self()
        return self._observed(
            "get_experiment",
            experiment_id,
            lambda: lifecycle.report(experiments, experiments.get(experiment_id)),
        )

    def destroy(self, experiment_id: object) -> tuple[dict[str, Any], bool]:
        from pybox._features.experiments import lifecycle

        return self._observed(
            "destroy", experiment_id, lambda: lifecycle.destroy(self._self(), experiment_id)
        )

    def prune(self) -> dict[str, Any]:
        """Hold ended experiments' kept files to the operator's age and budget
        (`retention`): `pybox experiment prune`, and `pybox mcp` at start."""
        from pybox._features.experiments import retention

        experiments = self._self()
        return self._observed(
            "prune",
            None,
            lambda: (
                retention.prune(experiments).to_dict()
                | {"policy": retention.policy_text(experiments)}
            ),
        )

    def compare(self, experiment_ids: object) -> dict[str, Any]:
        from pybox._features.experiments import lifecycle

        return self._observed(
            "compare",
            None,
            lambda: lifecycle.compare_experiments(self._self(), experiment_ids),
        )

    def runtime_check(self) -> dict[str, Any]:
        from pybox._features.experiments import lifecycle

        return self._observed("check_runtime", None, lambda: lifecycle.runtime_check(self._self()))

    def job_status(self, job_id: object) -> JobRecord:
        jobs = self._self().jobs
        return self._observed("get_job_status", None, lambda: jobs.status(job_id), job_id)

    def job_result(self, job_id: object, wait_s: float = 0.0) -> JobRecord:
        jobs = self._self().jobs
        call = (lambda: jobs.wait(job_id, wait_s)) if wait_s else (lambda: jobs.status(job_id))
        return self._observed("get_job_result", None, call, job_id)

    def cancel_job(self, job_id: object) -> JobRecord:
        jobs = self._self().jobs
        return self._observed("cancel_job", None, lambda: jobs.cancel(job_id), job_id)

    def _self(self) -> Experiments:
        return self  # type: ignore[return-value]
