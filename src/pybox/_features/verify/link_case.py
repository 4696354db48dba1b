"""The PID 1 link case of `pybox verify`: in a sandbox, a program can open
neither PID 1's memory nor, under runc, its descriptors or environment. Under
gVisor, which checks none of those (docs/isolation.md), it can open PID 1's
stdin and stdout: then a report it forges on PID 1's stdout must never be
taken for PID 1's, and nothing pybox sends later may reach it."""

from __future__ import annotations

from typing import Any

from pybox._core.errors import SandboxNotFound
from pybox._core.limits import LimitRequest
from pybox._core.receipt import Receipt, Status
from pybox._core.request import RunRequest
from pybox._features.sandboxes.records import RUN_PROGRAM
from pybox._features.verify.harness import Suite
from pybox._features.verify.lanes import lane_terms
from pybox._features.verify.verdict import Verdict, case_source, judge_gone, program_report

ATTACK_EXIT_CODE = 3


def _request(step: str) -> RunRequest:
    return RunRequest(code=case_source("bootstrap_link"), code_name=RUN_PROGRAM, argv=(step,))


def run_bootstrap_link(suite: Suite, verdict: Verdict) -> None:
    sandboxes = suite.session.sandboxes()
    info = sandboxes.create(limits=LimitRequest(timeout_s=10))
    verdict.run_ids.append(info.sandbox_id)
    container_id = None
    try:
        look = sandboxes.run(info.sandbox_id, _request("look"))
        container_id = look.receipt.observed_by_engine.container_id
        _judge_reach(verdict, program_report(look.stdout, look.stderr, verdict), look.receipt)
        attack = sandboxes.run(info.sandbox_id, _request("attack"))
        receipt = attack.receipt
        if receipt.status is Status.SANDBOX_ERROR:
            verdict.check(
                "does not carry this run's token" in receipt.cause.summary,
                f"the attacking run ended otherwise: {receipt.cause.summary[:200]}",
            )
            verdict.saw("pybox", "the exit report forged on PID 1's stdout was refused")
        else:
            code = receipt.reported_by_program.exit_code
            if verdict.check(
                receipt.status is Status.FAILED and code == ATTACK_EXIT_CODE,
                f"the attacking run was reported {receipt.status.value}, exit code {code}, not "
                f"failed with its own exit code {ATTACK_EXIT_CODE}: a forged exit report was "
                "taken for PID 1's",
            ):
                verdict.saw("pybox", f"the attacking run failed with its own exit code {code}")
        try:
            after = sandboxes.run(info.sandbox_id, _request("after"))
        except SandboxNotFound:
            verdict.saw("pybox", "the sandbox ended with its box, whose link was tampered with")
        else:
            found = program_report(after.stdout, after.stderr, verdict)
            read = bytes.fromhex(str(found.get("read_hex") or ""))
            verdict.check(
                not read, f"the program read {len(read)} bytes pybox sent PID 1 after its run"
            )
            verdict.check(found.get("forged") is not True, "a forged exit report went unnoticed")
            verdict.saw("program", f"it read {len(read)} bytes of what pybox sent PID 1")
    finally:
        _, was_live = sandboxes.destroy(info.sandbox_id)
        verdict.saw("pybox", "sandbox destroyed" if was_live else "sandbox already ended")
    judge_gone(verdict, suite.engine, container_id, True, suite.cgroup_exists)


def _judge_reach(verdict: Verdict, report: dict[str, Any], receipt: Receipt) -> None:
    """What the program could open of PID 1: never its memory; under runc nothing."""
    opened = report.get("descriptors")
    names = report.get("environ_names")
    if not verdict.check(isinstance(opened, dict), "the program did not say what it opened"):
        return
    assert isinstance(opened, dict)
    verdict.check(report.get("mem") == [], "the program opened PID 1's memory (/proc/1/mem)")
    if not lane_terms(receipt).guards_other_processes_proc:
        verdict.saw(
            "program",
            f"under gVisor it opened {len(opened)} of PID 1's /proc entries ({', '.join(opened)}): "
            "gVisor checks no access to another process's descriptors or environment",
        )
        verdict.check(
            names == [], f"PID 1's environment holds names the program lacks: {names!r}"[:300]
        )
        return
    verdict.check(not opened, f"the program opened PID 1's {', '.join(sorted(opened))}"[:300])
    verdict.check(names is None, "the program read PID 1's environment (/proc/1/environ)")
    verdict.saw("program", "it could open none of PID 1's descriptors, its environment or memory")
