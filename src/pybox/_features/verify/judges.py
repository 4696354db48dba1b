"""The judges of `pybox verify`: evidence in, facts and unmet criteria out.

Each judge takes one run's outcome (and what the host saw) and checks the
case's criterion part by part. What the program printed came from inside the
box and is untrusted; a judge names the source of every fact it records and,
where the engine, the kernel, the host or pybox can see a fact, relies on
that. Judges do no I/O of their own beyond asking the engine whether a box
still exists.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from importlib.resources import files
from typing import Any, Literal

from pybox._boxes.record import RunOutcome
from pybox._core.limits import MIB
from pybox._core.posture import (
    BOX_HOSTNAME,
    BOX_UID_FIRST,
)
from pybox._core.receipt import Receipt, Status
from pybox._engine import Engine

FLOOD_STDOUT_BYTES = 256 * MIB
FLOOD_STDERR_BYTES = 128 * MIB
# pybox keeps head and tail of each stream; its own memory may grow by this much at most.
FLOOD_RSS_GROWTH_LIMIT_BYTES = 64 * MIB
# A deadline kill lands within this much of the deadline.
DEADLINE_SLACK_S = 1.5

TRUNCATION_MARK = b"[pybox: output truncated"
ZERO_CAPS = "0000000000000000"
# null, zero, full, random, urandom, tty, ptmx: the engine's default device set.
SAFE_DEVICES = frozenset({(1, 3), (1, 5), (1, 7), (1, 8), (1, 9), (5, 0), (5, 2)})
# Kernel filesystems the box gets fresh instances of; a host instance has a host device number.
FRESH_FILESYSTEMS = frozenset({"proc", "sysfs", "tmpfs", "devpts", "mqueue"})
# cgroup v1 hierarchies share one superblock with the host's; the box sees its own part, read-only.
CGROUP_FILESYSTEMS = frozenset({"cgroup", "cgroup2"})

# -- result values -------------------------------------------------------------------


# Who established a fact. Only `program` is from inside the box, and untrusted.
Source = Literal["program", "engine", "kernel", "host", "pybox"]


@dataclass(frozen=True)
class Fact:
    """One piece of evidence and who established it."""

    source: Source
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

    def saw(self, source: Source, text: str) -> None:
        self.facts.append(Fact(source, text))

    def check(self, ok: bool, failure: str) -> bool:
        if not ok:
            self.failures.append(failure)
        return ok


def case_source(name: str) -> bytes:
    """The hostile program of a case, exactly as shipped."""
    return files("pybox._features.verify").joinpath("cases", f"{name}.py").read_bytes()


def program_report(stdout: bytes, stderr: bytes, verdict: Verdict) -> dict[str, Any]:
    """The JSON object the program printed last (untrusted), or {} with a failure."""
    lines = stdout.strip().splitlines()
    try:
        value = json.loads(lines[-1]) if lines else None
    except ValueError:
        value = None
    if not isinstance(value, dict):
        tail = stderr.decode("utf-8", "replace").strip()[-300:]
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
    report = program_report(outcome.stdout, outcome.stderr, verdict)
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
    report = program_report(outcome.stdout, outcome.stderr, verdict)
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
    if verdict.check(
        bool(kernel.oom_kill_count) or engine.oom_killed is True,
        "no kernel or engine evidence of an OOM kill",
    ):
        if kernel.oom_kill_count:
            verdict.saw("kernel", f"the cgroup's OOM-kill counter is {kernel.oom_kill_count}")
        if engine.oom_killed:
            verdict.saw("engine", "State.OOMKilled is true")
    verdict.check(
        kernel.memory_limit_bytes == cap,
        f"the kernel's memory limit is {kernel.memory_limit_bytes}, not {cap}",
    )
    peak = kernel.memory_peak_bytes
    verdict.check(
        peak is not None and peak >= cap * 0.9, f"memory peak {peak} never came near the cap {cap}"
    )
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
    report = program_report(outcome.stdout, outcome.stderr, verdict)
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


# As many as privilege.py makes: fewer means some never ran.
PRIVILEGE_ATTEMPTS = 19


def judge_privilege(outcome: RunOutcome, verdict: Verdict) -> None:
    report = program_report(outcome.stdout, outcome.stderr, verdict)
    judge_posture_read_back(outcome.receipt, verdict)
    if not report:
        return
    ids: dict[str, int] = report.get("ids") or {}
    # The box's own uid and gid, as pybox configured them (never 0, never a host account's).
    uid_text, _, gid_text = outcome.receipt.configured.user.partition(":")
    uid, gid = int(uid_text), int(gid_text)
    expected_ids = {"uid": uid, "euid": uid, "gid": gid, "egid": gid}
    verdict.check(
        uid >= BOX_UID_FIRST and ids == expected_ids, f"identity {ids}, expected {expected_ids}"
    )
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
    report = program_report(stdout, stderr, verdict)
    if not report:
        return
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
        for key, seen in environ.items()
        if key not in expected_env and (key, seen) != ("HOSTNAME", BOX_HOSTNAME)
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


# As many as seccomp.py makes: fewer means some never ran.
SECCOMP_ATTEMPTS = 30
SECCOMP_REFUSALS = frozenset({"EPERM", "ENOSYS"})


def judge_seccomp(outcome: RunOutcome, verdict: Verdict, profile_sha256: str) -> None:
    """Denied calls fail with the filter's answer; the engine held pybox's profile."""
    receipt = outcome.receipt
    judge_posture_read_back(receipt, verdict)
    confinement = receipt.configured.confinement
    if verdict.check(
        receipt.observed_by_engine.posture_verified
        and confinement.seccomp_profile_sha256 == profile_sha256,
        f"the box's seccomp profile {confinement.seccomp_profile_sha256} is not pybox's "
        f"{profile_sha256}",
    ):
        verdict.saw(
            "engine",
            f"HostConfig.SecurityOpt held pybox's seccomp profile {profile_sha256[:19]} "
            "(read back before start); "
            + (
                f"AppArmorProfile {confinement.apparmor_profile}"
                if confinement.apparmor_profile
                else confinement.apparmor
            ),
        )
    report = program_report(outcome.stdout, outcome.stderr, verdict)
    if not report:
        return
    arch = report.get("arch")
    attempts: dict[str, str] = report.get("attempts") or {}
    if not verdict.check(
        bool(attempts),
        f"the case knows system-call numbers for x86_64 and aarch64 only; this box runs "
        f"{arch}, so nothing was tried and containment is not established",
    ):
        return
    verdict.check(report.get("seccomp") == "2", f"seccomp mode {report.get('seccomp')}")
    verdict.check(len(attempts) >= SECCOMP_ATTEMPTS, f"only {len(attempts)} calls made")
    verdict.check("io_uring_setup" in attempts, "io_uring_setup was not tried")
    through = {
        name: result for name, result in attempts.items() if str(result) not in SECCOMP_REFUSALS
    }
    if verdict.check(not through, f"not stopped by the filter: {through}"):
        verdict.saw(
            "program",
            f"{arch}; seccomp filter mode; {len(attempts)} calls all refused "
            f"({_counts(attempts.values())}): io_uring_setup {attempts.get('io_uring_setup')}, "
            + ", ".join(sorted(name for name in attempts if name != "io_uring_setup")),
        )
