"""`pybox verify`: hostile programs against the real engine, each judged on evidence.

Every case runs a hostile program, kept as data in `pybox/_verify_cases/`,
through `Session.run` (the path of `pybox exec`) or through a `pybox exec`
process of its own, and judges it by a precise criterion. What the program
printed comes from inside the box and is untrusted: where the engine, the
kernel, the host or pybox itself can see a fact, the judge uses that. After
every case its box must be confirmed gone: the engine answers "no such
container" and the box's cgroup no longer exists on this machine.

The posture case needs boxes that pybox itself would never create. It gets
them through `WeakenedCreateEngine`, a wrapper around the engine that changes
one hardening field of the create body. It lives here, is used only here, and
no front end can reach it.
"""

from __future__ import annotations

import copy
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
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path
from typing import Any

from pybox._adapters.cgroups import locate
from pybox._adapters.engine import AttachStream, Engine, EngineEndpoint, JSONObject
from pybox._adapters.host import (
    bridge_gateway,
    mount_devices,
    peak_rss_bytes,
    reset_peak_rss,
    rss_bytes,
)
from pybox._core.errors import PyboxError
from pybox._core.limits import MIB, LimitRequest
from pybox._core.posture import (
    BOX_GID,
    BOX_HOSTNAME,
    BOX_UID,
    LABEL_MANAGED,
    LABEL_OWNER,
    LABEL_RUN_ID,
    box_environment,
)
from pybox._core.receipt import Receipt, Status
from pybox._core.request import InputFile, RunRequest
from pybox._orchestration.cleanup import remove_and_confirm
from pybox._orchestration.lifecycle import RunOutcome
from pybox._orchestration.session import Session

# The limits each case asks for: small, so the suite is quick and the caps are reached.
MEMORY_BOMB_MEMORY_BYTES = 64 * MIB
FORK_BOMB_PIDS = 32
CPU_SPIN_CPUS = 0.5
SHORT_TIMEOUT_S = 2.0
DISK_FILL_WRITABLE_BYTES = 8 * MIB
FLOOD_STDOUT_BYTES = 256 * MIB
FLOOD_STDERR_BYTES = 128 * MIB
# pybox keeps head and tail of each stream; its own memory may grow by this much at most.
FLOOD_RSS_GROWTH_LIMIT_BYTES = 64 * MIB
# A deadline kill lands within this much of the deadline.
DEADLINE_SLACK_S = 1.5
CONTROLLER_WAIT_S = 30.0

TRUNCATION_MARK = b"[pybox: output truncated"
ZERO_CAPS = "0000000000000000"
# null, zero, full, random, urandom, tty, ptmx: the engine's default device set.
SAFE_DEVICES = frozenset({(1, 3), (1, 5), (1, 7), (1, 8), (1, 9), (5, 0), (5, 2)})
# Kernel filesystems the box gets fresh instances of; a host instance has a host device number.
FRESH_FILESYSTEMS = frozenset({"proc", "sysfs", "tmpfs", "devpts", "mqueue"})
# cgroup v1 hierarchies share one superblock with the host's; the box sees its own part, read-only.
CGROUP_FILESYSTEMS = frozenset({"cgroup", "cgroup2"})


# -- result values -------------------------------------------------------------------


@dataclass(frozen=True)
class Fact:
    """One piece of evidence and who established it: program (untrusted), engine,
    kernel, host or pybox."""

    source: str
    text: str


@dataclass(frozen=True)
class CaseResult:
    name: str
    attempted: str
    criterion: str
    passed: bool
    facts: tuple[Fact, ...]
    failures: tuple[str, ...]
    run_ids: tuple[str, ...]
    duration_s: float


@dataclass(frozen=True)
class SuiteResult:
    cases: tuple[CaseResult, ...]
    left_behind: tuple[str, ...]
    duration_s: float

    @property
    def passed(self) -> bool:
        return all(case.passed for case in self.cases) and not self.left_behind


class Verdict:
    """Collects the evidence and the unmet parts of one case's criterion."""

    def __init__(self) -> None:
        self.facts: list[Fact] = []
        self.failures: list[str] = []
        self.run_ids: list[str] = []

    def saw(self, source: str, text: str) -> None:
        self.facts.append(Fact(source, text))

    def check(self, ok: bool, failure: str) -> bool:
        if not ok:
            self.failures.append(failure)
        return ok


def case_source(name: str) -> bytes:
    """The hostile program of a case, exactly as shipped."""
    return files("pybox").joinpath("_verify_cases", f"{name}.py").read_bytes()


def program_report(outcome: RunOutcome, verdict: Verdict) -> dict[str, Any]:
    """The JSON object the program printed last (untrusted), or {} with a failure."""
    lines = outcome.stdout.strip().splitlines()
    try:
        value = json.loads(lines[-1]) if lines else None
    except ValueError:
        value = None
    if not isinstance(value, dict):
        tail = outcome.stderr.decode("utf-8", "replace").strip()[-300:]
        verdict.check(False, f"the program's report is missing or unreadable (stderr: {tail!r})")
        return {}
    return value


def _counts(values: Iterable[object]) -> str:
    tally: dict[str, int] = {}
    for value in values:
        tally[str(value)] = tally.get(str(value), 0) + 1
    return ", ".join(f"{name} x{count}" for name, count in sorted(tally.items()))


