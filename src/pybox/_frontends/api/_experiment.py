"""`pybox.Experiment`: a copy of a project in a sandbox, from Python
(docs/experiments.md). The same operations as the MCP tools of the same names.

    with pybox.Experiment("~/src/shop", project_roots=["~/src"]) as exp:
        before = exp.run_tests()
        exp.write_file("money.py", fixed)
        after = exp.run_tests()
        print(exp.inspect_changes()["diff"])

Results are plain values: a job is a `Job` (its output is the program's,
untrusted text), changes and reports are dicts shaped like the MCP
structuredContent. Leaving a `with` block destroys the experiment (its changes
are recorded first); the project on the host is only ever read.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Unpack

from pybox._core.host_env import HostEnvPolicy
from pybox._core.limit_surfaces import limit_request_from_keywords
from pybox._frontends.api._options import LimitOptions, _limit_keywords
from pybox._orchestration.session import Session

__all__ = ["Experiment", "Job"]


@dataclass(frozen=True)
class Job:
    """A command or test run in an experiment. `stdout`/`stderr` are what the
    program printed (bounded, untrusted); `tests` the parsed summary of a test run."""

    job_id: str
    experiment_id: str
    kind: str
    state: str
    argv: tuple[str, ...]
    exit_code: int | None = None
    stdout: str = ""
    stderr: str = ""
    tests: Mapping[str, Any] | None = None
    details: Mapping[str, Any] = field(default_factory=dict, repr=False)

    @property
    def finished(self) -> bool:
        return self.state != "running"


def _job(record: Any) -> Job:
    from pybox._features.experiments.lifecycle import job_dict

    described = job_dict(record, with_output=True)
    return Job(
        job_id=described["job_id"],
        experiment_id=described["experiment_id"],
        kind=described["kind"],
        state=described["state"],
        argv=tuple(described["argv"]),
        exit_code=described.get("exit_code"),
        stdout=described.get("stdout", ""),
        stderr=described.get("stderr", ""),
        tests=described.get("tests"),
        details=described,
    )


class Experiment:
    """An experiment on a copy of `project` (a folder under one of the operator's
    project roots, or of `project_roots` given here)."""

    @_limit_keywords
    def __init__(
        self,
        project: str | os.PathLike[str],
        *,
        environment: str = "stdlib",
        env: Sequence[str] = (),
        libraries: Sequence[str] = (),
        egress: str = "none",
        project_roots: Sequence[str | os.PathLike[str]] = (),
        config_path: str | None = None,
        environ: Mapping[str, str] | None = None,
        **limits: Unpack[LimitOptions],
    ) -> None:
        request = limit_request_from_keywords(limits)
        session = Session.open(os.environ if environ is None else environ, config_path)
        try:
            experiments = session.experiments()
            if project_roots:
                experiments.with_roots([os.fspath(root) for root in project_roots])
            record = experiments.create(
                os.fspath(project),
                environment=environment,
                limits=request,
                env=list(env),
                libraries=tuple(libraries),
                egress=egress,
                host_env=HostEnvPolicy.callers_own(),  # the caller's own environment
            )
        except BaseException:
            session.close()
            raise
        self._session = session
        self._experiments = experiments
        self.experiment_id: str = record.experiment_id
        self._finalizer = weakref.finalize(self, session.close)

    # -- commands -------------------------------------------------------------------

    def execute(
        self, argv: Sequence[str], *, timeout_s: float | None = None, background: bool = False
    ) -> Job:
        """Run a command (an argument list, never a shell string) in the copy."""
        return _job(
            self._experiments.execute(
                self.experiment_id, list(argv), timeout_s=timeout_s, background=background
            )
        )

    def run_tests(self, argv: Sequence[str] | None = None, *, background: bool = False) -> Job:
        """The project's tests (detected, or `argv`), parsed."""
        chosen = None if argv is None else list(argv)
        return _job(self._experiments.run_tests(self.experiment_id, chosen, background=background))

    def job(self, job_id: str, *, wait_s: float = 0.0) -> Job:
        """A job's state and result (waiting up to `wait_s` for a running one)."""
        return _job(self._experiments.job_result(job_id, wait_s))

    def cancel(self, job_id: str) -> Job:
        return _job(self._experiments.cancel_job(job_id))

    # -- files ----------------------------------------------------------------------

    def read_file(self, path: str) -> bytes:
        return self._experiments.read_file(self.experiment_id, path)

    def write_file(self, path: str, data: str | bytes) -> dict[str, Any]:
        content = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        return self._experiments.write_file(self.experiment_id, path, content)

    def inspect_changes(self) -> dict[str, Any]:
        return self._experiments.inspect_changes(self.experiment_id)

    def collect_artifacts(self, paths: Sequence[str]) -> list[dict[str, Any]]:
        return self._experiments.collect_artifacts(self.experiment_id, list(paths))

    # -- the experiment -------------------------------------------------------------

    def report(self) -> dict[str, Any]:
        return self._experiments.report(self.experiment_id)

    def compare(self, *others: Experiment) -> dict[str, Any]:
        """Rank this experiment against `others` on the same project."""
        ids = [self.experiment_id, *(other.experiment_id for other in others)]
        return self._experiments.compare(ids)

    def destroy(self) -> dict[str, Any]:
        """Record the changes, remove the box (confirmed) and the copy, return the
        final report (`kept`: what stays, and until when). Safe to call again."""
        final, _ = self._experiments.destroy(self.experiment_id)
        return final

    def close(self) -> None:
        self._finalizer()

    def __enter__(self) -> Experiment:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.destroy()
        finally:
            self.close()
