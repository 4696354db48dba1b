"""`pybox verify`'s judgements on gVisor's terms and its CPU judgement (fake engine):
the cases whose evidence differs under gVisor (docs/isolation.md), each judged on
the host's view and the Sentry's answers, never skipped."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from pybox._adapters.box_processes import (
    ROLE_GOFER,
    ROLE_OTHER,
    ROLE_SENTRY,
    ROLE_STUB,
    HostProcess,
)
from pybox._boxes.record import RunOutcome
from pybox._core.cpu_budget import cpu_budget
from pybox._core.limits import MIB, LimitRequest
from pybox._core.posture import box_user
from pybox._core.runtime_limits import IsolationFacts
from pybox._core.runtimes import GVISOR
from pybox._features.verify.escape_judges import judge_privilege, judge_seccomp
from pybox._features.verify.lanes import contained_mount_in_gvisor
from pybox._features.verify.limit_judges import (
    judge_cpu_spin,
    judge_disk_fill,
    judge_fork_bomb,
    judge_memory_bomb,
)
from pybox._orchestration.session import Session
from tests.unit.fake_engine import FakeEngine, Script
from tests.unit.test_verify import (
    BOX_TEST_UID,
    DISK_REPORT,
    MEMORY,
    PRIVILEGE_REPORT,
    SECCOMP_REPORT,
    _deadline_outcome,
    judged,
    outcome_of,
    report_script,
)


def _with_life(outcome: RunOutcome, removed_s: float | None) -> RunOutcome:
    pybox = dataclasses.replace(outcome.receipt.observed_by_pybox, removed_s=removed_s)
    receipt = dataclasses.replace(outcome.receipt, observed_by_pybox=pybox)
    return dataclasses.replace(outcome, receipt=receipt)


def test_cpu_spin_is_judged_over_the_box_life_not_the_programs_run(
    session: Session, engine: FakeEngine
) -> None:
    # The gVisor numbers that used to fail: 1.98 CPU-s for a 2 s run under 0.5 CPU,
    # in 41 active periods (0.048 per 0.1 s period), the box alive 4.2 s.
    limits = LimitRequest(cpus=0.5, timeout_s=0.2)
    kernel = {"cpu_quota_cpus": 0.5, "cpu_periods": 41, "cpu_throttled_periods": 17}
    held = _with_life(
        _deadline_outcome(session, engine, limits=limits, cpu_usage_s=1.98, **kernel), 4.2
    )
    budget = cpu_budget(held.receipt)
    # 41 counted periods and the one the count can miss at the end, 5 % slack.
    assert (budget.per_period_allowed_s, budget.window_allowed_s) == (2.205, 2.2)
    assert budget.window_from == "the run's start"
    assert judged(judge_cpu_spin, held).failures == []
    # More than the quota of the periods the kernel counted: not held.
    over_periods = _with_life(
        _deadline_outcome(session, engine, limits=limits, cpu_usage_s=2.25, **kernel), 5.0
    )
    failures = judged(judge_cpu_spin, over_periods).failures
    assert [item for item in failures if "periods of 0.1 s" in item]
    assert not [item for item in failures if "while the box lived" in item]
    # More than cpus x the box's life by pybox's clock: not held, whatever the periods.
    over_life = _with_life(
        _deadline_outcome(session, engine, limits=limits, cpu_usage_s=1.98, **kernel), 3.0
    )
    failures = judged(judge_cpu_spin, over_life).failures
    assert [item for item in failures if "while the box lived 3.0 s" in item]
    # No removal time: nothing to judge the window against.
    unknown = _with_life(
        _deadline_outcome(session, engine, limits=limits, cpu_usage_s=0.1, **kernel), None
    )
    assert [i for i in judged(judge_cpu_spin, unknown).failures if "lived None s" in i]


def test_cpu_spin_allows_the_period_the_kernel_missed_at_the_end(
    session: Session, engine: FakeEngine
) -> None:
    # CI on Podman: 1.1226 CPU-s under 0.5 CPU counted in 21 periods (1.069 x their
    # quota), the box alive 2.45 s; the same spin counts 20 or 21 periods here.
    limits = LimitRequest(cpus=0.5, timeout_s=0.2)
    kernel = {"cpu_quota_cpus": 0.5, "cpu_periods": 21, "cpu_throttled_periods": 20}
    held = _with_life(
        _deadline_outcome(session, engine, limits=limits, cpu_usage_s=1.1226, **kernel), 2.45
    )
    assert cpu_budget(held.receipt).per_period_allowed_s == 1.155
    assert judged(judge_cpu_spin, held).failures == []
    # Two periods' worth beyond the count is more than the edge explains.
    over = _with_life(
        _deadline_outcome(session, engine, limits=limits, cpu_usage_s=1.16, **kernel), 2.45
    )
    assert [i for i in judged(judge_cpu_spin, over).failures if "periods of 0.1 s" in i]


def test_a_rebased_pool_box_is_judged_from_the_codes_arrival(
    session: Session, engine: FakeEngine
) -> None:
    outcome = _deadline_outcome(
        session, engine, limits=LimitRequest(cpus=0.5, timeout_s=0.2), cpu_usage_s=0.2
    )
    kernel = dataclasses.replace(outcome.receipt.observed_by_kernel, counters_since="code_arrival")
    pybox = dataclasses.replace(outcome.receipt.observed_by_pybox, code_sent_s=5.0, removed_s=6.0)
    receipt = dataclasses.replace(
        outcome.receipt, observed_by_kernel=kernel, observed_by_pybox=pybox
    )
    budget = cpu_budget(receipt)
    assert (budget.window_s, budget.window_allowed_s, budget.window_from) == (
        1.0,
        0.6,
        "code arrival",
    )


def in_gvisor_lane(outcome: RunOutcome) -> RunOutcome:
    isolation = IsolationFacts(
        lane=GVISOR,
        engine_runtime="runsc",
        engine_runtime_args=("--platform=ptrace",),
        chosen_by="the test",
        shares_host_kernel=False,
        system_calls="gVisor's Sentry",
        limits_applied=(),
    )
    configured = dataclasses.replace(outcome.receipt.configured, isolation=isolation)
    return dataclasses.replace(
        outcome, receipt=dataclasses.replace(outcome.receipt, configured=configured)
    )


def host_process(pid: int, role: str, command: str = "", seccomp: str = "2") -> HostProcess:
    return HostProcess(pid, role, command, 65534, seccomp, "1", "0", 3)


GVISOR_HOST = (
    host_process(10, ROLE_GOFER, "runsc-gofer"),
    host_process(11, ROLE_SENTRY, "runsc-sandbox"),
    host_process(12, ROLE_STUB),
    host_process(13, ROLE_STUB),
)
# What the Sentry gives and lets through (measured, runsc 2022-12-19).
GVISOR_PRIVILEGE_REPORT: dict[str, Any] = {
    **PRIVILEGE_REPORT,
    "caps": {**PRIVILEGE_REPORT["caps"], "CapAmb": None},
    "seccomp": "0",
    "attempts": {
        **{f"attempt {n}": "EPERM" for n in range(14)},
        **dict.fromkeys(
            (
                "unshare(CLONE_NEWUSER)",
                "unshare(CLONE_NEWNS)",
                "unshare -U true",
                "unshare -r true",
                "mknod /tmp/mem",
            ),
            "succeeded",
        ),
        "read the /tmp/mem node": "ENXIO",
    },
    "devices": [["/dev/null", "char", 1, 3], ["/dev/fuse", "char", 10, 229]],
}


@pytest.mark.parametrize(
    ("change", "host", "failure"),
    [
        ({}, GVISOR_HOST, None),
        ({}, (), "the host never saw the box's processes"),
        ({}, (*GVISOR_HOST, host_process(14, ROLE_OTHER, "python3")), "not gVisor's"),
        ({}, (*GVISOR_HOST[:3], host_process(13, ROLE_STUB, seccomp="0")), "seccomp filter"),
        ({}, GVISOR_HOST[:1], "0 Sentry processes"),
        (
            {
                "attempts": {
                    **GVISOR_PRIVILEGE_REPORT["attempts"],
                    "read the /tmp/mem node": "succeeded",
                }
            },
            GVISOR_HOST,
            "these succeeded: ['read the /tmp/mem node']",
        ),
        (
            {"attempts": {**GVISOR_PRIVILEGE_REPORT["attempts"], "setuid(0)": "succeeded"}},
            GVISOR_HOST,
            "these succeeded: ['setuid(0)']",
        ),
        (
            {"caps": {**PRIVILEGE_REPORT["caps"], "CapPrm": "1", "CapAmb": None}},
            GVISOR_HOST,
            "capabilities",
        ),
        ({"devices": [["/dev/mem", "char", 1, 1]]}, GVISOR_HOST, "unsafe devices"),
    ],
)
def test_privilege_on_gvisors_terms(
    session: Session,
    engine: FakeEngine,
    change: dict[str, Any],
    host: tuple[HostProcess, ...],
    failure: str | None,
) -> None:
    outcome = outcome_of(session, engine, report_script({**GVISOR_PRIVILEGE_REPORT, **change}))
    configured = dataclasses.replace(outcome.receipt.configured, user=box_user(BOX_TEST_UID))
    outcome = in_gvisor_lane(
        dataclasses.replace(
            outcome, receipt=dataclasses.replace(outcome.receipt, configured=configured)
        )
    )
    failures = judged(judge_privilege, outcome, host).failures
    if failure is None:
        assert failures == []
    else:
        assert any(failure in item for item in failures), failures
    # The same report in the runc lane: the Sentry's answers are not contained there.
    if failure is None:
        runc = dataclasses.replace(
            outcome,
            receipt=dataclasses.replace(
                outcome.receipt,
                configured=dataclasses.replace(outcome.receipt.configured, isolation=None),
            ),
        )
        assert judged(judge_privilege, runc, host).failures


def test_seccomp_on_gvisors_terms(session: Session, engine: FakeEngine) -> None:
    # The Sentry answers the calls itself, some with success, in seccomp mode 0.
    report = {
        **SECCOMP_REPORT,
        "seccomp": "0",
        "attempts": {**SECCOMP_REPORT["attempts"], "io_uring_setup": "succeeded"},
    }
    outcome = in_gvisor_lane(outcome_of(session, engine, report_script(report)))
    sha = session.confinement().seccomp_sha256
    verdict = judged(judge_seccomp, outcome, sha, GVISOR_HOST)
    assert verdict.failures == []
    assert any(f.source == "host" and "all gVisor's" in f.text for f in verdict.facts)
    # Judged on the host's view: without it, or with a process outside gVisor, not held.
    assert judged(judge_seccomp, outcome, sha, ()).failures
    leaked = (*GVISOR_HOST, host_process(20, ROLE_OTHER, "python3", seccomp="0"))
    failures = judged(judge_seccomp, outcome, sha, leaked).failures
    assert any("not gVisor's" in item for item in failures), failures
    assert any("without a seccomp filter" in item for item in failures), failures


def test_memory_bomb_one_page_over_only_in_gvisor(session: Session, engine: FakeEngine) -> None:
    def bomb(peak: int) -> RunOutcome:
        return outcome_of(
            session,
            engine,
            Script(stdout=b"holding 56 MiB\n", exit_code=137, oom_killed=True),
            MEMORY,
            oom_kill_count=1,
            memory_limit_bytes=64 * MIB,
            memory_peak_bytes=peak,
        )

    # Measured under gVisor: the dying sandbox's forced charge, one page over.
    assert judged(judge_memory_bomb, in_gvisor_lane(bomb(64 * MIB + 4096))).failures == []
    assert judged(judge_memory_bomb, in_gvisor_lane(bomb(64 * MIB + 8192))).failures
    assert judged(judge_memory_bomb, bomb(64 * MIB + 4096)).failures  # never under runc


def test_fork_bomb_on_gvisors_terms(session: Session, engine: FakeEngine) -> None:
    limits = LimitRequest(pids=32, timeout_s=0.2)

    def bomb(script: Script, **kernel: Any) -> RunOutcome:
        return in_gvisor_lane(outcome_of(session, engine, script, limits, **kernel))

    ended = Script(stdout=b"fork refused: Resource temporarily unavailable\n", exit_code=2)
    backstop = {"pids_limit": 384, "pids_peak": 384, "pids_limit_hits": 1}
    # The sandbox ended at the host's backstop (64 + 10 x 32) before the deadline.
    assert judged(judge_fork_bomb, bomb(ended, **backstop)).failures == []
    # Or the deadline ended it, the host's threads held below the backstop.
    hung = Script(stdout=b"fork refused\n", hang=True)
    held = {"pids_limit": 384, "pids_peak": 300, "pids_limit_hits": 0}
    assert judged(judge_fork_bomb, bomb(hung, **held)).failures == []
    # An end the backstop did not cause is not the bomb's containment.
    failures = judged(judge_fork_bomb, bomb(ended, **{**backstop, "pids_limit_hits": 0})).failures
    assert any("neither ended" in item for item in failures), failures
    failures = judged(judge_fork_bomb, bomb(ended, **{**backstop, "pids_limit": 32})).failures
    assert any("not gVisor's backstop 384" in item for item in failures), failures
    failures = judged(judge_fork_bomb, bomb(ended, **{**backstop, "pids_peak": 400})).failures
    assert any("not within the backstop" in item for item in failures), failures


def test_disk_fill_on_gvisors_terms(session: Session, engine: FakeEngine) -> None:
    limits = LimitRequest(writable_bytes=8 * MIB)
    sentry = {
        **DISK_REPORT,
        "root_errors": {"EACCES": 687, "EROFS": 2},
        "root_read_only_flag": False,
        "root_mount_read_only": True,
    }

    def judged_in_gvisor(report: dict[str, Any]) -> list[str]:
        outcome = in_gvisor_lane(outcome_of(session, engine, report_script(report), limits))
        return judged(judge_disk_fill, outcome).failures

    assert judged_in_gvisor(sentry) == []
    # EACCES alone would be permissions only: at least one EROFS must show the mount.
    assert any("no EROFS" in i for i in judged_in_gvisor({**sentry, "root_errors": {"EACCES": 9}}))
    assert any(
        "ro in the mount" in i for i in judged_in_gvisor({**sentry, "root_mount_read_only": False})
    )
    runc = outcome_of(session, engine, report_script(sentry), limits)
    assert any("other than EROFS" in i for i in judged(judge_disk_fill, runc).failures)


def _mount(point: str, fstype: str, options: str = "ro") -> dict[str, str]:
    return {"mount_point": point, "fstype": fstype, "options": options, "root": "/"}


@pytest.mark.parametrize(
    ("mount", "contained"),
    [
        (_mount("/", "9p"), True),  # the image root, served by the Gofer
        (_mount("/", "9p", "rw"), False),
        (_mount("/etc/hostname", "9p"), True),  # the engine's own file
        (_mount("/home/user", "9p"), False),  # a host directory the Gofer would serve
        (_mount("/dev", "tmpfs", "rw"), True),  # the Sentry's own
        (_mount("/proc", "proc", "rw"), True),
        (_mount("/sys/fs/cgroup/pids", "cgroup", "rw"), False),
        (_mount("/", "overlay"), False),
        (_mount("/data", "ext4"), False),
    ],
)
def test_mounts_on_gvisors_terms(mount: dict[str, str], contained: bool) -> None:
    assert contained_mount_in_gvisor(mount, ("/etc/hostname",)) is contained
