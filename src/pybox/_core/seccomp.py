"""pybox's own seccomp profile and the box's AppArmor requirement (pure values).

The profile is `seccomp.json` next to this file: the engine's default
allow-list minus the calls in `DENIED`. pybox sends it in every create body
(`SecurityOpt: seccomp=<json>`) rather than trusting the daemon's default,
which differs between engine versions (Docker 20.10 to 24 allow io_uring) and
which an operator can set to `unconfined` daemon-wide. The engine keeps the
profile text in `HostConfig.SecurityOpt`; the posture read-back compares it by
the SHA-256 of its canonical JSON, so a dropped, swapped or `unconfined`
profile stops the run before start.

AppArmor cannot be sent the same way (a profile must be loaded into the host
kernel first), so pybox requires the engine's own default profile wherever the
engine's host has AppArmor, and states plainly when it has none.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

PROFILE_NAME = "pybox"
SECCOMP_PREFIX = "seccomp="
APPARMOR_PREFIX = "apparmor="
UNCONFINED = "unconfined"
ENGINE_APPARMOR_PROFILE = "docker-default"
APPARMOR_ENABLED_PATH = "/sys/module/apparmor/parameters/enabled"

# What the profile denies, and why a sandboxed Python program never needs it.
# Every call named here must be absent from the profile's allow rules (a unit
# test checks it). Denied calls fail with EPERM (the profile's default errno),
# except clone3 (ENOSYS, see below).
_WHY_IO_URING = (
    "io_uring: a large, fast-changing kernel interface with a long record of "
    "privilege-escalation bugs; Python's standard library never uses it"
)
_WHY_MOUNT = "mount family: a box never changes its mounts (it has no CAP_SYS_ADMIN either)"
_WHY_NAMESPACE = "new or joined namespaces: a box stays in the namespaces the engine made"
_WHY_KEYS = "kernel keyrings are not namespaced: keys could leak between boxes and the host"
_WHY_TRACE = (
    "reading or changing another process: nothing in a box debugs another "
    "process, and the bootstrap (PID 1) must stay out of the program's reach"
)
_WHY_HANDLES = "file handles bypass path lookup (the 'shocker' escape used open_by_handle_at)"
_WHY_TIME = "the host's clock is shared by every container: a box never sets or tunes it"
_WHY_HOST = "changes the whole host, never one box"
_WHY_PROBE = "kernel tracing and BPF: a large attack surface that exposes kernel state"

DENIED: Mapping[str, str] = {
    "io_uring_setup": _WHY_IO_URING,
    "io_uring_enter": _WHY_IO_URING,
    "io_uring_register": _WHY_IO_URING,
    "userfaultfd": "lets a program stall the kernel mid-copy, the classic way to win kernel races",
    "keyctl": _WHY_KEYS,
    "add_key": _WHY_KEYS,
    "request_key": _WHY_KEYS,
    "bpf": _WHY_PROBE,
    "perf_event_open": _WHY_PROBE,
    "lookup_dcookie": _WHY_PROBE,
    "fanotify_init": "watches whole filesystems, including what other processes open",
    "fanotify_mark": "needs an fanotify descriptor, which fanotify_init cannot make here",
    "ptrace": _WHY_TRACE,
    "process_vm_readv": _WHY_TRACE,
    "process_vm_writev": _WHY_TRACE,
    "process_madvise": _WHY_TRACE,
    "pidfd_getfd": _WHY_TRACE,
    "kcmp": _WHY_TRACE,
    "mount": _WHY_MOUNT,
    "umount": _WHY_MOUNT,
    "umount2": _WHY_MOUNT,
    "mount_setattr": _WHY_MOUNT,
    "move_mount": _WHY_MOUNT,
    "open_tree": _WHY_MOUNT,
    "fsopen": _WHY_MOUNT,
    "fsconfig": _WHY_MOUNT,
    "fsmount": _WHY_MOUNT,
    "fspick": _WHY_MOUNT,
    "pivot_root": _WHY_MOUNT,
    "chroot": _WHY_MOUNT,
    "unshare": _WHY_NAMESPACE,
    "setns": _WHY_NAMESPACE,
    "clone3": "its flags are in memory where seccomp cannot filter them: ENOSYS makes the C "
    "library fall back to clone, whose namespace flags are filtered",
    "open_by_handle_at": _WHY_HANDLES,
    "name_to_handle_at": _WHY_HANDLES,
    "quotactl": _WHY_HOST,
    "quotactl_fd": _WHY_HOST,
    "acct": _WHY_HOST,
    "swapon": _WHY_HOST,
    "swapoff": _WHY_HOST,
    "reboot": _WHY_HOST,
    "kexec_load": _WHY_HOST,
    "kexec_file_load": _WHY_HOST,
    "init_module": _WHY_HOST,
    "finit_module": _WHY_HOST,
    "delete_module": _WHY_HOST,
    "syslog": "reads and clears the host kernel's log",
    "vhangup": "hangs up the terminal of other sessions",
    "sethostname": _WHY_HOST,
    "setdomainname": _WHY_HOST,
    "iopl": "raw I/O port access to the host's hardware",
    "ioperm": "raw I/O port access to the host's hardware",
    "clock_settime": _WHY_TIME,
    "clock_settime64": _WHY_TIME,
    "settimeofday": _WHY_TIME,
    "stime": _WHY_TIME,
    "adjtimex": _WHY_TIME,
    "clock_adjtime": _WHY_TIME,
    "clock_adjtime64": _WHY_TIME,
    "memfd_secret": "memory hidden even from the kernel's own checks; young code no program needs",
    "get_mempolicy": "NUMA placement on the host's memory nodes",
    "set_mempolicy": "NUMA placement on the host's memory nodes",
    "mbind": "NUMA placement on the host's memory nodes",
    "set_mempolicy_home_node": "NUMA placement on the host's memory nodes",
}

# Calls the engine's default profile allows for every container (Docker 20.10
# to 24), which pybox's profile no longer allows.
REMOVED_FROM_ENGINE_DEFAULT = (
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "adjtimex",
    "clock_adjtime",
    "clock_adjtime64",
    "name_to_handle_at",
    "fanotify_mark",
    "memfd_secret",
)


def canonical(profile_text: str) -> str:
    """The profile as compact JSON: what pybox sends, and what it hashes."""
    return json.dumps(json.loads(profile_text), separators=(",", ":"), sort_keys=True)


def profile_sha256(profile_text: str) -> str:
    return "sha256:" + hashlib.sha256(canonical(profile_text).encode("utf-8")).hexdigest()


def allowed_names(profile: Mapping[str, Any]) -> set[str]:
    """Every call some rule of `profile` allows (on some architecture or argument)."""
    return {
        name
        for rule in profile.get("syscalls") or []
        if rule.get("action") == "SCMP_ACT_ALLOW"
        for name in rule.get("names") or []
    }


def _option_view(option: Any) -> Any:
    """A seccomp option by digest: the profile text is kilobytes of JSON."""
    if not isinstance(option, str) or not option.startswith(SECCOMP_PREFIX):
        return option
    payload = option[len(SECCOMP_PREFIX) :]
    if payload == UNCONFINED:
        return option
    try:
        return SECCOMP_PREFIX + profile_sha256(payload)
    except ValueError:
        digest = hashlib.sha256(payload.encode("utf-8", "replace")).hexdigest()
        return f"{SECCOMP_PREFIX}<not JSON, sha256:{digest}>"


def security_opt_view(value: Any) -> Any:
    """`HostConfig.SecurityOpt` as compared and shown: each seccomp profile by its hash."""
    if isinstance(value, list):
        return [_option_view(option) for option in value]
    return value


@dataclass(frozen=True)
class Confinement:
    """The seccomp profile a box is sent, and the AppArmor profile it must show.

    `apparmor_profile` is None when the engine's host has no AppArmor: then no
    profile is required, `unconfined` is still refused, and `apparmor_basis`
    says so in the receipt.
    """

    seccomp_profile: str  # canonical JSON text
    apparmor_profile: str | None
    apparmor_basis: str

    def __post_init__(self) -> None:
        if canonical(self.seccomp_profile) != self.seccomp_profile:
            raise ValueError("the seccomp profile must be canonical JSON (see canonical())")
        if self.apparmor_profile == UNCONFINED:
            raise ValueError("a box is never AppArmor-unconfined")

    @property
    def seccomp_sha256(self) -> str:
        return profile_sha256(self.seccomp_profile)

    def security_opt(self) -> list[str]:
        return ["no-new-privileges", SECCOMP_PREFIX + self.seccomp_profile]


def apparmor_requirement(
    engine_security_options: Iterable[Any], host_enabled: bool | None, host_checked: str
) -> tuple[str | None, str]:
    """(the AppArmor profile a box must show, or None; the basis, in words).

    The engine lists `name=apparmor` in its SecurityOptions when it confines
    containers with AppArmor. `host_enabled` is what `APPARMOR_ENABLED_PATH`
    says on the engine's host when pybox can read it (None when it cannot:
    the engine runs in a VM, or the file is absent). `host_checked` says which.
    """
    engine_has = any(str(option).startswith("name=apparmor") for option in engine_security_options)
    if engine_has or host_enabled:
        sources = []
        if engine_has:
            sources.append("the engine lists name=apparmor in its SecurityOptions")
        if host_enabled:
            sources.append(f"{APPARMOR_ENABLED_PATH} is Y")
        return (
            ENGINE_APPARMOR_PROFILE,
            f"AppArmor is enabled ({'; '.join(sources)}): the engine's "
            f"{ENGINE_APPARMOR_PROFILE} profile is required",
        )
    return (
        None,
        f"no AppArmor on the engine's host: the engine lists no name=apparmor and "
        f"{host_checked}; no profile is applied, and 'unconfined' is still refused",
    )
