"""The persistent-sandbox case of `pybox verify`: between two runs in one
sandbox, nothing the first started is left running and nothing it wrote
outside the workspace is left to read; the workspace itself is kept; and the
start-up code the first planted in the workspace (a user site's usercustomize
and `.pth`, a module named like the standard library's) cannot change what
pybox's own file program answers."""

from __future__ import annotations

import secrets

from pybox._adapters.box_processes import box_processes, sentry_process_ids
from pybox._adapters.cgroups import locate, read_pids_current
from pybox._boxes.record import RunOutcome
from pybox._core.limits import LimitRequest
from pybox._core.request import RunRequest
from pybox._core.runtimes import engine_runtimes
from pybox._features.sandboxes.records import RUN_PROGRAM
from pybox._features.sandboxes.service import Sandboxes
from pybox._features.verify.harness import Suite
from pybox._features.verify.lanes import judge_host_confinement, lane_terms
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
                code=case_source("sandbox"),
                code_name=RUN_PROGRAM,
                argv=("first",),
                env=(("VERIFY_CANARY", canary),),
            ),
        )
        placed = program_report(first.stdout, first.stderr, verdict).get("placed", [])
        verdict.saw("program", f"the first run put the canary in {len(placed)} places")
        container_id = first.receipt.observed_by_engine.container_id
        if not lane_terms(first.receipt).kernel_is_host:
            _judge_left_in_gvisor(suite, verdict, container_id)
        else:
            location = locate(container_id) if container_id else None
            pids = None if location is None else read_pids_current(location)
            if pids is not None:
                verdict.saw("kernel", f"between the runs the box's cgroup holds {pids} process")
                verdict.check(pids == 1, f"{pids} processes were left between the runs, not 1")
        second = sandboxes.run(
            info.sandbox_id,
            RunRequest(code=case_source("sandbox"), code_name=RUN_PROGRAM, argv=("second",)),
        )
        report = program_report(second.stdout, second.stderr, verdict)
        verdict.check(
            canary.encode() not in second.stdout,
            "the second run read the first run's canary from outside the workspace",
        )
        verdict.check(report.get("other_processes") == [], "the second run saw other processes")
        verdict.check(report.get("inside") == "inside-kept", "the workspace was not kept")
        verdict.saw("pybox", "the second run's output holds no byte of the canary")
        _judge_file_answers(sandboxes, info.sandbox_id, first, verdict)
    finally:
        _, was_live = sandboxes.destroy(info.sandbox_id)
        verdict.saw("pybox", "sandbox destroyed" if was_live else "sandbox already destroyed")
    judge_gone(verdict, suite.engine, container_id, True, suite.cgroup_exists)


def _judge_file_answers(
    sandboxes: Sandboxes, sandbox_id: str, first: RunOutcome, verdict: Verdict
) -> None:
    """pybox reads and lists the workspace with its own program in the box: what the
    first run planted there must not run in it (the file it reads and the listing
    are the truth, the planted files listed among them)."""
    said = program_report(first.stdout, first.stderr, verdict).get("planted")
    planted = [str(path) for path in said] if isinstance(said, list) else []
    if not verdict.check(len(planted) == 4, "the first run did not plant its code"):
        return
    read = sandboxes.read_file(sandbox_id, "inside.txt")
    true_read = verdict.check(
        read == b"inside-kept",
        f"pybox's file program read {read[:40]!r} for inside.txt: planted code forged it",
    )
    files, _ = sandboxes.list_files(sandbox_id)
    listed = {f.path for f in files}
    missing = sorted(p for p in planted if p not in listed)
    true_listing = verdict.check(
        "inside.txt" in listed and not missing,
        f"pybox's file program's listing lacks {missing or ['inside.txt']}: planted code forged it",
    )
    if true_read and true_listing:
        verdict.saw(
            "pybox",
            f"its file program (python -I -S) read inside.txt and listed the {len(planted)} "
            "planted start-up files",
        )


def _judge_left_in_gvisor(suite: Suite, verdict: Verdict, container_id: str | None) -> None:
    """Under gVisor the host's cgroup holds gVisor's threads, and its ptrace stubs
    are pooled, so the host cannot count the program's processes: the Sentry's own
    process table (`runsc ps`, from the host) must hold the sandbox's one resident
    process, and every host process must still be gVisor's, filtered."""
    if not verdict.check(container_id is not None, "the first run named no box"):
        return
    assert container_id is not None
    judge_host_confinement(verdict, box_processes(container_id))
    choice = suite.session.runtime_choice()
    runsc = next(
        (r.path for r in engine_runtimes(suite.engine.info()) if r.name == choice.engine_runtime),
        "",
    )
    pids = sentry_process_ids(container_id, runsc)
    if verdict.check(
        pids is not None, f"gVisor's Sentry did not list the box's processes ({runsc} ps)"
    ):
        assert pids is not None
        verdict.saw(
            "host",
            f"between the runs gVisor's Sentry lists {len(pids)} process in the box "
            f"({runsc} ps: pids {list(pids)})",
        )
        verdict.check(len(pids) == 1, f"{len(pids)} processes were left between the runs, not 1")