def judge_posture_read_back(receipt: Receipt, verdict: Verdict) -> None:
    engine = receipt.observed_by_engine
    if verdict.check(engine.posture_verified, "the box's posture was not verified before start"):
        verdict.saw(
            "engine",
            f"posture read back before start: {engine.posture_fields_checked} fields as asked",
        )


def judge_gone(
    verdict: Verdict,
    engine: Engine,
    container_id: str | None,
    removal_confirmed: bool,
    cgroup_exists: Callable[[str], bool],
    *,
    say: bool = True,
) -> None:
    """The box is gone: pybox confirmed it, the engine says so now, its cgroup is gone."""
    verdict.check(removal_confirmed, "pybox did not confirm the box removed")
    if container_id is None:
        return
    still_there = engine.inspect_container(container_id) is not None
    verdict.check(not still_there, f"the engine still has the box {container_id[:12]}")
    cgroup_left = cgroup_exists(container_id)
    verdict.check(not cgroup_left, f"the box's cgroup still exists ({container_id[:12]})")
    if say and not still_there and not cgroup_left and removal_confirmed:
        verdict.saw("engine", "box removed: no such container; its cgroup is gone")


# -- judges (pure: an outcome and host facts in, evidence and failures out) --------


def judge_host_files(
    outcome: RunOutcome,
    verdict: Verdict,
    *,
    canary_secret: str,
    host_devices: frozenset[str],
) -> None:
    report = program_report(outcome, verdict)
    receipt = outcome.receipt
    judge_posture_read_back(receipt, verdict)
    if not report:
        return
    reads: dict[str, str] = report.get("reads") or {}
    opened = sorted(path for path, result in reads.items() if str(result).startswith("read "))
    verdict.check(bool(reads), "the program tried no host file")
    if verdict.check(not opened, f"host files were read: {opened}"):
        verdict.saw(
            "program",
            f"{len(reads)} reads of host-only files all failed ({_counts(reads.values())})",
        )
    streams = receipt.reported_by_program
    sent = outcome.stdout + outcome.stderr
    whole = not (streams.stdout.truncated or streams.stderr.truncated)
    verdict.check(whole, "the output was truncated, so the canary search is incomplete")
    if verdict.check(canary_secret.encode() not in sent, "the host canary's secret left the box"):
        verdict.saw("pybox", f"the host canary's secret is in none of the {len(sent)} bytes sent")
    sockets = list(report.get("sockets") or []) + list(report.get("usual_sockets_present") or [])
    walked = int(report.get("paths_walked") or 0)
    verdict.check(walked > 100, f"the socket search walked only {walked} paths")
    named = [line for line in report.get("unix_sockets") or [] if len(str(line).split()) > 7]
    if verdict.check(not sockets and not named, f"sockets found: {sockets + named}"):
        verdict.saw(
            "program",
            f"no socket among {walked} paths (usual engine and podman sockets included); "
            "no named unix socket in /proc/net/unix",
        )
    container_id = receipt.observed_by_engine.container_id or "?"
    mounts: list[dict[str, str]] = report.get("mounts") or []
    bad = [m for m in mounts if not _contained_mount(m, container_id, host_devices)]
    verdict.check(len(mounts) > 3, "the program listed almost no mounts")
    if verdict.check(not bad, f"mounts from the host: {bad}"):
        verdict.saw(
            "program",
            f"{len(mounts)} mounts, none from the host: a read-only image root, fresh kernel "
            "filesystems and tmpfs (device numbers the host does not use), read-only cgroup "
            "views, and the engine's own read-only /etc/hostname for this box",
        )


def _contained_mount(mount: Mapping[str, str], container_id: str, host: frozenset[str]) -> bool:
    point, fstype, options = mount.get("mount_point"), mount.get("fstype"), mount.get("options", "")
    read_only = "ro" in options.split(",")
    if point == "/":
        return fstype == "overlay" and read_only
    if fstype in FRESH_FILESYSTEMS:
        return mount.get("device") not in host
    if fstype in CGROUP_FILESYSTEMS:
        return read_only
    # The engine bind-mounts its own per-box hostname file; nothing else from a disk.
    root = mount.get("root", "")
    return point == "/etc/hostname" and read_only and root.endswith(f"/{container_id}/hostname")


@dataclass(frozen=True)
class ListenerReport:
    """What the suite's own listeners on the bridge received (None: no bridge here)."""

    host: str | None
    tcp_port: int
    udp_port: int
    tcp_connections: int
    udp_datagrams: int


