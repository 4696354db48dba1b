"""`pybox verify`'s judges, posture hook and suite, with the fake engine.

The judges get real outcomes of the fake engine's runs, with the kernel's
counters and the program's report set to what a contained (or an escaped)
box would show. Each criterion must pass the first and fail the second.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from importlib.resources import files
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from pybox._adapters.cgroups import empty_observation
from pybox._adapters.state import StateStore
from pybox._boxes.record import RunOutcome
from pybox._core.limits import MIB, LimitRequest
from pybox._core.posture import LABEL_MANAGED, LABEL_OWNER, LABEL_RUN_ID, box_user
from pybox._core.request import RunRequest
from pybox._features.verify.case_runs import run_posture
from pybox._features.verify.escape_judges import (
    ListenerReport,
    judge_host_files,
    judge_network,
    judge_privilege,
    judge_seccomp,
    judge_secrets,
)
from pybox._features.verify.harness import Case, Suite
from pybox._features.verify.limit_judges import (
    FLOOD_STDERR_BYTES,
    FLOOD_STDOUT_BYTES,
    judge_cpu_spin,
    judge_disk_fill,
    judge_fork_bomb,
    judge_memory_bomb,
    judge_output_flood,
    judge_timeout_evasion,
)
from pybox._features.verify.posture_case import (
    NOT_HARDENING,
    WEAKENINGS,
    WeakenedCreateEngine,
    Weakening,
    judge_weakened,
)
from pybox._features.verify.suite import CASES, run_suite
from pybox._features.verify.verdict import CaseResult, Fact, Verdict, case_source
from pybox._frontends.cli._verify import case_line, verify_json
from pybox._orchestration.session import Session
from tests.unit.conftest import OWNER, make_session
from tests.unit.fake_engine import FakeEngine, Script
from tests.unit.seal_helpers import requirements
from tests.unit.test_posture import SPEC

DOCS = Path(__file__).resolve().parents[2] / "docs"
SOURCES = {"program", "engine", "kernel", "host", "pybox"}


def outcome_of(
    session: Session,
    engine: FakeEngine,
    script: Script,
    limits: LimitRequest | None = None,
    **kernel: Any,
) -> RunOutcome:
    """A fake run's outcome, with the kernel's counters set as given."""
    engine.script = script
    outcome = session.run(RunRequest(code=b"pass", limits=limits or LimitRequest()))
    observed = dataclasses.replace(empty_observation(0.01), samples=3, **kernel)
    receipt = dataclasses.replace(outcome.receipt, observed_by_kernel=observed)
    return dataclasses.replace(outcome, receipt=receipt)


def report_script(report: dict[str, Any], **kwargs: Any) -> Script:
    return Script(stdout=json.dumps(report).encode() + b"\n", **kwargs)


def judged(judge: Any, outcome: RunOutcome, *args: Any, **kwargs: Any) -> Verdict:
    verdict = Verdict()
    judge(outcome, verdict, *args, **kwargs)
    assert {fact.source for fact in verdict.facts} <= SOURCES
    return verdict


# -- the cases are data -------------------------------------------------------------


def test_every_case_has_its_program_and_every_program_a_case() -> None:
    shipped = {
        entry.name.removesuffix(".py")
        for entry in files("pybox._features.verify").joinpath("cases").iterdir()
        if entry.name.endswith(".py")
    }
    assert shipped == {case.name for case in CASES}
    for case in CASES:
        compile(case_source(case.name), f"{case.name}.py", "exec")


def test_the_issue_lists_these_cases() -> None:
    assert [case.name for case in CASES] == [
        "host_files",
        "network",
        "egress_packages",  # issue 16: packages mode, past the proxy and around it
        "memory_bomb",
        "fork_bomb",
        "cpu_spin",
        "disk_fill",
        "output_flood",
        "timeout_evasion",
        "privilege",
        "seccomp",
        "secrets",
        "mcp_env",  # issue 29: an MCP agent names the server's own environment
        "leftovers",
        "sandbox",  # issue 14: a persistent sandbox keeps only its workspace
        "sandbox_ipc",  # issue 29: IPC objects between a sandbox's runs
        "bootstrap_link",  # issue 29: PID 1's descriptors, and what a program can do with them
        "posture",
    ]


def test_programs_never_name_a_public_address() -> None:
    for case in CASES:
        source = case_source(case.name).decode()
        for forbidden in ("8.8.8.8", "1.1.1.1", "example.com", ".org", "http://", "https://"):
            assert forbidden not in source, (case.name, forbidden)


# -- the posture hook ---------------------------------------------------------------------


def test_every_hardening_field_is_weakened() -> None:
    settable = {
        r.name
        for r in requirements(SPEC)
        if r.create_path is not None or r.name.endswith(("MaskedPaths", "ReadonlyPaths"))
    }
    weakened = {w.field for w in WEAKENINGS}
    assert weakened | set(NOT_HARDENING) == settable
    assert not weakened & set(NOT_HARDENING)


def _weak_session(engine: FakeEngine, state: StateStore, tmp_path: Path) -> Any:
    hook = WeakenedCreateEngine(engine, str(tmp_path))
    session = Session(
        hook,
        state,
        make_session(engine, state).policy,
        owner=OWNER,
        sampler_factory=lambda container_id: None,
        is_owner_alive=lambda owner: owner == OWNER,
    )
    return hook, session


@pytest.mark.parametrize("weakening", WEAKENINGS, ids=lambda w: f"{w.field}-{w.how}")
def test_each_weakened_box_is_refused_before_start(
    weakening: Weakening, engine: FakeEngine, state: StateStore, tmp_path: Path
) -> None:
    hook, session = _weak_session(engine, state, tmp_path)
    hook.reset(weakening)
    outcome = session.run(RunRequest(code=b"print(1)"))
    assert hook.discard_donor()
    verdict = Verdict()
    assert judge_weakened(outcome, verdict, weakening, hook), verdict.failures
    assert "start" not in [name for name, _ in engine.calls]
    assert engine.containers == {}
    placeholders = json.dumps([c for c in engine.calls])
    assert "{host_dir}" not in placeholders and "{donor}" not in placeholders


def test_a_weakening_that_changes_nothing_fails_the_case(
    engine: FakeEngine, state: StateStore, tmp_path: Path
) -> None:
    hook, session = _weak_session(engine, state, tmp_path)
    harmless = Weakening("HostConfig.Privileged", "unchanged", (("HostConfig.Privileged", False),))
    hook.reset(harmless)
    engine.script = Script(stdout=b'{"started": true}\n')
    outcome = session.run(RunRequest(code=b"print(1)"))
    verdict = Verdict()
    assert not judge_weakened(outcome, verdict, harmless, hook)
    assert any("the box started" in failure for failure in verdict.failures)
    assert any("the program ran" in failure for failure in verdict.failures)


def test_the_posture_case_runs_every_weakening(
    engine: FakeEngine, state: StateStore, tmp_path: Path
) -> None:
    suite = Suite(make_session(engine, state), None, lambda container_id: False, tmp_path)
    verdict = Verdict()
    run_posture(suite, verdict)
    assert verdict.failures == []
    assert len(verdict.run_ids) == len(WEAKENINGS)
    assert (
        f"{len(WEAKENINGS)} of {len(WEAKENINGS)} weakened boxes refused" in verdict.facts[-1].text
    )
    assert engine.containers == {}
    # Links and VolumesFrom pointed at a donor box, which went with its box.
    assert len(engine.names("create")) == len(WEAKENINGS) + 2


# -- judges -------------------------------------------------------------------------------

CONTAINED_MOUNTS = [
    {"mount_point": "/", "root": "/", "device": "0:39", "fstype": "overlay", "options": "ro"},
    {"mount_point": "/proc", "root": "/", "device": "0:42", "fstype": "proc", "options": "rw"},
    {"mount_point": "/tmp", "root": "/", "device": "0:49", "fstype": "tmpfs", "options": "rw"},
    {"mount_point": "/dev", "root": "/", "device": "0:43", "fstype": "tmpfs", "options": "rw"},
    {
        "mount_point": "/sys/fs/cgroup/pids",
        "root": "/",
        "device": "0:36",
        "fstype": "cgroup",
        "options": "ro,nosuid",
    },
]
HOST_DEVICES = frozenset({"0:21", "0:36", "254:0"})


def host_files_report(container_id: str, **changes: Any) -> dict[str, Any]:
    hostname = {
        "mount_point": "/etc/hostname",
        "root": f"/var/lib/docker/containers/{container_id}/hostname",
        "device": "254:0",
        "fstype": "ext4",
        "options": "ro,relatime",
    }
    report: dict[str, Any] = {
        "reads": {"/tmp/x/canary": "ENOENT", "/proc/1/root/tmp/x/canary": "EACCES"},
        "sockets": [],
        "usual_sockets_present": [],
        "paths_walked": 5000,
        "unix_sockets": ["0000: 00000002 00000000 00010000 0001 01 12345"],
        "mounts": [*CONTAINED_MOUNTS, hostname],
        "engine_files": {"/etc/hostname": "read pybox\n", "/run/.containerenv": "ENOENT"},
    }
    report.update(changes)
    return report


def podman_files_report(container_id: str, **changes: Any) -> dict[str, Any]:
    """What Podman 4.3 binds into a box (measured): its own per-box hostname and
    .containerenv, read-only, from its storage on the host's disk."""
    userdata = f"/run/containers/storage/overlay-containers/{container_id}/userdata"
    bound = [
        {
            "mount_point": point,
            "root": f"{userdata}/{name}",
            "device": "254:0",
            "fstype": "ext4",
            "options": "ro,nosuid,nodev,noexec,relatime",
        }
        for point, name in (("/run/.containerenv", ".containerenv"), ("/etc/hostname", "hostname"))
    ]
    report = host_files_report(container_id)
    report["mounts"] = [*CONTAINED_MOUNTS, *bound]
    report["engine_files"] = {"/etc/hostname": "read pybox", "/run/.containerenv": "read "}
    report.update(changes)
    return report


