"""`Experiments`: a copy of a project in a sandbox, commands and tests run in it,
and what changed against a baseline taken before the box existed
(docs/experiments.md).

An experiment is a sandbox (`pybox._features.sandboxes`) plus a record in the
store (`ledger`). The project is copied, never mounted: one read-only pass over
the host tree (`copying.pack_project`) writes a tar and the baseline at once,
before any box exists; the tar is unpacked in the box by pybox's own file
program. The user's files are only ever read. Commands and tests are jobs
(`commands`); changes and artifacts are read from the box (`workspace`).
"""

from __future__ import annotations

import builtins
import contextlib
import os
import secrets
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from pybox._core.errors import InvalidRequest, PyboxError, RequestRejected, SandboxNotFound
from pybox._core.experiment_settings import ExperimentSettings
from pybox._core.host_env import NOTHING_FROM_HOST, HostEnvPolicy
from pybox._core.limits import LimitRequest
from pybox._core.request import RunRequest
from pybox._features.experiments.contract import ExperimentOperations
from pybox._features.experiments.copying import pack_project
from pybox._features.experiments.env_policy import resolve_env
from pybox._features.experiments.events import emit_event
from pybox._features.experiments.ledger import ExperimentRecord, JobRecord, Ledger
from pybox._features.experiments.project import ProjectPolicy, check_project_path
from pybox._features.experiments.states import ExperimentState, can_run
from pybox._features.experiments.tree import ProjectCopy, entries_to_json

if TYPE_CHECKING:
    from pybox._features.sandboxes.service import Sandboxes
    from pybox._orchestration.session import Session

ID_PREFIX = "exp-"
MAX_SKIPPED_RECORDED = 500
MAX_PROJECT_TEXT = 4096


class ExperimentNotFound(SandboxNotFound):
    """No experiment has that id."""


