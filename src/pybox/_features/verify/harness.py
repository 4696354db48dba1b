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
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pybox._boxes.record import RunOutcome
from pybox._core.limits import LimitRequest
from pybox._core.receipt import Receipt
from pybox._core.request import InputFile, RunRequest
from pybox._engine import Engine
from pybox._features.verify.verdict import Verdict, case_source, judge_gone
from pybox._orchestration.session import Session


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

    @contextlib.contextmanager
    def controller(
        self, extra_env: Mapping[str, str], *args: str
    ) -> Iterator[subprocess.Popen[bytes]]:
        """`pybox exec` in a process of its own, on this session's engine and state.

        The process is killed (if it still runs) and reaped on the way out.
        """
        env = dict(os.environ)
        env.update(extra_env)
        env["PYBOX_STATE_DIR"] = str(self.session.state.root)
        env["DOCKER_HOST"] = self.engine.endpoint.url
        # The controller's box runs in the suite's lane (`pybox verify --runtime`).
        env["PYBOX_RUNTIME"] = self.session.runtime_choice().lane
        config = ["--config", self.config_path] if self.config_path else []
        process = subprocess.Popen(
            [sys.executable, "-m", "pybox", *config, "exec", *args],
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