def judge_network(outcome: RunOutcome, verdict: Verdict, listener: ListenerReport) -> None:
    report = program_report(outcome, verdict)
    judge_posture_read_back(outcome.receipt, verdict)
    if not report:
        return
    interfaces = report.get("interfaces")
    routes = report.get("ipv4_routes")
    v6 = report.get("ipv6_route_devices") or []
    nameservers = report.get("nameservers")
    dns = str(report.get("dns"))
    verdict.check(interfaces == ["lo"], f"network interfaces besides lo: {interfaces}")
    verdict.check(routes == [], f"IPv4 routes: {routes}")
    verdict.check(set(v6) <= {"lo"}, f"IPv6 routes through {v6}")
    verdict.check(nameservers == [], f"name servers configured: {nameservers}")
    verdict.check(dns.startswith("gaierror"), f"a name resolved: {dns}")
    verdict.saw(
        "program",
        f"interfaces {interfaces}; {len(routes or [])} IPv4 routes; IPv6 routes only via lo; "
        f"no name server; lookup failed ({dns})",
    )
    host = listener.host
    if host is None:
        verdict.saw("host", "no docker0 bridge on this machine: no connection was attempted")
        return
    tcp_at, udp_at = f"{host}:{listener.tcp_port}", f"{host}:{listener.udp_port}"
    tcp, udp = report.get("tcp_connect"), report.get("udp_send")
    verdict.check(tcp not in (None, "connected"), f"TCP to {tcp_at}: {tcp}")
    verdict.check(udp not in (None, "sent"), f"UDP to {udp_at}: {udp}")
    verdict.saw("program", f"TCP connect to {tcp_at}: {tcp}; UDP send to {udp_at}: {udp}")
    quiet = listener.tcp_connections == 0 and listener.udp_datagrams == 0
    if verdict.check(
        quiet,
        f"the host listeners on {host} got {listener.tcp_connections} connections and "
        f"{listener.udp_datagrams} datagrams",
    ):
        verdict.saw("host", f"the TCP and UDP listeners on the bridge {host} received nothing")


def judge_memory_bomb(outcome: RunOutcome, verdict: Verdict) -> None:
    receipt = outcome.receipt
    kernel, engine = receipt.observed_by_kernel, receipt.observed_by_engine
    cap = int(receipt.configured.limits["memory_bytes"])
    verdict.check(
        receipt.status is Status.OUT_OF_MEMORY,
        f"status {receipt.status.value}, not out_of_memory ({receipt.cause.summary})",
    )
    evidence = []
    if kernel.oom_kill_count:
        evidence.append(f"kernel OOM-kill counter {kernel.oom_kill_count}")
    if engine.oom_killed:
        evidence.append("engine OOMKilled true")
    if verdict.check(bool(evidence), "no kernel or engine evidence of an OOM kill"):
        verdict.saw("kernel" if kernel.oom_kill_count else "engine", "; ".join(evidence))
    verdict.check(
        kernel.memory_limit_bytes == cap,
        f"the kernel's memory limit is {kernel.memory_limit_bytes}, not {cap}",
    )
    peak = kernel.memory_peak_bytes
    if verdict.check(
        peak is not None and peak <= cap, f"memory peak {peak} is not within the cap {cap}"
    ):
        verdict.saw(
            "kernel",
            f"limit {cap // MIB} MiB; peak {(peak or 0) / MIB:.1f} MiB "
            f"({kernel.memory_peak_source}); the host gave the box no more",
        )
    held = [line for line in outcome.stdout.decode("ascii", "replace").splitlines() if line]
    verdict.saw("program", f"last words: {held[-1] if held else 'none'!r}")


def judge_fork_bomb(outcome: RunOutcome, verdict: Verdict) -> None:
    receipt = outcome.receipt
    kernel = receipt.observed_by_kernel
    cap = int(receipt.configured.limits["pids"])
    verdict.check(kernel.pids_limit == cap, f"the kernel's pids limit is {kernel.pids_limit}")
    verdict.check(
        kernel.pids_peak == cap, f"the processes peak is {kernel.pids_peak}, not the cap {cap}"
    )
    verdict.check(
        bool(kernel.pids_limit_hits), f"the kernel counted {kernel.pids_limit_hits} refused forks"
    )
    verdict.check(
        receipt.status is Status.TIMED_OUT and receipt.observed_by_pybox.deadline_kill,
        f"status {receipt.status.value}: the bomb was not ended at the deadline",
    )
    verdict.saw(
        "kernel",
        f"pids limit {kernel.pids_limit}; peak {kernel.pids_peak} ({kernel.pids_peak_source}); "
        f"{kernel.pids_limit_hits} forks refused at the cap",
    )
    verdict.saw("pybox", f"ended at the {receipt.configured.limits['timeout_s']:g} s deadline")
    verdict.saw("program", outcome.stdout.decode("utf-8", "replace").strip()[:80] or "silent")


def judge_cpu_spin(outcome: RunOutcome, verdict: Verdict) -> None:
    receipt = outcome.receipt
    kernel = receipt.observed_by_kernel
    cpus = float(receipt.configured.limits["cpus"])
    timeout_s = float(receipt.configured.limits["timeout_s"])
    duration = receipt.observed_by_pybox.run_duration_s or 0.0
    verdict.check(
        receipt.status is Status.TIMED_OUT and receipt.observed_by_pybox.deadline_kill,
        f"status {receipt.status.value}, not ended at the deadline",
    )
    verdict.check(
        timeout_s <= duration < timeout_s + DEADLINE_SLACK_S,
        f"ran {duration:.2f} s for a {timeout_s:g} s deadline",
    )
    verdict.check(
        kernel.cpu_quota_cpus == cpus, f"the kernel's CPU quota is {kernel.cpu_quota_cpus}"
    )
    verdict.check(
        bool(kernel.cpu_throttled_periods), f"throttled periods: {kernel.cpu_throttled_periods}"
    )
    usage = kernel.cpu_usage_s
    # The quota, over the run and the interpreter's start before it, plus one period.
    allowed = cpus * (duration + 0.3) + 0.1
    verdict.check(
        usage is not None and usage <= allowed,
        f"used {usage} CPU-seconds; the quota allows {allowed:.2f}",
    )
    verdict.saw(
        "kernel",
        f"quota {kernel.cpu_quota_cpus} CPU; used {usage or 0:.2f} CPU-s in {duration:.2f} s; "
        f"throttled {kernel.cpu_throttled_periods} of {kernel.cpu_periods} periods",
    )
    verdict.saw("pybox", f"ended at the {timeout_s:g} s deadline, after {duration:.2f} s")