class Experiments(ExperimentOperations):
    """The experiments of one state directory. One per session: it alone holds the
    values of the environment variables each experiment forwards (never stored)."""

    def __init__(
        self,
        session: Session,
        sandboxes: Sandboxes,
        settings: ExperimentSettings,
        *,
        events: TextIO | None = None,
    ) -> None:
        self.session = session
        self.sandboxes = sandboxes
        self.settings = settings
        self.ledger = Ledger(sandboxes.store.database)
        self.events = events  # where each operation's JSON event goes (stderr), or nowhere
        self.folder = session.state_dir / "experiments"
        self._env: dict[str, dict[str, str]] = {}
        from pybox._features.experiments.commands import Jobs

        self.jobs = Jobs(self)

    # -- the policy -------------------------------------------------------------------

    def policy(self) -> ProjectPolicy:
        roots = tuple(Path(root).expanduser() for root in self.settings.project_roots)
        skip = (
            {}
            if self.settings.skip_names is None
            else {"skip_names": frozenset(self.settings.skip_names)}
        )
        return ProjectPolicy(
            **skip,  # type: ignore[arg-type]
            allowed_roots=roots,
            max_files=self.settings.max_files,
            max_total_bytes=self.settings.max_project_bytes,
            max_file_bytes=self.settings.max_file_bytes,
        )

    def with_roots(self, roots: Sequence[str]) -> None:
        """Allow projects under `roots` too (`pybox mcp --project-root DIR`)."""
        self.settings = self.settings.with_roots(tuple(roots))

    # -- create -----------------------------------------------------------------------

    def _create(
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
        """Copy `project` into a new sandbox. Everything is checked before anything is
        made; a failure after the box exists destroys it and records why. `host_env`:
        the names `env` may take from this process's environment (the front end's
        call: the user's own for the CLI and API, the operator's list for MCP)."""
        policy = self.policy()
        mode = self.session.egress_request(egress).mode  # more than allowed: refused
        root = check_project_path(project, policy, Path.home())
        forwarded = resolve_env(
            list(env) if isinstance(env, tuple) else env,
            self.session.environ,
            from_host=host_env,
            allow_credential_names=self.session.policy.allow_credential_env,
        )
        prepared = self.session.prepare(
            RunRequest(code=b"", image=environment, limits=limits or LimitRequest())
        )
        experiment_id = ID_PREFIX + secrets.token_hex(6)
        folder = self.experiment_folder(experiment_id, create=True)
        tar_path = folder / "baseline.tar"
        # Created private, like its neighbours: the copy is the user's project.
        fd = os.open(tar_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            with os.fdopen(fd, "wb") as out:
                copy = pack_project(root, policy, out)
        except BaseException:
            _remove_folder(folder)  # no record names it yet: nothing else would
            raise
        tar_bytes = tar_path.stat().st_size
        if tar_bytes > prepared.limits.input_bytes:
            _remove_folder(folder)
            from pybox._core.errors import ProjectTooBig

            raise ProjectTooBig(
                f"The copy of {root} is {tar_bytes} bytes as an archive; a sandbox takes at "
                f"most {prepared.limits.input_bytes} bytes of input (input_mib). Skip more "
                "(build output, data), or ask for a higher input_mib within the ceiling."
            )
        _write_private(folder / "baseline.json", entries_to_json(copy.entries))
        now = time.time()
        record = ExperimentRecord(
            experiment_id=experiment_id,
            owner=self.session.owner,
            sandbox_id=None,
            project=str(root),
            state=ExperimentState.CREATING.value,
            reason="create requested",
            created_at=now,
            updated_at=now,
            doc={
                "environment": prepared.image.name,
                "copy": copy_summary(copy),
                "env_names": list(forwarded.names),
                "libraries": list(libraries),
                "egress": mode,
            },
        )
        self.ledger.add(record)
        self.sandboxes.store.audit(
            "experiment.create", experiment_id, {"project": str(root), "files": copy.file_count}
        )
        try:
            info = self.sandboxes.create(
                image=prepared.image.name, limits=limits, libraries=tuple(libraries), egress=mode
            )
            self.ledger.update_doc(experiment_id, {}, sandbox_id=info.sandbox_id)
            self._unpack(info.sandbox_id, tar_path)
        except BaseException as exc:
            self._failed_creation(experiment_id, exc)
            raise
        self._env[experiment_id] = dict(forwarded.pairs())
        done = self.ledger.move(
            experiment_id,
            ExperimentState.READY,
            f"{copy.file_count} files copied, {len(copy.skipped)} skipped",
        )
        return done

    def _unpack(self, sandbox_id: str, tar_path: Path) -> None:
        from pybox._features.sandboxes import fileops

        data = tar_path.read_bytes()
        outcome = self.sandboxes.run(
            sandbox_id, fileops.unpack_request("", data), kind="experiment.copy"
        )
        fileops.outcome_report(outcome, ".", "unpack")

    def _failed_creation(self, experiment_id: str, exc: BaseException) -> None:
        why = f"creation failed: {exc}"[:300] if isinstance(exc, PyboxError) else "interrupted"
        record = self.ledger.move(experiment_id, ExperimentState.FAILED, why)
        if record.sandbox_id is not None:
            try:
                self.sandboxes.destroy(record.sandbox_id)
            except PyboxError:
                return  # the sandbox sweep removes it; the record stays failed
        self._ended(self.ledger.move(experiment_id, ExperimentState.DESTROYED, why))
        self.event("create", record, status="destroyed", started=None, error=why)

    # -- look up ------------------------------------------------------------------------

    def get(self, experiment_id: object) -> ExperimentRecord:
        """The experiment (destroyed ones too). One whose sandbox has gone (expired,
        swept) is recorded as destroyed, with that reason."""
        record = self._get(experiment_id)
        if (
            record.state != ExperimentState.DESTROYED.value
            and record.sandbox_id is not None
            and self.state_of_sandbox(record.sandbox_id) == "destroyed"
        ):
            why = "its sandbox was destroyed (expired, or its box was gone)"
            record = self.ledger.move(record.experiment_id, ExperimentState.DESTROYED, why)
            self._ended(record)
            record = self._get(record.experiment_id)
        return record

    def _ended(self, record: ExperimentRecord) -> None:
        """Remove the copy of an experiment that just ended; record what it keeps."""
        from pybox._features.experiments import retention

        with contextlib.suppress(OSError):  # the next prune removes it
            retention.ended(self, record)

    def list(self, *, include_destroyed: bool = False) -> builtins.list[ExperimentRecord]:
        self.sandboxes.sweep()
        records = [self.get(r.experiment_id) for r in self.ledger.list()]
        if include_destroyed:
            return self.ledger.list(include_destroyed=True)
        return [r for r in records if r.state != ExperimentState.DESTROYED.value]

    def usable(self, experiment_id: object, operation: str) -> ExperimentRecord:
        """The experiment, if `operation` may start in it now: not destroyed, no job
        running (a job holds the sandbox; its state says which)."""
        record = self.get(experiment_id)
        if record.state == ExperimentState.DESTROYED.value:
            raise InvalidRequest(
                f"Experiment {record.experiment_id} was destroyed ({record.reason}); "
                f"{operation} needs a live one. Its report: get_experiment; a new copy: "
                "create_experiment."
            )
        if not can_run(ExperimentState(record.state)):
            running = self.jobs.running(record.experiment_id)
            which = (
                ""
                if running is None
                else f": job {running.job_id} ({' '.join(running.doc.get('argv', []))[:80]})"
            )
            from pybox._core.errors import SandboxBusy

            raise SandboxBusy(
                f"Experiment {record.experiment_id} is {record.state}{which}"
                + f"; {operation} waits for it. Poll get_job_status, or cancel_job first."
            )
        return record

    def state_of_sandbox(self, sandbox_id: str) -> str:
        row = self.sandboxes.store.get_sandbox(sandbox_id)
        return "destroyed" if row is None else row.state

    def env_of(self, experiment_id: str) -> dict[str, str]:
        return dict(self._env.get(experiment_id, {}))

    def _get(self, experiment_id: object) -> ExperimentRecord:
        if not isinstance(experiment_id, str) or not experiment_id.startswith(ID_PREFIX):
            raise InvalidRequest(
                f"{str(experiment_id)[:80]!r} is not an experiment id; ids look like "
                f"'{ID_PREFIX}0123456789ab' (list_experiments shows them)."
            )
        record = self.ledger.get(experiment_id)
        if record is None:
            raise ExperimentNotFound(
                f"There is no experiment {experiment_id!r} in {self.folder}. "
                "list_experiments shows the ones there are."
            )
        return record

    # -- files of an experiment ---------------------------------------------------------

    def experiment_folder(self, experiment_id: str, *, create: bool = False) -> Path:
        folder = self.folder / experiment_id
        if create:
            self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            folder.mkdir(mode=0o700)
        return folder

    # -- events -----------------------------------------------------------------------

    def observe(
        self, operation: str, ids: dict[str, Any], status: str, started: float, **fields: Any
    ) -> None:
        """One operation's event (`contract._observed` calls this for each)."""
        if self.events is None:
            return
        with contextlib.suppress(PyboxError):
            emit_event(
                self.events,
                operation,
                experiment_id=ids.get("experiment"),
                job_id=ids.get("job"),
                status=status,
                duration_s=round(time.monotonic() - started, 4),
                **fields,
            )

    def event(
        self,
        operation: str,
        record: ExperimentRecord | None,
        *,
        status: str,
        started: float | None,
        job: JobRecord | None = None,
        **fields: Any,
    ) -> None:
        if self.events is None:
            return
        # An event that cannot be written never fails the operation it reports.
        with contextlib.suppress(PyboxError):
            self._emit(operation, record, status=status, started=started, job=job, **fields)

    def _emit(
        self,
        operation: str,
        record: ExperimentRecord | None,
        *,
        status: str,
        started: float | None,
        job: JobRecord | None,
        **fields: Any,
    ) -> None:
        assert self.events is not None
        emit_event(
            self.events,
            operation,
            experiment_id=None if record is None else record.experiment_id,
            job_id=None if job is None else job.job_id,
            status=status,
            duration_s=None if started is None else round(time.monotonic() - started, 4),
            **fields,
        )


def copy_summary(copy: ProjectCopy) -> dict[str, Any]:
    skipped = [{"path": s.path, "reason": s.reason} for s in copy.skipped]
    return {
        "files": copy.file_count,
        "bytes": copy.total_bytes,
        "skipped": skipped[:MAX_SKIPPED_RECORDED],
        "skipped_count": len(copy.skipped),
    }


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)


def _remove_folder(folder: Path) -> None:
    import shutil

    shutil.rmtree(folder, ignore_errors=True)


def events_stream(environ: Mapping[str, str]) -> TextIO | None:
    """stderr when PYBOX_EVENTS=1 (the CLI's and the API's default is none)."""
    return sys.stderr if environ.get("PYBOX_EVENTS") == "1" else None


__all__ = ["ExperimentNotFound", "Experiments", "RequestRejected"]
