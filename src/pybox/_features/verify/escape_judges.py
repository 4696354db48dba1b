"""The judges of the escape cases: host files, network, privilege, secrets, seccomp.

Each judge takes one run's outcome (and what the host saw) and checks the
case's criterion part by part. What the program printed came from inside the
box and is untrusted; where the engine, the host or pybox can see a fact, the
judge relies on that.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pybox._adapters.box_processes import HostProcess
from pybox._boxes.record import RunOutcome
from pybox._core.posture import (
    BOX_HOSTNAME,
    BOX_UID_FIRST,
)
from pybox._engine.connect import backend_named
from pybox._features.verify.lanes import (
    contained_mount_in_gvisor,
    counts,
    judge_host_confinement,
    judge_seccomp_in_gvisor,
    lane_terms,
)
from pybox._features.verify.verdict import Verdict, judge_posture_read_back, program_report

ZERO_CAPS = "0000000000000000"
# null, zero, full, random, urandom, tty, ptmx: the engine's default device set.
SAFE_DEVICES = frozenset({(1, 3), (1, 5), (1, 7), (1, 8), (1, 9), (5, 0), (5, 2)})
# Kernel filesystems the box gets fresh instances of; a host instance has a host device number.
FRESH_FILESYSTEMS = frozenset({"proc", "sysfs", "tmpfs", "devpts", "mqueue"})
# cgroup v1 hierarchies share one superblock with the host's; the box sees its own part, read-only.
CGROUP_FILESYSTEMS = frozenset({"cgroup", "cgroup2"})


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
            f"{len(reads)} reads of host-only files all failed ({counts(reads.values())})",
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
    engine_files = engine_box_files(receipt.configured.engine.name, container_id)
    mounts: list[dict[str, str]] = report.get("mounts") or []
    # Under a kernel of the lane's own (the Sentry) the mounts are its view.
    host_kernel = lane_terms(receipt).kernel_is_host
    bad = [
        m
        for m in mounts
        if not (
            _contained_mount(m, engine_files, host_devices)
            if host_kernel
            else contained_mount_in_gvisor(m, engine_files)
        )
    ]
    verdict.check(len(mounts) > 3, "the program listed almost no mounts")
    if verdict.check(not bad, f"mounts from the host: {bad}"):
        verdict.saw(
            "program",
            (
                f"{len(mounts)} mounts, none from the host: a read-only image root, fresh "
                "kernel filesystems and tmpfs (device numbers the host does not use), "
                "read-only cgroup views, and the engine's own read-only files for this box: "
                if host_kernel
                else f"{len(mounts)} mounts as the Sentry shows them: the image root and the "
                "engine's own files read-only over 9p from the Gofer, the rest file systems "
                "of the Sentry's own: "
            )
            + ", ".join(sorted(engine_files)),
        )
    _judge_engine_files(report, engine_files, mounts, verdict)


# The files an engine writes for each box, in its own per-box storage, and binds
# read-only into it: mount point -> how the bound file's path ends, and what it
# must hold (None: a mount point the engine may leave out).
def engine_box_files(engine: str, container_id: str) -> dict[str, tuple[str, str]]:
    """The files the backend of the engine named `engine` binds into each box."""
    return backend_named(engine).box_files(container_id, BOX_HOSTNAME)


def _judge_engine_files(
    report: Mapping[str, Any],
    engine_files: Mapping[str, tuple[str, str]],
    mounts: list[dict[str, str]],
    verdict: Verdict,
) -> None:
    seen: Mapping[str, str] = report.get("engine_files") or {}
    bound = {m.get("mount_point") for m in mounts}
    for point, (_, content) in sorted(engine_files.items()):
        if point in bound:
            # Docker ends the hostname with a newline, Podman does not.
            verdict.check(
                str(seen.get(point)).rstrip("\n") == content.rstrip("\n"),
                f"the engine's {point} holds {seen.get(point)!r}, not {content!r}",
            )


def _contained_mount(
    mount: Mapping[str, str], engine_files: Mapping[str, tuple[str, str]], host: frozenset[str]
) -> bool:
    point, fstype, options = mount.get("mount_point"), mount.get("fstype"), mount.get("options", "")
    read_only = "ro" in options.split(",")
    if point == "/":
        return fstype == "overlay" and read_only
    # The engine's own per-box files, bound read-only (from its storage, which may
    # be a disk or a tmpfs of the host's); nothing else from a disk.
    root = mount.get("root", "")
    if point is not None and point in engine_files and root.endswith(engine_files[point][0]):
        return read_only
    if fstype in FRESH_FILESYSTEMS:
        return mount.get("device") not in host
    if fstype in CGROUP_FILESYSTEMS:
        return read_only
    return False


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


# As many as privilege.py makes: fewer means some never ran.
PRIVILEGE_ATTEMPTS = 20


def judge_privilege(
    outcome: RunOutcome, verdict: Verdict, host: tuple[HostProcess, ...] = ()
) -> None:
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
    caps: dict[str, str | None] = report.get("caps") or {}
    terms = lane_terms(outcome.receipt)
    # The Sentry gives no CapAmb line; ambient capabilities are a subset of the
    # permitted and inheritable ones, so with both zero there are none.
    if (
        not terms.kernel_is_host
        and caps.get("CapAmb") is None
        and caps.get("CapInh") == caps.get("CapPrm")
    ):
        caps = {**caps, "CapAmb": caps.get("CapPrm")}
    verdict.check(len(caps) == 5 and set(caps.values()) == {ZERO_CAPS}, f"capabilities: {caps}")
    verdict.check(report.get("no_new_privs") == "1", "no_new_privs is not set")
    if terms.kernel_is_host:
        verdict.check(report.get("seccomp") == "2", f"seccomp mode {report.get('seccomp')}")
    else:
        # The Sentry's own view is seccomp mode 0; the filter is on its host processes.
        judge_host_confinement(verdict, host)
    setuid = report.get("setuid_files")
    verdict.check(setuid == [], f"setuid or setgid files: {setuid}")
    verdict.saw(
        "program",
        f"uid {ids.get('uid')} gid {ids.get('gid')}; CapInh/Prm/Eff/Bnd/Amb all zero"
        + terms.caps_words
        + f"; no_new_privs 1; seccomp mode {report.get('seccomp')}"
        + terms.seccomp_words
        + "; no setuid or setgid file",
    )
    attempts: dict[str, str] = report.get("attempts") or {}
    worked = sorted(name for name, result in attempts.items() if result == "succeeded")
    verdict.check(len(attempts) >= PRIVILEGE_ATTEMPTS, f"only {len(attempts)} attempts made")
    sentry_only = sorted(set(worked) & terms.own_kernel_calls)
    worked = [name for name in worked if name not in sentry_only]
    if verdict.check(not worked, f"these succeeded: {worked}"):
        verdict.saw(
            "program",
            f"{len(attempts)} attempts, "
            + (
                f"all failed but {len(sentry_only)} inside the Sentry: "
                if sentry_only
                else "all failed: "
            )
            + "; ".join(f"{name} {result}" for name, result in attempts.items()),
        )
    if sentry_only:
        verdict.saw(
            "program",
            f"succeeded inside gVisor only ({', '.join(sentry_only)}): namespaces and "
            "nodes of the Sentry's own, the node leads to no device "
            f"(read {attempts.get('read the /tmp/mem node')}); the host's view above is "
            "unchanged",
        )
    devices: list[list[Any]] = report.get("devices") or []
    safe = SAFE_DEVICES | terms.own_kernel_devices
    unsafe = [d for d in devices if d[1] != "char" or (d[2], d[3]) not in safe]
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


def judge_seccomp(
    outcome: RunOutcome,
    verdict: Verdict,
    profile_sha256: str,
    host: tuple[HostProcess, ...] = (),
) -> None:
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
    verdict.check(len(attempts) >= SECCOMP_ATTEMPTS, f"only {len(attempts)} calls made")
    verdict.check("io_uring_setup" in attempts, "io_uring_setup was not tried")
    if not lane_terms(receipt).kernel_is_host:
        judge_seccomp_in_gvisor(verdict, report, attempts, host)
        return
    verdict.check(report.get("seccomp") == "2", f"seccomp mode {report.get('seccomp')}")
    through = {
        name: result for name, result in attempts.items() if str(result) not in SECCOMP_REFUSALS
    }
    if verdict.check(not through, f"not stopped by the filter: {through}"):
        verdict.saw(
            "program",
            f"{arch}; seccomp filter mode; {len(attempts)} calls all refused "
            f"({counts(attempts.values())}): io_uring_setup {attempts.get('io_uring_setup')}, "
            + ", ".join(sorted(name for name in attempts if name != "io_uring_setup")),
        )