def judge_disk_fill(outcome: RunOutcome, verdict: Verdict) -> None:
    report = program_report(outcome, verdict)
    judge_posture_read_back(outcome.receipt, verdict)
    if not report:
        return
    cap = int(outcome.receipt.configured.limits["writable_bytes"])
    written = report.get("root_written") or []
    errors: dict[str, int] = report.get("root_errors") or {}
    probes = int(report.get("root_probes") or 0)
    verdict.check(probes > 50, f"only {probes} directories probed")
    verdict.check(not written, f"files created on the root filesystem in {written}")
    verdict.check(set(errors) <= {"EROFS"}, f"root filesystem errors other than EROFS: {errors}")
    # EACCES where the box user may not even enter the directory (/root): still no write.
    named: dict[str, str] = report.get("named") or {}
    verdict.check(
        bool(named) and set(named.values()) <= {"EROFS", "EACCES"},
        f"named directories: {named}",
    )
    verdict.check(report.get("root_read_only_flag") is True, "/ is not mounted read-only")
    verdict.saw(
        "program",
        f"every write in the {probes} directories of the root filesystem failed with EROFS "
        f"({', '.join(f'{d} {e}' for d, e in named.items())}); statvfs says read-only",
    )
    fills: dict[str, dict[str, Any]] = report.get("fills") or {}
    verdict.check(len(fills) == 3, f"filled {sorted(fills)}")
    for directory, fill in sorted(fills.items()):
        size = int(fill.get("bytes") or 0)
        verdict.check(
            fill.get("error") == "ENOSPC" and size <= cap,
            f"filling {directory} ended with {fill.get('error')} after {size} bytes (cap {cap})",
        )
    verdict.saw(
        "program",
        "filling "
        + ", ".join(
            f"{d} ended {f.get('error')} at {int(f.get('bytes') or 0) / MIB:.0f} MiB"
            for d, f in sorted(fills.items())
        )
        + f" (cap {cap / MIB:.0f} MiB; $HOME is {report.get('home')})",
    )


def judge_output_flood(
    outcome: RunOutcome, verdict: Verdict, rss_growth_bytes: int | None, rss_how: str
) -> None:
    receipt = outcome.receipt
    kept_limit = int(receipt.configured.limits["output_bytes"])
    verdict.check(receipt.status is Status.SUCCEEDED, f"status {receipt.status.value}")
    streams = receipt.reported_by_program
    for name, stream, sent, kept in (
        ("stdout", streams.stdout, FLOOD_STDOUT_BYTES, outcome.stdout),
        ("stderr", streams.stderr, FLOOD_STDERR_BYTES, outcome.stderr),
    ):
        verdict.check(
            stream.bytes_total == sent,
            f"{name}: pybox counted {stream.bytes_total} of {sent} bytes",
        )
        verdict.check(stream.truncated, f"{name} is not marked truncated")
        verdict.check(
            stream.bytes_kept <= kept_limit and len(kept) <= kept_limit + 200,
            f"{name}: kept {stream.bytes_kept} bytes, over the {kept_limit} byte cap",
        )
        verdict.check(TRUNCATION_MARK in kept, f"{name} carries no truncation mark")
    verdict.saw(
        "pybox",
        f"received {streams.stdout.bytes_total / MIB:.0f} MiB stdout and "
        f"{streams.stderr.bytes_total / MIB:.0f} MiB stderr; kept {streams.stdout.bytes_kept} "
        f"+ {streams.stderr.bytes_kept} bytes, truncation marked",
    )
    if verdict.check(rss_growth_bytes is not None, "pybox's own memory could not be measured"):
        growth = rss_growth_bytes or 0
        verdict.check(
            growth <= FLOOD_RSS_GROWTH_LIMIT_BYTES,
            f"pybox's memory grew by {growth / MIB:.1f} MiB "
            f"(limit {FLOOD_RSS_GROWTH_LIMIT_BYTES / MIB:.0f} MiB)",
        )
        verdict.saw(
            "host",
            f"pybox's own peak memory grew by {growth / MIB:.1f} MiB during the flood "
            f"({rss_how}; bound {FLOOD_RSS_GROWTH_LIMIT_BYTES / MIB:.0f} MiB)",
        )


