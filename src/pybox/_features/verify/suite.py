"""`pybox verify`: hostile programs against the real engine, each judged on evidence.

Every case runs a hostile program, kept as data in `pybox/_features/verify/cases/`,
through `Session.run` (the path of `pybox exec`) or through a `pybox exec`
process of its own, and judges it by a precise criterion. What the program
printed comes from inside the box and is untrusted: where the engine, the
kernel, the host or pybox itself can see a fact, the judge uses that. After
every case its box must be confirmed gone: the engine answers "no such
container" and the box's cgroup no longer exists on this machine.

This module holds the table of cases and runs them (`run_suite`). What a
case runs with is in `harness`, how each case runs in `case_runs`; the judges
are in `limit_judges` and `escape_judges`, what they record in `verdict`; the
posture case's weakened boxes and the narrow hook that asks for them are in
`posture_case`.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from pybox._adapters.cgroups import locate
from pybox._boxes.cleanup import remove_and_confirm
from pybox._boxes.record import RunOutcome
from pybox._core.errors import PyboxError
from pybox._core.limits import MIB, LimitRequest
from pybox._core.posture import LABEL_MANAGED, LABEL_OWNER, LABEL_RUN_ID
from pybox._features.verify.case_runs import (
    run_host_files,
    run_leftovers,
    run_network,
    run_output_flood,
    run_posture,
    run_privilege,
    run_seccomp,
    run_secrets,
)
from pybox._features.verify.egress_case import run_egress_packages
from pybox._features.verify.harness import Case, Suite
from pybox._features.verify.ipc_case import run_sandbox_ipc
from pybox._features.verify.limit_judges import (
    judge_cpu_spin,
    judge_disk_fill,
    judge_fork_bomb,
    judge_memory_bomb,
    judge_timeout_evasion,
)
from pybox._features.verify.link_case import run_bootstrap_link
from pybox._features.verify.mcp_env_case import run_mcp_env
from pybox._features.verify.posture_case import WEAKENINGS
from pybox._features.verify.sandbox_case import run_sandbox
from pybox._features.verify.verdict import CaseResult, SuiteResult, Verdict
from pybox._orchestration.session import Session

# The limits each case asks for: small, so the suite is quick and the caps are reached.
MEMORY_BOMB_MEMORY_BYTES = 64 * MIB
FORK_BOMB_PIDS = 32
CPU_SPIN_CPUS = 0.5
SHORT_TIMEOUT_S = 2.0
DISK_FILL_WRITABLE_BYTES = 8 * MIB


def _simple(
    name: str, limits: LimitRequest, judge: Callable[[RunOutcome, Verdict], None]
) -> Callable[[Suite, Verdict], None]:
    def run(suite: Suite, verdict: Verdict) -> None:
        outcome = suite.run_program(name, verdict, limits)
        judge(outcome, verdict)
        suite.gone(verdict, outcome.receipt)

    return run


CASES: tuple[Case, ...] = (
    Case(
        "host_files",
        "read a host canary file by path and via /proc/1/root; walk every file for a socket; "
        "list the mounts",
        "every read fails and the secret never leaves the box; no socket anywhere; every mount "
        "is the image, a fresh kernel filesystem or the engine's own hostname file",
        run_host_files,
    ),
    Case(
        "network",
        "list interfaces, routes and resolvers; resolve a name; TCP and UDP to a listener on "
        "this machine's docker bridge",
        "only lo, no route, no resolver, no answer; the host listener receives nothing",
        run_network,
    ),
    Case(
        "egress_packages",
        "in packages mode: ask pybox's proxy for a name off the list, an IP literal, port 22 "
        "and a plain request, then flood it with refused requests to hide them; connect "
        "around it to a listener on this machine's bridge and the box's own gateway; "
        "resolve a name",
        "every request refused by the proxy and counted, the first name still named and "
        "dropped names said, none relayed; the running proxy has a box's ulimits and no "
        "/dev/shm; no direct connection; no answer; the listener receives nothing; the "
        "network and proxy removed",
        run_egress_packages,
    ),
    Case(
        "memory_bomb",
        "allocate and touch memory without end under a 64 MiB cap",
        "status out_of_memory on kernel or engine OOM evidence; the kernel's peak reached "
        "the cap and not beyond",
        _simple(
            "memory_bomb",
            LimitRequest(memory_bytes=MEMORY_BOMB_MEMORY_BYTES, timeout_s=30),
            judge_memory_bomb,
        ),
    ),
    Case(
        "fork_bomb",
        "every process forks forever under a 32-process cap",
        "kernel pids limit 32, peak 32, forks refused; ended at the deadline",
        _simple(
            "fork_bomb",
            LimitRequest(pids=FORK_BOMB_PIDS, timeout_s=SHORT_TIMEOUT_S),
            judge_fork_bomb,
        ),
    ),
    Case(
        "cpu_spin",
        "spin 5 threads under a 0.5 CPU quota",
        "kernel quota 0.5, throttled, CPU time within the quota; killed at the deadline",
        _simple(
            "cpu_spin",
            LimitRequest(cpus=CPU_SPIN_CPUS, timeout_s=SHORT_TIMEOUT_S),
            judge_cpu_spin,
        ),
    ),
    Case(
        "disk_fill",
        "write in every directory of the root filesystem; fill /tmp, $HOME and /dev/shm "
        "(8 MiB caps)",
        "every root write fails with EROFS; each fill ends in ENOSPC within its cap",
        _simple(
            "disk_fill",
            LimitRequest(writable_bytes=DISK_FILL_WRITABLE_BYTES, timeout_s=30),
            judge_disk_fill,
        ),
    ),
    Case(
        "output_flood",
        "256 MiB on stdout and 128 MiB on stderr",
        "pybox counts every byte, keeps at most the cap, marks truncation; its own memory "
        "grows by at most 64 MiB",
        run_output_flood,
    ),
    Case(
        "timeout_evasion",
        "ignore SIGTERM, fork, double-fork and setsid, sleep",
        "timed_out by pybox's kill at the 2 s deadline; the children ran; box and cgroup gone",
        _simple("timeout_evasion", LimitRequest(timeout_s=SHORT_TIMEOUT_S), judge_timeout_evasion),
    ),
    Case(
        "privilege",
        "setuid(0), mount, unshare, chroot, ptrace PID 1, raw sockets, mknod, writes to "
        "/proc/sys and /sys, setuid files, /dev",
        "a uid of its own (not 0, no host account), no capability, no_new_privs, seccomp; "
        "every attempt fails; no setuid file; "
        "only the safe devices",
        run_privilege,
    ),
    Case(
        "seccomp",
        "io_uring_setup, io_uring_enter, io_uring_register and 27 more calls pybox's seccomp "
        "profile denies (userfaultfd, keyctl, bpf, ptrace, unshare, mount, adjtimex...)",
        "the engine held pybox's profile (read back before start); every call fails with the "
        "filter's EPERM (or ENOSYS), never the kernel's own answer",
        run_seccomp,
    ),
    Case(
        "secrets",
        "dump the environment of every process and every hostname view, from a `pybox exec` "
        "whose environment holds a canary",
        "the canary is in no byte sent; only pybox's variables; hostname pybox",
        run_secrets,
    ),
    Case(
        "mcp_env",
        "as an MCP agent, name a canary of the `pybox mcp` server's own environment in "
        "create_experiment's env; then dump every process's environment in an experiment",
        "refused, naming forward_env and --forward-env; the canary is in no byte the box "
        "sent; the experiment's box gone after destroy",
        run_mcp_env,
    ),
    Case(
        "leftovers",
        "SIGKILL a `pybox exec` controller while its program runs",
        "its box outlives it; the next run sweeps it (no such container, cgroup gone)",
        run_leftovers,
    ),
    Case(
        "sandbox",
        "in a persistent sandbox, leave a double-forked daemon and a canary in every writable "
        "place outside the workspace, and start-up code that forges pybox's file answers (a "
        "user-site usercustomize and .pth, a stdlib-named module); look for both in the next run",
        "the kernel counts 1 process in the box between the runs; the next run sees no other "
        "process and no byte of the canary; the workspace is kept; pybox's file program reads "
        "and lists the truth; the box gone after destroy",
        run_sandbox,
    ),
    Case(
        "sandbox_ipc",
        "in a persistent sandbox, leave SysV shared memory, a semaphore set, a message queue, "
        "a POSIX message queue and a /dev/shm file; look for each in the next run",
        "the next run finds none of them (under gVisor the POSIX queue, which gVisor cannot "
        "list, is said)",
        run_sandbox_ipc,
    ),
    Case(
        "bootstrap_link",
        "in a persistent sandbox, open PID 1's descriptors, environment and memory; forge its "
        "exit report on its stdout and read what pybox sends it next off its stdin",
        "PID 1's memory never opens, nor under runc its descriptors or environment; a forged "
        "report is refused (the run and the box end) and nothing pybox sends later is read",
        run_bootstrap_link,
    ),
    Case(
        "posture",
        f"{len(WEAKENINGS)} create requests, each with one hardening field weakened",
        "every one refused by pybox's read-back before start: the engine has the box only as "
        "created, never started",
        run_posture,
    ),
)


def _cgroup_exists(container_id: str) -> bool:
    return locate(container_id) is not None


def run_suite(
    session: Session,
    *,
    config_path: str | None = None,
    on_result: Callable[[CaseResult], None] | None = None,
    cgroup_exists: Callable[[str], bool] = _cgroup_exists,
    cases: tuple[Case, ...] = CASES,
) -> SuiteResult:
    """Run every case, then make sure none of their boxes is left behind.

    Raises only when the engine or the image is not there at all; a case that
    fails for any pybox reason is a failed case.
    """
    session.image("stdlib")  # no image: nothing can be verified; say so once
    session.engine_facts()
    started = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="pybox-verify-"))
    suite = Suite(session, config_path, cgroup_exists, workdir)
    results: list[CaseResult] = []
    run_ids: set[str] = set()
    finished = False
    try:
        for case in cases:
            verdict = Verdict()
            case_started = time.monotonic()
            try:
                case.run(suite, verdict)
            except (PyboxError, OSError, subprocess.SubprocessError) as exc:
                verdict.check(False, f"{type(exc).__name__}: {exc}")
            finally:
                run_ids.update(verdict.run_ids)
            result = CaseResult(
                name=case.name,
                attempted=case.attempted,
                criterion=case.criterion,
                passed=not verdict.failures,
                facts=tuple(verdict.facts),
                failures=tuple(verdict.failures),
                run_ids=tuple(verdict.run_ids),
                duration_s=round(time.monotonic() - case_started, 2),
            )
            results.append(result)
            if on_result is not None:
                on_result(result)
        finished = True
    finally:
        # Also on Ctrl-C: no box of the suite outlives it.
        shutil.rmtree(workdir, ignore_errors=True)
        try:
            left = _left_behind(session, run_ids, suite.controller_pids)
        except PyboxError:
            if finished:
                raise
    return SuiteResult(tuple(results), left, round(time.monotonic() - started, 2))


def _left_behind(session: Session, run_ids: set[str], pids: list[int]) -> tuple[str, ...]:
    """Boxes of this suite still in the engine: named, then removed so none stays."""
    host = socket.gethostname()
    controllers = [[host, str(pid)] for pid in pids]
    left: list[str] = []
    for box in session.engine.list_containers({LABEL_MANAGED: "1"}):
        labels = box.get("Labels") or {}
        owner = str(labels.get(LABEL_OWNER, ""))
        if (
            labels.get(LABEL_RUN_ID) in run_ids
            or owner == session.owner
            or owner.rsplit(":", 2)[:2] in controllers
        ):
            name = str((box.get("Names") or [box.get("Id")])[0]).lstrip("/")
            left.append(name)
            remove_and_confirm(session.engine, str(box["Id"]))
    return tuple(left)
