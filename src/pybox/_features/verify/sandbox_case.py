"""The persistent-sandbox case of `pybox verify`: between two runs in one
sandbox, nothing the first started is left running and nothing it wrote
outside the workspace is left to read; the workspace itself is kept."""

from __future__ import annotations

import secrets

from pybox._adapters.cgroups import locate, read_pids_current
from pybox._core.limits import LimitRequest
from pybox._core.request import RunRequest
from pybox._features.sandboxes.records import RUN_PROGRAM
from pybox._features.verify.harness import Suite
from pybox._features.verify.verdict import Verdict, case_source, judge_gone, program_report


def run_sandbox(suite: Suite, verdict: Verdict) -> None:
    sandboxes = suite.session.sandboxes()
    info = sandboxes.create(limits=LimitRequest(timeout_s=20))
    verdict.run_ids.append(info.sandbox_id)
    canary = secrets.token_hex(16)
    container_id = None
    try:
        first = sandboxes.run(
            info.sandbox_id,
            RunRequest(
                code=case_source("sandbox_first"),
                code_name=RUN_PROGRAM,
                env=(("VERIFY_CANARY", canary),),
            ),
        )
        placed = program_report(first.stdout, first.stderr, verdict).get("placed", [])
        verdict.saw("program", f"the first run put the canary in {len(placed)} places")
        container_id = first.receipt.observed_by_engine.container_id
        location = locate(container_id) if container_id else None
        pids = None if location is None else read_pids_current(location)
        if pids is not None:
            verdict.saw("kernel", f"between the runs the box's cgroup holds {pids} process")
            verdict.check(pids == 1, f"{pids} processes were left between the runs, not 1")
        second = sandboxes.run(
            info.sandbox_id,
            RunRequest(code=case_source("sandbox_second"), code_name=RUN_PROGRAM),
        )
        report = program_report(second.stdout, second.stderr, verdict)
        verdict.check(
            canary.encode() not in second.stdout,
            "the second run read the first run's canary from outside the workspace",
        )
        verdict.check(report.get("other_processes") == [], "the second run saw other processes")
        verdict.check(report.get("inside") == "inside-kept", "the workspace was not kept")
        verdict.saw("pybox", "the second run's output holds no byte of the canary")
    finally:
        _, was_live = sandboxes.destroy(info.sandbox_id)
        verdict.saw("pybox", "sandbox destroyed" if was_live else "sandbox already destroyed")
    judge_gone(verdict, suite.engine, container_id, True, suite.cgroup_exists)