def judge_timeout_evasion(outcome: RunOutcome, verdict: Verdict) -> None:
    receipt = outcome.receipt
    kernel = receipt.observed_by_kernel
    timeout_s = float(receipt.configured.limits["timeout_s"])
    duration = receipt.observed_by_pybox.run_duration_s or 0.0
    verdict.check(
        receipt.status is Status.TIMED_OUT and receipt.observed_by_pybox.deadline_kill,
        f"status {receipt.status.value}, not a deadline kill",
    )
    verdict.check(
        timeout_s <= duration < timeout_s + DEADLINE_SLACK_S,
        f"ended after {duration:.2f} s for a {timeout_s:g} s deadline",
    )
    # The program, 3 children, 3 daemons (and the bootstrap).
    verdict.check(
        (kernel.pids_peak or 0) >= 7, f"processes peak {kernel.pids_peak}: the children never ran"
    )
    started = b"children and daemons started" in outcome.stdout
    verdict.check(started, "the program never said its children started")
    verdict.saw("program", "ignored SIGTERM; 3 children and 3 double-forked setsid daemons")
    verdict.saw(
        "kernel", f"processes peak {kernel.pids_peak} ({kernel.pids_peak_source}) in the box"
    )
    verdict.saw("pybox", f"killed the box at the {timeout_s:g} s deadline, after {duration:.2f} s")


PRIVILEGE_ATTEMPTS = 17


def judge_privilege(outcome: RunOutcome, verdict: Verdict) -> None:
    report = program_report(outcome, verdict)
    judge_posture_read_back(outcome.receipt, verdict)
    if not report:
        return
    ids: dict[str, int] = report.get("ids") or {}
    expected_ids = {"uid": BOX_UID, "euid": BOX_UID, "gid": BOX_GID, "egid": BOX_GID}
    verdict.check(ids == expected_ids, f"identity {ids}, expected {expected_ids}")
    caps: dict[str, str] = report.get("caps") or {}
    verdict.check(len(caps) == 5 and set(caps.values()) == {ZERO_CAPS}, f"capabilities: {caps}")
    verdict.check(report.get("no_new_privs") == "1", "no_new_privs is not set")
    verdict.check(report.get("seccomp") == "2", f"seccomp mode {report.get('seccomp')}")
    setuid = report.get("setuid_files")
    verdict.check(setuid == [], f"setuid or setgid files: {setuid}")
    verdict.saw(
        "program",
        f"uid {ids.get('uid')} gid {ids.get('gid')}; CapInh/Prm/Eff/Bnd/Amb all zero; "
        "no_new_privs 1; seccomp filter; no setuid or setgid file",
    )
    attempts: dict[str, str] = report.get("attempts") or {}
    worked = sorted(name for name, result in attempts.items() if result == "succeeded")
    verdict.check(len(attempts) >= PRIVILEGE_ATTEMPTS, f"only {len(attempts)} attempts made")
    if verdict.check(not worked, f"these succeeded: {worked}"):
        verdict.saw(
            "program",
            f"{len(attempts)} attempts all failed: "
            + "; ".join(f"{name} {result}" for name, result in attempts.items()),
        )
    devices: list[list[Any]] = report.get("devices") or []
    unsafe = [d for d in devices if d[1] != "char" or (d[2], d[3]) not in SAFE_DEVICES]
    verdict.check(bool(devices), "no devices listed")
    if verdict.check(not unsafe, f"unsafe devices: {unsafe}"):
        verdict.saw(
            "program",
            "/dev holds only " + ", ".join(sorted(str(d[0]) for d in devices)),
        )


def judge_secrets(
    verdict: Verdict,
    *,
    stdout: bytes,
    stderr: bytes,
    truncated: bool,
    canary: tuple[str, str],
    host_hostname: str,
    expected_env: frozenset[str],
) -> None:
    lines = stdout.strip().splitlines()
    try:
        report = json.loads(lines[-1]) if lines else None
    except ValueError:
        report = None
    if not verdict.check(isinstance(report, dict), "the program's report is missing"):
        return
    assert isinstance(report, dict)
    name, value = canary
    sent = stdout + stderr
    verdict.check(not truncated, "the output was truncated, so the canary search is incomplete")
    if verdict.check(
        name.encode() not in sent and value.encode() not in sent,
        "the host's canary variable reached the box",
    ):
        verdict.saw(
            "pybox",
            f"the canary variable {name} set in the controller's environment is in none of "
            f"the {len(sent)} bytes the box sent (environments of every readable process "
            "included)",
        )
    environ: dict[str, str] = report.get("environ") or {}
    # The engine adds HOSTNAME, from the box's own hostname.
    extra = sorted(
        key
        for key, value in environ.items()
        if key not in expected_env and (key, value) != ("HOSTNAME", BOX_HOSTNAME)
    )
    if verdict.check(not extra, f"variables pybox does not set: {extra}"):
        verdict.saw(
            "program",
            f"the environment holds only pybox's variables and the engine's "
            f"HOSTNAME={BOX_HOSTNAME} ({len(environ)} in all)",
        )
    names: dict[str, str] = report.get("hostnames") or {}
    verdict.check(bool(names) and set(names.values()) == {BOX_HOSTNAME}, f"hostnames seen: {names}")
    hosts_words = str(report.get("etc_hosts", "")).split()
    verdict.check(
        host_hostname not in names.values() and host_hostname not in hosts_words,
        f"the host's name {host_hostname!r} is visible",
    )
    verdict.saw(
        "program",
        f"hostname {BOX_HOSTNAME!r} by all {len(names)} views, not the host's "
        f"{host_hostname!r}; /etc/hosts {'empty' if not hosts_words else 'without it'}",
    )


# -- the posture hook ---------------------------------------------------------------

_REMOVE = object()
HOST_DIR = "{host_dir}"  # replaced by an empty folder that verify made on the host
DONOR = "{donor}"  # replaced by a never-started box of the same run, made for this