def on_engine(outcome: RunOutcome, name: str) -> RunOutcome:
    receipt = outcome.receipt
    engine = dataclasses.replace(receipt.configured.engine, name=name)
    configured = dataclasses.replace(receipt.configured, engine=engine)
    return dataclasses.replace(outcome, receipt=dataclasses.replace(receipt, configured=configured))


def test_podman_s_own_files_for_the_box_are_contained(session: Session, engine: FakeEngine) -> None:
    report = podman_files_report(_first_container_id(engine))
    outcome = on_engine(outcome_of(session, engine, report_script(report)), "podman")
    verdict = judged(judge_host_files, outcome, canary_secret="s3cr3t", host_devices=HOST_DEVICES)
    assert verdict.failures == []
    # The same mounts from Docker would be files from the host.
    docker = dataclasses.replace(outcome, receipt=on_engine(outcome, "docker").receipt)
    verdict = judged(judge_host_files, docker, canary_secret="s3cr3t", host_devices=HOST_DEVICES)
    assert any("mounts from the host" in item for item in verdict.failures)


@pytest.mark.parametrize(
    ("change", "failure"),
    [
        ({"options": "rw,nosuid"}, "mounts from the host"),
        ({"root": "/run/containers/storage/overlay-containers/other/userdata/hostname"}, "host"),
        ({"mount_point": "/etc/passwd"}, "mounts from the host"),
    ],
)
def test_podman_s_files_weakened_fail(
    session: Session, engine: FakeEngine, change: dict[str, str], failure: str
) -> None:
    report = podman_files_report(_first_container_id(engine))
    report["mounts"][-1] = {**report["mounts"][-1], **change}
    outcome = on_engine(outcome_of(session, engine, report_script(report)), "podman")
    verdict = judged(judge_host_files, outcome, canary_secret="s3cr3t", host_devices=HOST_DEVICES)
    assert any(failure in item for item in verdict.failures), verdict.failures


