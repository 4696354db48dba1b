"""The host's view of a running box's processes: who sits in its cgroup and under
what confinement, from `/proc/<pid>/status` (this machine only).

Under runc these are the program's own processes. Under gVisor they are gVisor's:
`runsc-gofer`, `runsc-sandbox` (the Sentry) and, on the ptrace platform, stub
processes without a command line that hold the program's address spaces, traced
by the Sentry. A process of any other kind in a gVisor box's cgroup would be
running on the host kernel directly.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass

from pybox._adapters.cgroups import CGROUP_ROOT, locate

ROLE_GOFER = "gofer"
ROLE_SENTRY = "sentry"
ROLE_STUB = "stub"
ROLE_OTHER = "other"
# How long `runsc ps` may take to answer.
SENTRY_PS_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class HostProcess:
    """One host process in a box's cgroup, as the host kernel reports it."""

    pid: int
    role: str
    command: str
    uid: int | None
    seccomp: str | None
    no_new_privs: str | None
    cap_eff: str | None
    threads: int | None


def _status(pid: int) -> dict[str, str]:
    fields: dict[str, str] = {}
    with open(f"/proc/{pid}/status", encoding="utf-8", errors="replace") as handle:
        for line in handle:
            key, _, value = line.partition(":")
            fields[key] = value.strip()
    return fields


def _command(pid: int) -> str:
    with open(f"/proc/{pid}/cmdline", "rb") as handle:
        argv = handle.read().split(b"\0")
    return argv[0].decode("utf-8", "replace") if argv else ""


def _role(command: str, parent_role: str | None) -> str:
    if command == "runsc-gofer":
        return ROLE_GOFER
    if command == "runsc-sandbox":
        return ROLE_SENTRY
    if not command and parent_role in (ROLE_SENTRY, ROLE_STUB):
        return ROLE_STUB
    return ROLE_OTHER


def _cgroup_procs(container_id: str, root: str) -> list[int]:
    location = locate(container_id, "", root)
    if location is None:
        return []
    directory = os.path.dirname(location.files["pids_current"])
    try:
        with open(os.path.join(directory, "cgroup.procs"), encoding="ascii") as handle:
            return sorted(int(line) for line in handle if line.strip())
    except (OSError, ValueError):
        return []


def box_processes(container_id: str, root: str = CGROUP_ROOT) -> tuple[HostProcess, ...]:
    """Every host process in the box's cgroup now (empty: no cgroup, or the box is gone)."""
    seen: dict[int, tuple[dict[str, str], str]] = {}
    for pid in _cgroup_procs(container_id, root):
        try:
            seen[pid] = (_status(pid), _command(pid))
        except OSError:
            continue  # gone meanwhile
    roles: dict[int, str] = {}

    def role_of(pid: int, depth: int = 0) -> str | None:
        if pid not in seen or depth > len(seen):
            return None
        if pid not in roles:
            status, command = seen[pid]
            parent = int(status.get("PPid", "0") or 0)
            roles[pid] = _role(command, role_of(parent, depth + 1))
        return roles[pid]

    found: list[HostProcess] = []
    for pid, (status, command) in seen.items():
        uid = status.get("Uid", "").split()
        threads = status.get("Threads", "")
        found.append(
            HostProcess(
                pid=pid,
                role=role_of(pid) or ROLE_OTHER,
                command=command,
                uid=int(uid[0]) if uid else None,
                seccomp=status.get("Seccomp"),
                no_new_privs=status.get("NoNewPrivs"),
                cap_eff=status.get("CapEff"),
                threads=int(threads) if threads.isdigit() else None,
            )
        )
    return tuple(found)


def _runsc_root(pid: int) -> str | None:
    with open(f"/proc/{pid}/cmdline", "rb") as handle:
        argv = handle.read().decode("utf-8", "replace").split("\0")
    for arg in argv:
        if arg.startswith("--root="):
            return arg.removeprefix("--root=")
    return None


def sentry_process_ids(
    container_id: str, runsc_path: str, root: str = CGROUP_ROOT
) -> tuple[int, ...] | None:
    """The program's processes as gVisor's Sentry reports them (`runsc ps`), from the
    host: the host cannot count them itself (the ptrace platform pools its stub
    processes). None when there is no Sentry, or it does not answer."""
    sentries = [p for p in box_processes(container_id, root) if p.role == ROLE_SENTRY]
    if len(sentries) != 1 or not runsc_path:
        return None
    try:
        state_root = _runsc_root(sentries[0].pid)
    except OSError:
        return None
    if state_root is None:
        return None
    try:
        answer = subprocess.run(
            [runsc_path, f"--root={state_root}", "ps", "--format=json", container_id],
            capture_output=True,
            timeout=SENTRY_PS_TIMEOUT_S,
            check=False,
        )
        pids = json.loads(answer.stdout) if answer.returncode == 0 else None
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    if not isinstance(pids, list) or not all(isinstance(pid, int) for pid in pids):
        return None
    return tuple(pids)