@dataclass(frozen=True)
class Weakening:
    """One way to ask the engine for a weaker box: the field, and what is changed."""

    field: str
    how: str
    changes: tuple[tuple[str, Any], ...]

    @property
    def needs_donor(self) -> bool:
        return DONOR in json.dumps([v for _, v in self.changes if v is not _REMOVE])


def _w(name: str, how: str, value: Any, *more: tuple[str, Any]) -> Weakening:
    return Weakening(name, how, ((name, value), *more))


# Every hardening field of the posture, each weakened in turn.
WEAKENINGS: tuple[Weakening, ...] = (
    _w("Config.User", "run as root", "0:0"),
    _w("Config.Entrypoint", "the image's shell as PID 1, not pybox's bootstrap", ["/bin/sh"]),
    _w("Config.Cmd", "a command from the image", ["/bin/sh"]),
    _w("Config.Hostname", "removed (the engine's default name)", _REMOVE),
    _w("Config.Healthcheck", "removed (a health check would exec in the box)", _REMOVE),
    _w("Config.ExposedPorts", "a port exposed", {"8080/tcp": {}}),
    _w("Config.Volumes", "an anonymous volume", {"/data": {}}),
    _w("Config.NetworkDisabled", "removed", _REMOVE),
    _w("HostConfig.NetworkMode", "removed (the default bridge network)", _REMOVE),
    _w(
        "HostConfig.PortBindings",
        "a port published on the host's loopback",
        {"8080/tcp": [{"HostIp": "127.0.0.1", "HostPort": "0"}]},
    ),
    _w("HostConfig.PublishAllPorts", "every port published", True),
    _w("HostConfig.ExtraHosts", "a hosts entry", ["pybox-verify.invalid:127.0.0.1"]),
    _w("HostConfig.Dns", "a name server", ["127.0.0.1"]),
    _w("HostConfig.Links", "a link to another box", [f"{DONOR}:donor"]),
    _w("HostConfig.ReadonlyRootfs", "removed (a writable root)", _REMOVE),
    _w("HostConfig.Tmpfs", "an uncapped /tmp with exec and setuid", {"/tmp": "rw,exec,suid"}),
    _w("HostConfig.ShmSize", "a 1 GiB /dev/shm", 1024 * MIB),
    _w("HostConfig.Binds", "a host folder bound in", [f"{HOST_DIR}:/host:ro"]),
    _w(
        "HostConfig.Mounts",
        "a host folder mounted",
        [{"Type": "bind", "Source": HOST_DIR, "Target": "/host", "ReadOnly": True}],
    ),
    _w("HostConfig.VolumesFrom", "the volumes of another box", [f"{DONOR}:ro"]),
    _w("HostConfig.Privileged", "privileged", True),
    _w("HostConfig.CapDrop", "removed (the engine's default capabilities)", _REMOVE),
    _w("HostConfig.CapAdd", "CAP_SYS_ADMIN added", ["SYS_ADMIN"]),
    _w("HostConfig.SecurityOpt", "removed (no no-new-privileges)", _REMOVE),
    _w(
        "HostConfig.SecurityOpt",
        "seccomp unconfined",
        ["no-new-privileges", "seccomp=unconfined"],
    ),
    _w(
        "HostConfig.Devices",
        "a host device",
        [
            {
                "PathOnHost": "/dev/null",
                "PathInContainer": "/dev/pybox-verify",
                "CgroupPermissions": "r",
            }
        ],
    ),
    _w(
        "HostConfig.DeviceRequests",
        "a GPU request",
        [{"Driver": "", "Count": -1, "Capabilities": [["gpu"]]}],
    ),
    _w("HostConfig.DeviceCgroupRules", "a device rule", ["c 1:3 r"]),
    _w("HostConfig.GroupAdd", "group 0 added", ["0"]),
    _w("HostConfig.Sysctls", "a sysctl", {"kernel.msgmax": "65536"}),
    _w("HostConfig.UsernsMode", "the host's user namespace", "host"),
    _w("HostConfig.PidMode", "the host's process namespace", "host"),
    _w("HostConfig.IpcMode", "the host's IPC namespace", "host"),
    _w(
        "HostConfig.UTSMode",
        "the host's hostname namespace",
        "host",
        ("Config.Hostname", _REMOVE),  # the engine refuses a hostname with it
    ),
    _w("HostConfig.CgroupnsMode", "the host's cgroup namespace", "host"),
    _w("HostConfig.CgroupParent", "another cgroup parent", "pybox-verify-weakened"),
    _w("HostConfig.Init", "the engine's init binary from the host", True),
    _w("HostConfig.Runtime", "another runtime", "io.containerd.runc.v2"),
    _w("HostConfig.MaskedPaths", "no masked kernel files", []),
    _w("HostConfig.ReadonlyPaths", "no read-only kernel settings", []),
    _w(
        "HostConfig.Memory",
        "removed (no memory cap)",
        _REMOVE,
        ("HostConfig.MemorySwap", _REMOVE),  # the engine refuses swap without memory
    ),
    _w("HostConfig.MemorySwap", "unlimited swap", -1),
    _w("HostConfig.OomKillDisable", "the OOM killer disabled", True),
    _w("HostConfig.NanoCpus", "removed (no CPU cap)", _REMOVE),
    _w("HostConfig.PidsLimit", "removed (no process cap)", _REMOVE),
    _w("HostConfig.Ulimits", "removed (no open-files cap, core dumps)", _REMOVE),
    _w("HostConfig.OomScoreAdj", "a lower OOM priority", -500),
    _w("HostConfig.LogConfig", "the engine keeps logs", {"Type": "json-file", "Config": {}}),
    _w("HostConfig.AutoRemove", "removed by the engine, not confirmed by pybox", True),
    _w("HostConfig.RestartPolicy", "restarted always", {"Name": "always"}),
)