@pytest.mark.parametrize(
    ("point", "content"),
    [("/run/.containerenv", 'read engine="podman-4.3.1"\n'), ("/etc/hostname", "read vm\n")],
)
def test_podman_s_files_holding_more_than_the_box_s_fail(
    session: Session, engine: FakeEngine, point: str, content: str
) -> None:
    report = podman_files_report(_first_container_id(engine))
    report["engine_files"][point] = content
    outcome = on_engine(outcome_of(session, engine, report_script(report)), "podman")
    verdict = judged(judge_host_files, outcome, canary_secret="s3cr3t", host_devices=HOST_DEVICES)
    assert any(f"the engine's {point} holds" in item for item in verdict.failures)


def _first_container_id(engine: FakeEngine) -> str:
    # The fake engine numbers its boxes from 1.
    return f"{len(engine.names('create')) + 1:064x}"


def test_host_files_contained(session: Session, engine: FakeEngine) -> None:
    report = host_files_report(_first_container_id(engine))
    outcome = outcome_of(session, engine, report_script(report))
    verdict = judged(judge_host_files, outcome, canary_secret="s3cr3t", host_devices=HOST_DEVICES)
    assert verdict.failures == []


@pytest.mark.parametrize(
    ("change", "failure"),
    [
        ({"reads": {"/tmp/x/canary": "read pybox verify host canary"}}, "host files were read"),
        ({"sockets": ["/run/docker.sock"]}, "sockets found"),
        (
            {"unix_sockets": ["0000: 00000002 00000000 00010000 0001 01 1 @/containerd-shim"]},
            "sockets found",
        ),
        ({"paths_walked": 3}, "walked only"),
        (
            {
                "mounts": [
                    *CONTAINED_MOUNTS,
                    {"mount_point": "/host", "device": "0:21", "fstype": "tmpfs", "options": "rw"},
                ]
            },
            "mounts from the host",
        ),
        (
            {
                "mounts": [
                    *CONTAINED_MOUNTS,
                    {
                        "mount_point": "/etc/hostname",
                        "root": "/var/lib/docker/containers/other/hostname",
                        "device": "254:0",
                        "fstype": "ext4",
                        "options": "ro",
                    },
                ]
            },
            "mounts from the host",
        ),
        (
            {
                "mounts": [
                    {**CONTAINED_MOUNTS[0], "options": "rw"},
                    *CONTAINED_MOUNTS[1:],
                ]
            },
            "mounts from the host",
        ),
    ],
)
def test_host_files_escapes_fail(
    session: Session, engine: FakeEngine, change: dict[str, Any], failure: str
) -> None:
    report = host_files_report(_first_container_id(engine), **change)
    outcome = outcome_of(session, engine, report_script(report))
    verdict = judged(judge_host_files, outcome, canary_secret="s3cr3t", host_devices=HOST_DEVICES)
    assert any(failure in item for item in verdict.failures), verdict.failures


def test_the_canary_in_the_output_fails(session: Session, engine: FakeEngine) -> None:
    report = host_files_report(_first_container_id(engine))
    outcome = outcome_of(session, engine, report_script(report, stderr=b"found s3cr3t\n"))
    verdict = judged(judge_host_files, outcome, canary_secret="s3cr3t", host_devices=HOST_DEVICES)
    assert "the host canary's secret left the box" in verdict.failures


def test_an_unreadable_report_fails(session: Session, engine: FakeEngine) -> None:
    outcome = outcome_of(session, engine, Script(stdout=b"not json\n", stderr=b"Traceback"))
    verdict = judged(judge_host_files, outcome, canary_secret="x", host_devices=HOST_DEVICES)
    assert any("report is missing or unreadable" in item for item in verdict.failures)


NETWORK_REPORT = {
    "interfaces": ["lo"],
    "ipv4_routes": [],
    "ipv6_route_devices": ["lo"],
    "nameservers": [],
    "dns": "gaierror -3",
    "tcp_connect": "ENETUNREACH",
    "udp_send": "ENETUNREACH",
}
LISTENER = ListenerReport("172.17.0.1", 40000, 40001, 0, 0)


def test_network_contained(session: Session, engine: FakeEngine) -> None:
    outcome = outcome_of(session, engine, report_script(NETWORK_REPORT))
    assert judged(judge_network, outcome, LISTENER).failures == []


