"""`pybox verify`: hostile programs against the real engine, each judged on evidence.

Every case runs a hostile program, kept as data in `pybox/_features/verify/cases/`,
through `Session.run` (the path of `pybox exec`) or through a `pybox exec`
process of its own, and judges it by a precise criterion. What the program
printed comes from inside the box and is untrusted: where the engine, the
kernel, the host or pybox itself can see a fact, the judge uses that. After
every case its box must be confirmed gone: the engine answers "no such
container" and the box's cgroup no longer exists on this machine.

The judges are in `verify_judges`; the posture case's weakened boxes and
the narrow hook that asks for them are in `verify_posture`.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pybox._adapters.cgroups import locate
from pybox._adapters.host_facts import (
    bridge_gateway,
    mount_devices,
    peak_rss_bytes,
    reset_peak_rss,
    rss_bytes,
)
from pybox._boxes.cleanup import remove_and_confirm
from pybox._boxes.record import RunOutcome
from pybox._core.errors import EngineAPIError, PyboxError
from pybox._core.limits import MIB, LimitRequest
from pybox._core.posture import (
    LABEL_MANAGED,
    LABEL_OWNER,
    LABEL_RUN_ID,
    box_environment,
)
from pybox._core.receipt import Receipt, Status
from pybox._core.request import InputFile, RunRequest
from pybox._engine import Engine, JSONObject
from pybox._features.verify.judges import (
    CaseResult,
    ListenerReport,
    SuiteResult,
    Verdict,
    case_source,
    judge_cpu_spin,
    judge_disk_fill,
    judge_fork_bomb,
    judge_gone,
    judge_host_files,
    judge_memory_bomb,
    judge_network,
    judge_output_flood,
    judge_privilege,
    judge_seccomp,
    judge_secrets,
    judge_timeout_evasion,
)
from pybox._features.verify.posture_case import (
    WEAKENINGS,
    WeakenedCreateEngine,
    judge_weakened,
)
from pybox._orchestration.session import Session

# The limits each case asks for: small, so the suite is quick and the caps are reached.
MEMORY_BOMB_MEMORY_BYTES = 64 * MIB
FORK_BOMB_PIDS = 32
CPU_SPIN_CPUS = 0.5
SHORT_TIMEOUT_S = 2.0
DISK_FILL_WRITABLE_BYTES = 8 * MIB
CONTROLLER_WAIT_S = 30.0


# -- the suite ---------------------------------------------------------------------------


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


def _verify_json(values: Mapping[str, Any]) -> tuple[InputFile, ...]:
    return (InputFile("verify.json", json.dumps(values).encode()),)


def run_host_files(suite: Suite, verdict: Verdict) -> None:
    secret = secrets.token_hex(16)
    canary = suite.workdir / "host-canary.txt"
    canary.write_text(f"pybox verify host canary {secret}\n")
    state_file = suite.session.state.images_file
    inputs = _verify_json({"host_files": [str(canary), str(state_file)]})
    outcome = suite.run_program("host_files", verdict, LimitRequest(timeout_s=30), inputs)
    judge_host_files(outcome, verdict, canary_secret=secret, host_devices=mount_devices())
    suite.gone(verdict, outcome.receipt)


def _drain_listener(tcp: socket.socket, udp: socket.socket) -> tuple[int, int]:
    """Connections and datagrams that reached the listener (it never blocks)."""
    tcp.setblocking(False)
    udp.setblocking(False)
    connections = datagrams = 0
    while True:
        try:
            tcp.accept()[0].close()
            connections += 1
        except BlockingIOError:
            break
    while True:
        try:
            udp.recvfrom(65536)
            datagrams += 1
        except BlockingIOError:
            break
    return connections, datagrams


def run_network(suite: Suite, verdict: Verdict) -> None:
    gateway = bridge_gateway()
    limits = LimitRequest(timeout_s=30)
    if gateway is None:
        outcome = suite.run_program("network", verdict, limits, _verify_json({}))
        judge_network(outcome, verdict, ListenerReport(None, 0, 0, 0, 0))
        suite.gone(verdict, outcome.receipt)
        return
    # Listeners of this suite's own, on this machine's bridge: the only address tried.
    with (
        socket.socket(socket.AF_INET, socket.SOCK_STREAM) as tcp,
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp,
    ):
        tcp.bind((gateway, 0))
        tcp.listen(8)
        udp.bind((gateway, 0))
        ports = {"tcp_port": tcp.getsockname()[1], "udp_port": udp.getsockname()[1]}
        target = {"listener": {"host": gateway, **ports}}
        outcome = suite.run_program("network", verdict, limits, _verify_json(target))
        connections, datagrams = _drain_listener(tcp, udp)
    judge_network(
        outcome,
        verdict,
        ListenerReport(gateway, **ports, tcp_connections=connections, udp_datagrams=datagrams),
    )
    suite.gone(verdict, outcome.receipt)


def _simple(
    name: str, limits: LimitRequest, judge: Callable[[RunOutcome, Verdict], None]
) -> Callable[[Suite, Verdict], None]:
    def run(suite: Suite, verdict: Verdict) -> None:
        outcome = suite.run_program(name, verdict, limits)
        judge(outcome, verdict)
        suite.gone(verdict, outcome.receipt)

    return run


def run_output_flood(suite: Suite, verdict: Verdict) -> None:
    before = rss_bytes()
    exact = reset_peak_rss()
    baseline = before if exact else peak_rss_bytes()
    outcome = suite.run_program("output_flood", verdict, LimitRequest(timeout_s=120))
    peak = peak_rss_bytes()
    growth = None if peak is None or baseline is None else max(peak - baseline, 0)
    how = "kernel peak RSS, reset before the run" if exact else "lifetime peak RSS"
    judge_output_flood(outcome, verdict, growth, how)
    suite.gone(verdict, outcome.receipt)


def run_secrets(suite: Suite, verdict: Verdict) -> None:
    name = f"PYBOX_VERIFY_CANARY_{secrets.token_hex(4).upper()}"
    value = secrets.token_hex(16)
    with suite.controller({name: value}, "-", "--json", "--timeout", "30") as controller:
        out, err = controller.communicate(case_source("secrets"), timeout=120)
    try:
        record = json.loads(out)
        receipt = record["receipt"]
        stdout, stderr = record["stdout"].encode(), record["stderr"].encode()
    except (ValueError, KeyError, TypeError, AttributeError):
        verdict.check(False, f"`pybox exec --json` gave no record: {err.decode()[-300:]!r}")
        return
    verdict.run_ids.append(str(receipt["run_id"]))
    verdict.saw("pybox", f"ran by `pybox exec --json` in a process whose environment has {name}")
    image = suite.session.image("stdlib")
    judge_secrets(
        verdict,
        stdout=stdout,
        stderr=stderr,
        truncated=bool(record["stdout_truncated"] or record["stderr_truncated"]),
        canary=(name, value),
        host_hostname=socket.gethostname(),
        expected_env=frozenset(box_environment(image.env)),
    )
    engine = receipt["observed_by_engine"]
    judge_gone(
        verdict,
        suite.engine,
        engine["container_id"],
        bool(engine["removal_confirmed"]),
        suite.cgroup_exists,
    )


def run_seccomp(suite: Suite, verdict: Verdict) -> None:
    outcome = suite.run_program("seccomp", verdict, LimitRequest(timeout_s=30))
    judge_seccomp(outcome, verdict, suite.session.confinement().seccomp_sha256)
    suite.gone(verdict, outcome.receipt)


def _box_of(engine: Engine, pid: int) -> JSONObject | None:
    host = socket.gethostname()
    for box in engine.list_containers({LABEL_MANAGED: "1"}):
        owner = str((box.get("Labels") or {}).get(LABEL_OWNER, "")).rsplit(":", 2)
        if owner[:2] == [host, str(pid)] and box.get("State") == "running":
            return box
    return None


def run_leftovers(suite: Suite, verdict: Verdict) -> None:
    box: JSONObject | None = None
    with suite.controller({}, "-", "--timeout", "60") as controller:
        assert controller.stdin is not None
        controller.stdin.write(case_source("leftovers"))
        controller.stdin.close()
        controller.stdin = None  # closed; communicate() must not flush it
        deadline = time.monotonic() + CONTROLLER_WAIT_S
        while box is None and time.monotonic() < deadline and controller.poll() is None:
            box = _box_of(suite.engine, controller.pid)
            time.sleep(0.05)
        if not verdict.check(box is not None, "the controller never started its box"):
            return
        assert box is not None
        time.sleep(0.2)  # mid-run: the program is working
        controller.send_signal(signal.SIGKILL)
        controller.wait(timeout=30)
    box_id = str(box["Id"])
    run_id = str((box.get("Labels") or {}).get(LABEL_RUN_ID, ""))
    verdict.run_ids.append(run_id)
    left = suite.engine.inspect_container(box_id)
    state = ((left or {}).get("State") or {}).get("Status")
    verdict.check(left is not None, "the killed controller's box was already gone")
    recorded = run_id in suite.session.state.attempts()
    verdict.saw(
        "engine",
        f"controller SIGKILLed mid-run; its box {box_id[:12]} was left {state}"
        + ("; its attempt record stayed" if recorded else ""),
    )
    fresh = Session(suite.engine, suite.session.state, suite.session.policy)
    next_run = RunRequest(code=b"print('the next run')\n", code_name="next_run.py")
    outcome = fresh.run(fresh.prepare(next_run))
    verdict.run_ids.append(outcome.receipt.run_id)
    swept = outcome.receipt.observed_by_pybox.leftovers_swept
    verdict.check(outcome.receipt.status is Status.SUCCEEDED, "the next run did not succeed")
    verdict.check(swept >= 1, f"the next run swept {swept} boxes")
    verdict.check(run_id not in suite.session.state.attempts(), "the attempt record stayed")
    # Gone means: the engine has no such container and its cgroup is gone.
    judge_gone(verdict, suite.engine, box_id, True, suite.cgroup_exists)
    verdict.saw("pybox", f"the next run swept {swept} leftover box(es) before it started")
    suite.gone(verdict, outcome.receipt, say=False)


def run_posture(suite: Suite, verdict: Verdict) -> None:
    host_dir = suite.workdir / "never-mounted"
    host_dir.mkdir()
    hook = WeakenedCreateEngine(suite.engine, str(host_dir))
    weak = Session(hook, suite.session.state, suite.session.policy, owner=suite.session.owner)
    refused: list[str] = []
    engine_refused: list[str] = []
    code = case_source("posture")
    for weakening in WEAKENINGS:
        hook.reset(weakening)
        try:
            outcome = weak.run(weak.prepare(RunRequest(code=code, code_name="posture.py")))
        except EngineAPIError as exc:
            # Another engine may refuse a weakened create itself: no box, nothing started.
            if verdict.check(not hook.created, f"{weakening.field}: {exc}"):
                engine_refused.append(f"{weakening.field} ({exc.engine_message})")
            continue
        finally:
            verdict.check(hook.discard_donor(), f"{weakening.field}: the donor box stayed")
        verdict.run_ids.append(outcome.receipt.run_id)
        if judge_weakened(outcome, verdict, weakening, hook):
            refused.append(weakening.field.split(".")[-1])
        suite.gone(verdict, outcome.receipt, say=False)
    verdict.saw(
        "engine",
        f"{len(refused)} of {len(WEAKENINGS)} weakened boxes refused before start: the engine "
        f"had each only as created, then no such container: {', '.join(refused)}",
    )
    if engine_refused:
        verdict.saw(
            "engine", "refused at create by the engine itself: " + "; ".join(engine_refused)
        )


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
        _simple("privilege", LimitRequest(timeout_s=30), judge_privilege),
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
        "leftovers",
        "SIGKILL a `pybox exec` controller while its program runs",
        "its box outlives it; the next run sweeps it (no such container, cgroup gone)",
        run_leftovers,
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