# Posture fields that say how the box is wired rather than how it is hardened.
NOT_HARDENING: Mapping[str, str] = {
    "Image": "the image is pinned by ID; verify has no second image to swap in",
    "Config.Env": "pybox's variables; leaks from the host are the secrets case",
    "Config.WorkingDir": "where the program starts",
    "Config.Domainname": "a name only",
    "Config.Labels": "how pybox finds its boxes",
    "Config.Tty": "stream plumbing",
    "Config.OpenStdin": "stream plumbing",
    "Config.StdinOnce": "stream plumbing",
    "Config.AttachStdin": "stream plumbing",
    "Config.AttachStdout": "stream plumbing",
    "Config.AttachStderr": "stream plumbing",
}


def _create_path(name: str) -> tuple[str, ...]:
    parts = tuple(name.split("."))
    return parts[1:] if parts[0] == "Config" else parts


def _fill(value: Any, names: Mapping[str, str]) -> Any:
    if isinstance(value, str):
        for placeholder, actual in names.items():
            value = value.replace(placeholder, actual)
        return value
    if isinstance(value, list):
        return [_fill(item, names) for item in value]
    if isinstance(value, dict):
        return {key: _fill(item, names) for key, item in value.items()}
    return value


def weaken(body: JSONObject, weakening: Weakening, names: Mapping[str, str]) -> JSONObject:
    """A copy of a create body with one weakening applied."""
    weaker = copy.deepcopy(body)
    for name, value in weakening.changes:
        path = _create_path(name)
        target = weaker
        for key in path[:-1]:
            target = target.setdefault(key, {})
        if value is _REMOVE:
            target.pop(path[-1], None)
        else:
            target[path[-1]] = _fill(value, names)
    return weaker


class WeakenedCreateEngine:
    """The real engine, except that each create asks for a weakened box.

    For the posture case only: it records whether the box was ever attached or
    started, and the engine's own state of the box just before its removal.
    """

    def __init__(self, engine: Engine, host_dir: str) -> None:
        self._engine = engine
        self._host_dir = host_dir
        self.weakening: Weakening | None = None
        self.donor_id: str | None = None
        self.started = False
        self.attached = False
        self.state_before_removal: str | None = None

    def reset(self, weakening: Weakening) -> None:
        self.weakening = weakening
        self.started = self.attached = False
        self.state_before_removal = None

    @property
    def endpoint(self) -> EngineEndpoint:
        return self._engine.endpoint

    @property
    def api_version(self) -> str:
        return self._engine.api_version

    @property
    def server_version(self) -> str:
        return self._engine.server_version

    def version(self) -> JSONObject:
        return self._engine.version()

    def info(self) -> JSONObject:
        return self._engine.info()

    def create_container(self, name: str, body: JSONObject) -> str:
        assert self.weakening is not None
        names = {HOST_DIR: self._host_dir, DONOR: f"{name}-donor"}
        if self.weakening.needs_donor:
            # A box of the same run, never started, for the weakening to point at.
            self.donor_id = self._engine.create_container(names[DONOR], body)
        return self._engine.create_container(name, weaken(body, self.weakening, names))

    def inspect_container(self, container_id: str) -> JSONObject | None:
        return self._engine.inspect_container(container_id)

    def attach(self, container_id: str) -> AttachStream:
        self.attached = True
        return self._engine.attach(container_id)

    def start_container(self, container_id: str) -> None:
        self.started = True
        self._engine.start_container(container_id)

    def kill_container(self, container_id: str, signal: str = "KILL") -> bool:
        return self._engine.kill_container(container_id, signal)

    def wait_container(self, container_id: str, timeout_s: float) -> int:
        return self._engine.wait_container(container_id, timeout_s)

    def remove_container(self, container_id: str) -> bool:
        if self.state_before_removal is None:
            found = self._engine.inspect_container(container_id)
            state = (found or {}).get("State") or {}
            self.state_before_removal = str(state.get("Status"))
        return self._engine.remove_container(container_id)

    def list_containers(self, labels: Mapping[str, str | None]) -> list[JSONObject]:
        return self._engine.list_containers(labels)

    def inspect_image(self, reference: str) -> JSONObject | None:
        return self._engine.inspect_image(reference)

    def import_image(
        self, tar_chunks: Iterable[bytes], repo: str, tag: str, changes: list[str]
    ) -> str:
        raise PyboxError("verify's posture engine builds no images")

    def remove_image(self, reference: str) -> bool:
        raise PyboxError("verify's posture engine removes no images")

    def discard_donor(self) -> bool:
        donor, self.donor_id = self.donor_id, None
        return donor is None or remove_and_confirm(self._engine, donor)