@pytest.mark.parametrize(
    ("change", "listener", "failure"),
    [
        ({"interfaces": ["eth0", "lo"]}, LISTENER, "interfaces besides lo"),
        ({"ipv4_routes": ["eth0 00000000"]}, LISTENER, "IPv4 routes"),
        ({"ipv6_route_devices": ["eth0", "lo"]}, LISTENER, "IPv6 routes"),
        ({"nameservers": ["nameserver 10.0.0.2"]}, LISTENER, "name servers"),
        ({"dns": "[(2, 1, 6, '', ('10.0.0.1', 80))]"}, LISTENER, "a name resolved"),
        ({"tcp_connect": "connected"}, LISTENER, "TCP to"),
        ({"udp_send": "sent"}, LISTENER, "UDP to"),
        ({}, ListenerReport("172.17.0.1", 40000, 40001, 1, 0), "got 1 connections"),
    ],
)
def test_network_escapes_fail(
    session: Session,
    engine: FakeEngine,
    change: dict[str, Any],
    listener: ListenerReport,
    failure: str,
) -> None:
    outcome = outcome_of(session, engine, report_script({**NETWORK_REPORT, **change}))
    verdict = judged(judge_network, outcome, listener)
    assert any(failure in item for item in verdict.failures), verdict.failures


def test_without_a_bridge_no_connection_is_claimed(session: Session, engine: FakeEngine) -> None:
    outcome = outcome_of(session, engine, report_script(NETWORK_REPORT))
    verdict = judged(judge_network, outcome, ListenerReport(None, 0, 0, 0, 0))
    assert verdict.failures == []
    assert any("no connection was attempted" in fact.text for fact in verdict.facts)


MEMORY = LimitRequest(memory_bytes=64 * MIB)


def test_memory_bomb_with_kernel_evidence(session: Session, engine: FakeEngine) -> None:
    outcome = outcome_of(
        session,
        engine,
        Script(stdout=b"holding 56 MiB\n", exit_code=137, oom_killed=True),
        MEMORY,
        oom_kill_count=1,
        memory_limit_bytes=64 * MIB,
        memory_peak_bytes=64 * MIB,
    )
    assert judged(judge_memory_bomb, outcome).failures == []


def test_exit_137_alone_is_not_a_contained_memory_bomb(
    session: Session, engine: FakeEngine
) -> None:
    """Never guess: without the kernel's or the engine's word it is not out_of_memory."""
    outcome = outcome_of(
        session,
        engine,
        Script(exit_code=137),
        MEMORY,
        oom_kill_count=0,
        memory_limit_bytes=64 * MIB,
        memory_peak_bytes=64 * MIB,
    )
    failures = judged(judge_memory_bomb, outcome).failures
    assert any("not out_of_memory" in item for item in failures)
    assert "no kernel or engine evidence of an OOM kill" in failures


def test_memory_over_the_cap_fails(session: Session, engine: FakeEngine) -> None:
    outcome = outcome_of(
        session,
        engine,
        Script(exit_code=137, oom_killed=True),
        MEMORY,
        oom_kill_count=None,
        memory_limit_bytes=64 * MIB,
        memory_peak_bytes=65 * MIB,
    )
    failures = judged(judge_memory_bomb, outcome).failures
    assert any("not within the cap" in item for item in failures)


def _deadline_outcome(session: Session, engine: FakeEngine, **kwargs: Any) -> RunOutcome:
    limits = kwargs.pop("limits", LimitRequest(timeout_s=0.2))
    return outcome_of(session, engine, Script(stdout=b"started\n", hang=True), limits, **kwargs)


def test_fork_bomb_held_at_the_cap(session: Session, engine: FakeEngine) -> None:
    outcome = _deadline_outcome(
        session,
        engine,
        limits=LimitRequest(pids=32, timeout_s=0.2),
        pids_limit=32,
        pids_peak=32,
        pids_limit_hits=500,
    )
    assert judged(judge_fork_bomb, outcome).failures == []
    below = _deadline_outcome(
        session,
        engine,
        limits=LimitRequest(pids=32, timeout_s=0.2),
        pids_limit=32,
        pids_peak=20,
        pids_limit_hits=0,
    )
    failures = judged(judge_fork_bomb, below).failures
    assert any("not the cap 32" in item for item in failures)
    assert any("refused forks" in item for item in failures)


def test_fork_bomb_peak_one_over_the_cap(session: Session, engine: FakeEngine) -> None:
    """A sampled peak may read cap + 1 (a refused fork, counted for an instant);
    the kernel's own peak counter never may."""

    def over(source: str) -> list[str]:
        outcome = _deadline_outcome(
            session,
            engine,
            limits=LimitRequest(pids=32, timeout_s=0.2),
            pids_limit=32,
            pids_peak=33,
            pids_peak_source=source,
            pids_limit_hits=500,
        )
        return judged(judge_fork_bomb, outcome).failures

    assert over("highest sample") == []
    assert any("processes peak is 33" in item for item in over("kernel peak counter"))


def test_cpu_spin_throttled(session: Session, engine: FakeEngine) -> None:
    limits = LimitRequest(cpus=0.5, timeout_s=0.2)
    outcome = _deadline_outcome(
        session,
        engine,
        limits=limits,
        cpu_quota_cpus=0.5,
        cpu_usage_s=0.1,
        cpu_periods=3,
        cpu_throttled_periods=2,
    )
    assert judged(judge_cpu_spin, outcome).failures == []
    unthrottled = _deadline_outcome(
        session,
        engine,
        limits=limits,
        cpu_quota_cpus=0.5,
        cpu_usage_s=2.0,
        cpu_periods=3,
        cpu_throttled_periods=0,
    )
    failures = judged(judge_cpu_spin, unthrottled).failures
    assert any("throttled periods" in item for item in failures)
    assert any("the quota allows" in item for item in failures)


