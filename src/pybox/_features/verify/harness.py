"""What a case of `pybox verify` runs with: its `Suite` and its `Case` entry.

A case runs its hostile program through `Session.run` (the path of `pybox
exec`) with `Suite.run_program`, or through a `pybox exec` process of its own
with `Suite.controller`, and checks with `Suite.gone` that the box is gone
afterwards. The suite remembers what the cases made, so nothing outlives it.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pybox._adapters.box_processes import HostProcess, box_processes
from pybox._boxes.record import RunOutcome
from pybox._core.limits import LimitRequest
from pybox._core.posture import LABEL_RUN_ID
from pybox._core.receipt import Receipt
from pybox._core.request import InputFile, RunRequest
from pybox._engine import Engine
from pybox._features.verify.verdict import Verdict, case_source, judge_gone
from pybox._orchestration.session import Session

# How often a probed run looks at its box's processes from the host.
PROBE_INTERVAL_S = 0.05


@dataclass(frozen=True)
class Case:
    name: str
    attempted: str
    criterion: str
    run: Callable[[Suite, Verdict], None]


@dataclass
class Suite:
    """One run of the suite: the session and what the cases made, to clean up."""

    session: Session
    config_path: str | None
    cgroup_exists: Callable[[str], bool]
    workdir: Path
    controller_pids: list[int] = field(default_factory=list)

    @property
    def engine(self) -> Engine:
        return self.session.engine

    def run_program(
        self, name: str, verdict: Verdict, limits: LimitRequest, inputs: tuple[InputFile, ...] = ()
    ) -> RunOutcome:
        request = RunRequest(
            code=case_source(name), code_name=f"{name}.py", inputs=inputs, limits=limits
        )
        outcome = self.session.run(self.session.prepare(request))
        verdict.run_ids.append(outcome.receipt.run_id)
        return outcome

    def run_program_probed(
        self, name: str, verdict: Verdict, limits: LimitRequest
    ) -> tuple[RunOutcome, tuple[HostProcess, ...]]:
        """`run_program`, looking from the host at the box's processes while it runs:
        every process seen in its cgroup (empty: never seen)."""
        request = RunRequest(code=case_source(name), code_name=f"{name}.py", limits=limits)
        prepared = self.session.prepare(request)
        verdict.run_ids.append(prepared.run_id)
        result: list[RunOutcome] = []
        failure: list[BaseException] = []

        def run() -> None:
            try:
                result.append(self.session.run(prepared))
            except BaseException as exc:  # re-raised below, in the caller's thread
                failure.append(exc)

        worker = threading.Thread(target=run, name=f"pybox-verify-{name}", daemon=True)
        worker.start()
        # Every process seen in any view, as first seen (while its parent was there:
        # a stub outliving the Sentry at teardown keeps its role).
        seen: dict[int, HostProcess] = {}
        container_id: str | None = None
        while worker.is_alive():
            if container_id is None:
                boxes = self.engine.list_containers({LABEL_RUN_ID: prepared.run_id})
                running = [box for box in boxes if box.get("State") == "running"]
                container_id = str(running[0]["Id"]) if running else None
            if container_id is not None:
                for process in box_processes(container_id):
                    seen.setdefault(process.pid, process)
            worker.join(PROBE_INTERVAL_S)
        if failure:
            raise failure[0]
        return result[0], tuple(seen.values())

    def gone(self, verdict: Verdict, receipt: Receipt, *, say: bool = True) -> None:
        engine = receipt.observed_by_engine
        judge_gone(
            verdict,
            self.engine,
            engine.container_id,
            engine.removal_confirmed,
            self.cgroup_exists,
            say=say,
        )

    def controller(
        self, extra_env: Mapping[str, str], *args: str
    ) -> contextlib.AbstractContextManager[subprocess.Popen[bytes]]:
        """`pybox exec` in a process of its own, on this session's engine and state.

        The process is killed (if it still runs) and reaped on the way out.
        """
        return self.pybox_process(extra_env, "exec", *args)

    @contextlib.contextmanager
    def pybox_process(
        self, extra_env: Mapping[str, str], command: str, *args: str
    ) -> Iterator[subprocess.Popen[bytes]]:
        """`pybox COMMAND` (exec, mcp) in a process of its own, on this session's engine,
        state and lane, its environment this one's plus `extra_env`. Its boxes are
        swept with the suite's; it is killed (if it still runs) and reaped on the way out.
        """
        env = dict(os.environ)
        env.update(extra_env)
        env["PYBOX_STATE_DIR"] = str(self.session.state.root)
        env["DOCKER_HOST"] = self.engine.endpoint.url
        # The controller's box runs in the suite's lane (`pybox verify --runtime`).
        env["PYBOX_RUNTIME"] = self.session.runtime_choice().lane
        config = ["--config", self.config_path] if self.config_path else []
        process = subprocess.Popen(
            [sys.executable, "-m", "pybox", *config, command, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        self.controller_pids.append(process.pid)
        try:
            yield process
        finally:
            if process.poll() is None:
                process.kill()
            process.communicate()