def judge_weakened(
    outcome: RunOutcome, verdict: Verdict, weakening: Weakening, hook: WeakenedCreateEngine
) -> bool:
    receipt = outcome.receipt
    fields = [m.field for m in receipt.observed_by_engine.posture_mismatches]
    label = f"{weakening.field} ({weakening.how})"
    return all(
        (
            verdict.check(
                receipt.status is Status.SANDBOX_ERROR and weakening.field in fields,
                f"{label}: status {receipt.status.value}, mismatches {fields}",
            ),
            verdict.check(not hook.started and not hook.attached, f"{label}: the box started"),
            verdict.check(
                hook.state_before_removal == "created",
                f"{label}: the engine had the box {hook.state_before_removal}",
            ),
            verdict.check(outcome.stdout == b"", f"{label}: the program ran"),
            verdict.check(
                receipt.observed_by_engine.removal_confirmed, f"{label}: removal not confirmed"
            ),
        )
    )


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
        outcome = self.session.run(
            RunRequest(code=case_source(name), code_name=f"{name}.py", inputs=inputs, limits=limits)
        )
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

    def controller(self, extra_env: Mapping[str, str], *args: str) -> subprocess.Popen[bytes]:
        """`pybox exec` in a process of its own, on this session's engine and state."""
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
        return process


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
    controller = suite.controller({name: value}, "-", "--json", "--timeout", "30")
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


def _box_of(engine: Engine, pid: int) -> JSONObject | None:
    host = socket.gethostname()
    for box in engine.list_containers({LABEL_MANAGED: "1"}):
        owner = str((box.get("Labels") or {}).get(LABEL_OWNER, "")).rsplit(":", 2)
        if owner[:2] == [host, str(pid)] and box.get("State") == "running":
            return box
    return None


def run_leftovers(suite: Suite, verdict: Verdict) -> None:
    controller = suite.controller({}, "-", "--timeout", "60")
    box: JSONObject | None = None
    try:
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
    finally:
        if controller.poll() is None:
            controller.kill()
            controller.wait()
        controller.communicate()
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
    outcome = fresh.run(RunRequest(code=b"print('the next run')\n", code_name="next_run.py"))
    verdict.run_ids.append(outcome.receipt.run_id)
    swept = outcome.receipt.observed_by_pybox.leftovers_swept
    verdict.check(outcome.receipt.status is Status.SUCCEEDED, "the next run did not succeed")
    verdict.check(swept >= 1, f"the next run swept {swept} boxes")
    verdict.check(run_id not in suite.session.state.attempts(), "the attempt record stayed")
    judge_gone(verdict, suite.engine, box_id, swept >= 1, suite.cgroup_exists)
    verdict.saw("pybox", f"the next run swept {swept} leftover box(es) before it started")
    suite.gone(verdict, outcome.receipt)


def run_posture(suite: Suite, verdict: Verdict) -> None:
    host_dir = suite.workdir / "never-mounted"
    host_dir.mkdir()
    hook = WeakenedCreateEngine(suite.engine, str(host_dir))
    weak = Session(hook, suite.session.state, suite.session.policy, owner=suite.session.owner)
    refused: list[str] = []
    code = case_source("posture")
    for weakening in WEAKENINGS:
        hook.reset(weakening)
        try:
            outcome = weak.run(RunRequest(code=code, code_name="posture.py"))
        finally:
            verdict.check(hook.discard_donor(), f"{weakening.field}: the donor box stayed")
        verdict.run_ids.append(outcome.receipt.run_id)
        if judge_weakened(outcome, verdict, weakening, hook):
            refused.append(weakening.field)
        suite.gone(verdict, outcome.receipt, say=False)
    verdict.saw(
        "engine",
        f"{len(refused)} of {len(WEAKENINGS)} weakened boxes refused before start: the engine "
        f"had each only as created, then no such container; fields {', '.join(refused)}",
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
        "status out_of_memory on kernel or engine OOM evidence; kernel peak within the cap",
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
        "uid 1000, no capability, no_new_privs, seccomp; every attempt fails; no setuid file; "
        "only the safe devices",
        _simple("privilege", LimitRequest(timeout_s=30), judge_privilege),
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
    try:
        for case in cases:
            verdict = Verdict()
            case_started = time.monotonic()
            try:
                case.run(suite, verdict)
            except (PyboxError, OSError, subprocess.SubprocessError) as exc:
                verdict.check(False, f"{type(exc).__name__}: {exc}")
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
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    left = _left_behind(session, run_ids, suite.controller_pids)
    return SuiteResult(tuple(results), left, round(time.monotonic() - started, 2))


def _left_behind(session: Session, run_ids: set[str], pids: list[int]) -> tuple[str, ...]:
    """Boxes of this suite still in the engine: named, then removed so none stays."""
    owners = {session.owner}
    host = socket.gethostname()
    left: list[str] = []
    for box in session.engine.list_containers({LABEL_MANAGED: "1"}):
        labels = box.get("Labels") or {}
        owner = str(labels.get(LABEL_OWNER, ""))
        ours = (
            labels.get(LABEL_RUN_ID) in run_ids
            or owner in owners
            or owner.rsplit(":", 2)[:2] in ([host, str(pid)] for pid in pids)
        )
        if ours:
            name = str((box.get("Names") or [box.get("Id")])[0]).lstrip("/")
            left.append(name)
            remove_and_confirm(session.engine, str(box["Id"]))
    return tuple(left)