def test_a_program_that_exits_is_not_a_deadline_kill(session: Session, engine: FakeEngine) -> None:
    outcome = outcome_of(session, engine, Script(stdout=b"children and daemons started\n"))
    failures = judged(judge_timeout_evasion, outcome).failures
    assert any("not a deadline kill" in item for item in failures)


def test_timeout_evasion_ended_at_the_deadline(session: Session, engine: FakeEngine) -> None:
    script = Script(stdout=b"children and daemons started\n", hang=True)
    outcome = outcome_of(session, engine, script, LimitRequest(timeout_s=0.2), pids_peak=8)
    assert judged(judge_timeout_evasion, outcome).failures == []
    few = outcome_of(session, engine, script, LimitRequest(timeout_s=0.2), pids_peak=2)
    assert any(
        "the children never ran" in item for item in judged(judge_timeout_evasion, few).failures
    )


DISK_REPORT: dict[str, Any] = {
    "root_probes": 689,
    "root_errors": {"EROFS": 689},
    "root_written": [],
    "named": {"/": "EROFS", "/root": "EACCES"},
    "root_read_only_flag": True,
    "fills": {
        d: {"error": "ENOSPC", "bytes": 8 * MIB} for d in ("/tmp", "/pybox/work", "/dev/shm")
    },
    "home": "/pybox/work",
}


def test_disk_fill_contained(session: Session, engine: FakeEngine) -> None:
    limits = LimitRequest(writable_bytes=8 * MIB)
    outcome = outcome_of(session, engine, report_script(DISK_REPORT), limits)
    assert judged(judge_disk_fill, outcome).failures == []
    escaped = {
        **DISK_REPORT,
        "root_written": ["/usr"],
        "fills": {**DISK_REPORT["fills"], "/tmp": {"error": "no error", "bytes": 64 * MIB}},
    }
    outcome = outcome_of(session, engine, report_script(escaped), limits)
    failures = judged(judge_disk_fill, outcome).failures
    assert any("root filesystem in ['/usr']" in item for item in failures)
    assert any("filling /tmp ended with no error" in item for item in failures)


