"""The sandbox IPC case of `pybox verify`: IPC objects one run of a sandbox
leaves (SysV shared memory, semaphores, message queues; POSIX message queues;
/dev/shm files) are gone before the next run."""

from __future__ import annotations

from pybox._core.limits import LimitRequest
from pybox._core.request import RunRequest
from pybox._features.sandboxes.records import RUN_PROGRAM
from pybox._features.verify.harness import Suite
from pybox._features.verify.lanes import lane_terms
from pybox._features.verify.verdict import Verdict, case_source, judge_gone, program_report

# gVisor mounts no mqueue filesystem: its POSIX queues cannot be listed, so
# pybox cannot remove one by name (docs/sandboxes.md). Said, not failed.
GVISOR_UNLISTABLE = "mqueue"


def _request(step: str) -> RunRequest:
    return RunRequest(code=case_source("sandbox_ipc"), code_name=RUN_PROGRAM, argv=(step,))


def run_sandbox_ipc(suite: Suite, verdict: Verdict) -> None:
    sandboxes = suite.session.sandboxes()
    info = sandboxes.create(limits=LimitRequest(timeout_s=10))
    verdict.run_ids.append(info.sandbox_id)
    container_id = None
    try:
        first = sandboxes.run(info.sandbox_id, _request("first"))
        container_id = first.receipt.observed_by_engine.container_id
        made = program_report(first.stdout, first.stderr, verdict).get("made")
        if isinstance(made, list):
            verdict.saw("program", f"the first run left {', '.join(made)} and a /dev/shm file")
        else:
            verdict.check(False, "the first run did not say what it made")
        second = sandboxes.run(info.sandbox_id, _request("second"))
        found = program_report(second.stdout, second.stderr, verdict).get("found")
        if not verdict.check(isinstance(found, list), "the second run did not say what it found"):
            return
        assert isinstance(found, list)
        if not lane_terms(first.receipt).lists_posix_queues and GVISOR_UNLISTABLE in found:
            found.remove(GVISOR_UNLISTABLE)
            verdict.saw(
                "program",
                "under gVisor the POSIX message queue is still there: gVisor mounts no "
                "mqueue filesystem to list it by (docs/sandboxes.md)",
            )
        verdict.check(not found, f"the second run found the first run's {', '.join(found)}")
        verdict.saw("program", f"the second run found {', '.join(found) or 'none of them'}")
    finally:
        _, was_live = sandboxes.destroy(info.sandbox_id)
        verdict.saw("pybox", "sandbox destroyed" if was_live else "sandbox already ended")
    judge_gone(verdict, suite.engine, container_id, True, suite.cgroup_exists)