def _flood_outcome(session: Session, engine: FakeEngine) -> RunOutcome:
    return outcome_of(
        session,
        engine,
        Script(stdout=b"y" * (FLOOD_STDOUT_BYTES // 64), stderr=b"y" * (FLOOD_STDERR_BYTES // 64)),
        LimitRequest(output_bytes=64 * 1024),
    )


def test_output_flood_judged_on_pyboxs_own_count(session: Session, engine: FakeEngine) -> None:
    outcome = _flood_outcome(session, engine)
    failures = judged(judge_output_flood, outcome, 5 * MIB, "test").failures
    # The fake box sent 1/64 of the flood: pybox's count says so.
    assert any("stdout: pybox counted 4194304 of 268435456" in item for item in failures)
    assert not any("truncat" in item for item in failures)


def test_output_flood_fails_when_pybox_grows(session: Session, engine: FakeEngine) -> None:
    outcome = _flood_outcome(session, engine)
    failures = judged(judge_output_flood, outcome, 300 * MIB, "test").failures
    assert any("pybox's memory grew by 300.0 MiB" in item for item in failures)
    unmeasured = judged(judge_output_flood, outcome, None, "test").failures
    assert "pybox's own memory could not be measured" in unmeasured


BOX_TEST_UID = 1_600_000_123
PRIVILEGE_REPORT: dict[str, Any] = {
    "ids": dict.fromkeys(("uid", "euid", "gid", "egid"), BOX_TEST_UID),
    "caps": {k: "0000000000000000" for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")},
    "no_new_privs": "1",
    "seccomp": "2",
    "setuid_files": [],
    "attempts": {f"attempt {n}": "EPERM" for n in range(20)},
    "devices": [["/dev/null", "char", 1, 3], ["/dev/pts/ptmx", "char", 5, 2]],
}


@pytest.mark.parametrize(
    ("change", "failure"),
    [
        ({}, None),
        ({"ids": {"uid": 0, "euid": 0, "gid": 0, "egid": 0}}, "identity"),
        ({"ids": {"uid": 1000, "euid": 1000, "gid": 1000, "egid": 1000}}, "identity"),
        ({"caps": {**PRIVILEGE_REPORT["caps"], "CapBnd": "00000000a80425fb"}}, "capabilities"),
        ({"no_new_privs": "0"}, "no_new_privs"),
        ({"setuid_files": ["/usr/bin/su"]}, "setuid or setgid files"),
        (
            {"attempts": {**PRIVILEGE_REPORT["attempts"], "chroot(2)": "succeeded"}},
            "these succeeded: ['chroot(2)']",
        ),
        ({"attempts": {"setuid(0)": "EPERM"}}, "only 1 attempts made"),
        ({"devices": [["/dev/vda", "block", 254, 0]]}, "unsafe devices"),
        ({"devices": [["/dev/mem", "char", 1, 1]]}, "unsafe devices"),
    ],
)
def test_privilege(
    session: Session, engine: FakeEngine, change: dict[str, Any], failure: str | None
) -> None:
    outcome = outcome_of(session, engine, report_script({**PRIVILEGE_REPORT, **change}))
    configured = dataclasses.replace(outcome.receipt.configured, user=box_user(BOX_TEST_UID))
    outcome = dataclasses.replace(
        outcome, receipt=dataclasses.replace(outcome.receipt, configured=configured)
    )
    failures = judged(judge_privilege, outcome).failures
    if failure is None:
        assert failures == []
    else:
        assert any(failure in item for item in failures), failures


SECCOMP_REPORT: dict[str, Any] = {
    "arch": "x86_64",
    "seccomp": "2",
    "attempts": {"io_uring_setup": "EPERM", **{f"call {n}": "EPERM" for n in range(29)}},
}


@pytest.mark.parametrize(
    ("change", "failure"),
    [
        ({}, None),
        ({"attempts": {**SECCOMP_REPORT["attempts"], "call 3": "ENOSYS"}}, None),
        (
            {"attempts": {**SECCOMP_REPORT["attempts"], "io_uring_setup": "succeeded"}},
            "not stopped by the filter: {'io_uring_setup': 'succeeded'}",
        ),
        (
            {"attempts": {**SECCOMP_REPORT["attempts"], "call 1": "EBADF"}},
            "not stopped by the filter: {'call 1': 'EBADF'}",
        ),
        ({"attempts": {"io_uring_setup": "EPERM"}}, "only 1 calls made"),
        (
            {"attempts": {f"call {n}": "EPERM" for n in range(30)}},
            "io_uring_setup was not tried",
        ),
        ({"seccomp": "0"}, "seccomp mode 0"),
        ({"arch": "riscv64", "attempts": {}}, "this box runs riscv64"),
    ],
)
def test_seccomp(
    session: Session, engine: FakeEngine, change: dict[str, Any], failure: str | None
) -> None:
    outcome = outcome_of(session, engine, report_script({**SECCOMP_REPORT, **change}))
    verdict = judged(judge_seccomp, outcome, session.confinement().seccomp_sha256)
    if failure is None:
        assert verdict.failures == []
        assert any("pybox's seccomp profile" in f.text for f in verdict.facts)
    else:
        assert any(failure in item for item in verdict.failures), verdict.failures


def test_seccomp_needs_the_engine_to_have_held_pybox_s_profile(
    session: Session, engine: FakeEngine
) -> None:
    outcome = outcome_of(session, engine, report_script(SECCOMP_REPORT))
    failures = judged(judge_seccomp, outcome, "sha256:" + "0" * 64).failures
    assert any("is not pybox's" in item for item in failures), failures


def _secrets(report: dict[str, Any], stderr: bytes = b"") -> list[str]:
    verdict = Verdict()
    judge_secrets(
        verdict,
        stdout=json.dumps(report).encode() + b"\n",
        stderr=stderr,
        truncated=False,
        canary=("PYBOX_VERIFY_CANARY_AB", "c4n4ry"),
        host_hostname="vm",
        expected_env=frozenset({"PATH", "HOME"}),
    )
    return verdict.failures


SECRETS_REPORT: dict[str, Any] = {
    "environ": {"PATH": "/usr/bin", "HOME": "/pybox/work", "HOSTNAME": "pybox"},
    "hostnames": {"gethostname": "pybox", "uname": "pybox"},
    "etc_hosts": "",
}


def test_secrets() -> None:
    assert _secrets(SECRETS_REPORT) == []
    leaked = {**SECRETS_REPORT, "environ": {"PATH": "/usr/bin", "AWS_SECRET": "x"}}
    assert "variables pybox does not set: ['AWS_SECRET']" in _secrets(leaked)
    assert "the host's canary variable reached the box" in _secrets(
        SECRETS_REPORT, stderr=b"c4n4ry"
    )
    renamed = {**SECRETS_REPORT, "hostnames": {"gethostname": "vm"}}
    failures = _secrets(renamed)
    assert any("the host's name 'vm' is visible" in item for item in failures)
    wrong_hostname = {**SECRETS_REPORT, "environ": {**SECRETS_REPORT["environ"], "HOSTNAME": "vm"}}
    assert "variables pybox does not set: ['HOSTNAME']" in _secrets(wrong_hostname)


def _tool_result(text: str, *, is_error: bool) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": is_error}


def test_mcp_env_judges_the_refusal_of_a_server_variable() -> None:
    from pybox._core.host_env import HostEnvPolicy
    from pybox._features.verify.mcp_env_case import _refused

    refusal = HostEnvPolicy.operator_listed(()).refusal("VERIFY_SERVER_CANARY_AB")
    verdict = Verdict()
    assert _refused(_tool_result(refusal, is_error=True), verdict, "VERIFY_SERVER_CANARY_AB", "v4l")
    assert verdict.failures == [] and "naming forward_env" in verdict.facts[-1].text
    made = _tool_result("Created experiment exp-0123456789ab", is_error=False)
    verdict = Verdict()
    assert not _refused(made, verdict, "VERIFY_SERVER_CANARY_AB", "v4l")
    assert "was not refused" in verdict.failures[0]
    leaked = _tool_result(refusal + " v4l", is_error=True)
    verdict = Verdict()
    _refused(leaked, verdict, "VERIFY_SERVER_CANARY_AB", "v4l")
    assert verdict.failures == ["the refusal carried the canary's value"]


def test_mcp_env_agent_skips_notifications_and_waits_for_its_reply() -> None:
    import subprocess
    import sys

    from pybox._features.verify.mcp_env_case import _Agent

    server = (
        "import json, sys\n"
        "for line in sys.stdin:\n"
        "    asked = json.loads(line)\n"
        "    out = [{'jsonrpc': '2.0', 'method': 'notifications/message', 'params': {}},\n"
        "           {'jsonrpc': '2.0', 'id': asked['id'], 'result': {'isError': False}}]\n"
        "    sys.stdout.write(''.join(json.dumps(o) + '\\n' for o in out)); sys.stdout.flush()\n"
    )
    with subprocess.Popen(
        [sys.executable, "-c", server], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    ) as process:
        agent = _Agent(process)
        assert agent.call("get_experiment", {}) == {"isError": False}
        assert agent.request("tools/list", {})["id"] == 2
        process.communicate(timeout=10)
    with subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.readline()"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    ) as silent:
        with pytest.raises(OSError, match="closed its stdout"):
            _Agent(silent).call("get_experiment", {})
        silent.communicate(timeout=10)


# -- the suite and its record ---------------------------------------------------------


def _leaves_a_box(suite: Suite, verdict: Verdict) -> None:
    engine = suite.engine
    assert isinstance(engine, FakeEngine)
    labels = {LABEL_MANAGED: "1", LABEL_OWNER: suite.session.owner, LABEL_RUN_ID: "f" * 16}
    engine.create_container("pybox-ffffffffffffffff", {"Labels": labels})
    verdict.saw("pybox", "made a box and left it")


def _fails(suite: Suite, verdict: Verdict) -> None:
    suite.session.run(RunRequest(code=b"print(1)", limits=LimitRequest(memory_bytes=1 << 40)))


def test_the_suite_names_and_removes_what_it_left_behind(
    session: Session, engine: FakeEngine
) -> None:
    cases = (
        Case("leaves_a_box", "leave a box", "none left", _leaves_a_box),
        Case("asks_too_much", "ask over the ceiling", "refused", _fails),
    )
    seen: list[str] = []
    result = run_suite(
        session, cases=cases, cgroup_exists=lambda c: False, on_result=lambda r: seen.append(r.name)
    )
    assert seen == ["leaves_a_box", "asks_too_much"]
    assert result.left_behind == ("pybox-ffffffffffffffff",)
    assert engine.containers == {}
    assert not result.passed
    assert result.cases[0].passed
    assert not result.cases[1].passed
    assert result.cases[1].failures[0].startswith("LimitExceeded: Requested")


def test_the_json_record_matches_its_schema(session: Session, engine: FakeEngine) -> None:
    schema = json.loads((DOCS / "verify-json.schema.json").read_text())
    engine.script = report_script(NETWORK_REPORT)
    cases = (
        Case("leaves_a_box", "leave a box", "none left", _leaves_a_box),
        Case("asks_too_much", "ask over the ceiling", "refused", _fails),
    )
    result = run_suite(session, cases=cases, cgroup_exists=lambda c: False)
    facts = {"endpoint": "unix:///x", "api_version": "1.41", "server_version": "1"}
    record = verify_json(result, facts)
    jsonschema.Draft202012Validator(schema).validate(record)
    assert record["pybox_verify_version"] == 1
    assert record["passed"] is False
    assert [case["passed"] for case in record["cases"]] == [True, False]
    assert record["cases"][0]["evidence"] == [{"source": "pybox", "fact": "made a box and left it"}]


def test_case_lines() -> None:
    passed = CaseResult(
        "a",
        "try a",
        "held",
        True,
        (Fact("kernel", "counted"), Fact("program", "said so")),
        (),
        (),
        0.1,
    )
    failed = CaseResult("b", "try b", "held", False, (), ("it got out",), (), 0.1)
    assert case_line(passed) == "PASS a: try a. Evidence: kernel: counted; program: said so."
    assert case_line(failed) == "FAIL b: try b. FAILED: it got out. Evidence: none."


def test_no_engine_is_one_clear_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from pybox._frontends.cli import main

    monkeypatch.setenv("PYBOX_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("PYBOX_CONFIG", raising=False)
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    assert main(["verify", "--json"]) == 125
    captured = capsys.readouterr()
    record = json.loads(captured.out)
    schema = json.loads((DOCS / "verify-json.schema.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(record)
    assert record["error"]["kind"] == "engine_unavailable"
    assert "Cannot reach the container engine" in captured.err
    assert "Traceback" not in captured.err
    assert main(["verify"]) == 125
    assert capsys.readouterr().out == ""


def test_a_weakening_the_engine_itself_refuses_is_no_box(
    engine: FakeEngine, state: StateStore, tmp_path: Path
) -> None:
    from pybox._core.errors import EngineAPIError

    original = engine.create_container

    def refuse_privileged(name: str, body: dict[str, Any]) -> str:
        if body.get("HostConfig", {}).get("Privileged") and not name.endswith("-donor"):
            raise EngineAPIError("refused", status=400, engine_message="no privileged here")
        return original(name, body)

    engine.create_container = refuse_privileged  # type: ignore[method-assign]
    suite = Suite(make_session(engine, state), None, lambda container_id: False, tmp_path)
    verdict = Verdict()
    run_posture(suite, verdict)
    assert verdict.failures == []
    assert "HostConfig.Privileged (no privileged here)" in verdict.facts[-1].text
    assert engine.containers == {}


def test_egress_packages_judges_the_proxys_log_and_the_programs_report(
    session: Session, engine: FakeEngine
) -> None:
    from pybox._core.egress import EgressObserved, HostReached
    from pybox._features.verify.egress_case import judge_egress_packages

    def packages(outcome: RunOutcome, seen: EgressObserved) -> RunOutcome:
        receipt = outcome.receipt
        receipt = dataclasses.replace(
            receipt,
            configured=dataclasses.replace(receipt.configured, network="packages"),
            observed_by_pybox=dataclasses.replace(receipt.observed_by_pybox, egress=seen),
        )
        return dataclasses.replace(outcome, receipt=receipt)

    report = {
        "interfaces": ["eth0", "lo"],
        "through_proxy": {"name off the list": "HTTP/1.1 403 Forbidden"},
        "direct": {"172.17.0.1": "ETIMEDOUT"},
        "dns": "no answer in 3 s",
    }
    first = ("pybox-verify.invalid",)
    contained = packages(
        outcome_of(session, engine, report_script(report)),
        EgressObserved("packages", (), 4, first),
    )
    verdict = judged(judge_egress_packages, contained, "172.17.0.1", 0)
    assert verdict.failures == []
    report["direct"] = {"172.17.0.1": "connected"}
    report["connected_ends"] = {"172.17.0.1": [["192.168.64.2", 40001], ["172.17.0.1", 40000]]}
    report["neighbours"] = ["172.17.0.1 0x1 0x2 02:42:ac:11:00:01 * eth0"]
    relayed = EgressObserved("packages", (HostReached("x.example", 443, 1, 1, 1),), 4, first)
    escaped = packages(outcome_of(session, engine, report_script(report)), relayed)
    verdict = judged(judge_egress_packages, escaped, "172.17.0.1", 1)
    assert len(verdict.failures) == 3
    # Who answered is in the failure, to be read after the fact.
    (direct,) = [item for item in verdict.failures if "a direct connection" in item]
    assert "192.168.64.2" in direct and "02:42:ac:11:00:01" in direct


def test_egress_packages_judges_a_flood_by_its_counts_names_and_unknowns(
    session: Session, engine: FakeEngine
) -> None:
    from pybox._core.egress import REFUSED_NAMES_DROPPED, EgressObserved
    from pybox._core.receipt import Unknown
    from pybox._features.verify.egress_case import judge_flood

    receipt = outcome_of(session, engine, Script(stdout=b"{}\n")).receipt
    flood = {"sent": 40_000, "answered": 40_000, "seconds": 19.0}

    def with_egress(seen: EgressObserved, *unknown: Unknown) -> Any:
        observed = dataclasses.replace(receipt.observed_by_pybox, egress=seen)
        return dataclasses.replace(receipt, observed_by_pybox=observed, unknown=unknown)

    dropped = Unknown(REFUSED_NAMES_DROPPED, "39746 of the 40004 refused requests ...")
    whole = with_egress(EgressObserved("packages", (), 40_004, ("pybox-verify.invalid",)), dropped)
    verdict = Verdict()
    judge_flood(whole, flood, verdict)
    assert verdict.failures == []
    # What 1a128cd's receipt said after the flood: the first lines of the log gone.
    hidden = with_egress(EgressObserved("packages", (), 6417, ("f33570.invalid",)))
    verdict = Verdict()
    judge_flood(hidden, flood, verdict)
    assert len(verdict.failures) == 3
    assert any("6417 refusals; the box had 40004 answered" in f for f in verdict.failures)


def test_egress_packages_reads_the_running_proxys_posture() -> None:
    from pybox._core.egress import PROXY_ULIMITS
    from pybox._engine.docker_seal import ulimit_list
    from pybox._features.verify.egress_case import judge_proxy_posture

    inspected = {
        "HostConfig": {
            "Ulimits": ulimit_list(PROXY_ULIMITS),
            "IpcMode": "none",
            "ReadonlyRootfs": True,
        },
        "Mounts": [],
    }
    verdict = Verdict()
    judge_proxy_posture(inspected, verdict)
    assert verdict.failures == []
    assert "nofile 256" in verdict.facts[-1].text
    weak = {"HostConfig": {"IpcMode": "private", "ReadonlyRootfs": True}, "Mounts": []}
    verdict = Verdict()
    judge_proxy_posture(weak, verdict)
    assert len(verdict.failures) == 2  # no ulimits, and a /dev/shm
    verdict = Verdict()
    judge_proxy_posture(None, verdict)
    assert verdict.failures == ["the egress proxy was never seen running"]


def test_egress_packages_refused_by_the_engine_is_contained_when_nothing_is_listed(
    engine: FakeEngine, state: StateStore, tmp_path: Path
) -> None:
    from pybox._core.errors import EngineCannotApply
    from pybox._features.verify.egress_case import _judge_refused_by_engine

    class Networks(FakeEngine):
        listed: list[dict[str, Any]] = []

        def create_network(self, name: str, body: dict[str, Any]) -> str:
            raise AssertionError("never asked")

        def inspect_network(self, network: str) -> dict[str, Any] | None:
            return None

        def remove_network(self, network: str) -> bool:
            return False

        def list_networks(self, labels: Mapping[str, str | None]) -> list[dict[str, Any]]:
            return list(self.listed)

        def connect_network(self, network: str, container_id: str) -> None:
            raise AssertionError("never asked")

        def container_stdout(self, container_id: str, since_epoch: int = 0) -> bytes:
            return b""

    refusal = EngineCannotApply("cannot apply Options[inhibit_ipv4]", status=400, engine_message="")
    networks = Networks()
    suite = Suite(make_session(networks, state), None, lambda container_id: False, tmp_path)
    verdict = Verdict()
    _judge_refused_by_engine(suite, "run-1", refusal, verdict)
    assert verdict.failures == []
    assert [fact.source for fact in verdict.facts] == ["pybox", "engine"]
    assert "inhibit_ipv4" in verdict.facts[0].text
    Networks.listed = [{"Id": "left"}]
    verdict = Verdict()
    _judge_refused_by_engine(suite, "run-1", refusal, verdict)
    assert any("made despite the refusal" in item for item in verdict.failures)
