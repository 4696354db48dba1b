"""A Docker Engine API create body, said in Podman's own terms (its "specgen").

Podman 4.3's Docker-compatible create drops fields pybox relies on: it ignores
`HostConfig.CgroupnsMode` (a box on cgroup v1 lands in the host's cgroup
namespace), adds writable tmpfs mounts on /run and /var/tmp to every read-only
container, reads a seccomp profile only as a path on the engine's machine, and
gives every box RLIMIT_NPROC 1048576, which the runtime may not set. Its own
API (`POST /libpod/containers/create`) expresses each of them, so pybox
translates its one create body here.

Every field of the body must be translated or be empty: anything else is a
refusal naming the field (`PodmanUnsupported`), never a box without it. Go's
decoder ignores unknown JSON fields silently, so nothing here is trusted
either: the box is read back before start like on Docker (see
`pybox._engine.podman_seal`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from pybox._core.errors import EngineCannotApply

SECCOMP_PREFIX = "seccomp="
UNCONFINED = "unconfined"
# Where Podman keeps the seccomp profile a box was created with, for its inspect
# answer's SecurityOpt (its own command line sets it the same way, from the same
# value as the profile path).
SECCOMP_ANNOTATION = "io.podman.annotations.seccomp"
# Podman's default RLIMIT_NPROC (1048576) is above what its runtime may set on
# many hosts ("error setting rlimit type 6: operation not permitted"); pybox
# sends one explicitly. The box's uid is its own, so this counts only the box,
# and it is far above the processes cap (4096 at most), which stays the one
# that bites (the kernel checks RLIMIT_NPROC first).
BOX_NPROC = 16384
# A network's name as Podman accepts it; these words name other namespaces.
NETWORK_NAME = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]*")
_NOT_A_NETWORK = {"host", "default", "slirp4netns", "pasta", "private", "ns", "container"}


class PodmanUnsupported(EngineCannotApply):
    """A field of the box Podman cannot be asked for: the box is refused before any
    call (like an engine refusing a create: no box exists)."""

    def __init__(self, field: str, value: Any, why: str, *, subject: str = "box") -> None:
        weaker = "run it weaker" if subject == "box" else "make it weaker"
        super().__init__(
            f"Podman cannot apply the {subject}'s {field}={value!r} ({why}); pybox refuses the "
            f"{subject} rather than {weaker}. Use Docker for this {subject}, or drop the setting.",
            status=400,
            engine_message=f"pybox's Podman adapter cannot apply {field} ({why})",
        )
        self.field = field


def _empty(value: Any) -> bool:
    return value in (None, False, 0, "", [], {})


def _namespace(mode: str, field: str) -> dict[str, str]:
    if mode in ("", "private"):
        return {"nsmode": "private"}
    if mode == "none" and field == "NetworkMode":
        return {"nsmode": "none"}
    if mode == "bridge" and field == "NetworkMode":
        return {"nsmode": "bridge"}
    raise PodmanUnsupported(f"HostConfig.{field}", mode, "pybox translates only private modes")


def _network(mode: str) -> dict[str, Any]:
    """The box's network namespace, and the one network it joins when it names one
    (an egress network). Measured on Podman 4.3.1: such a box reads back with
    `NetworkMode: bridge` and the network under `NetworkSettings.Networks`
    (`pybox._engine.podman_seal`); a mode naming another namespace (host,
    container:, ns:, slirp4netns, pasta) is refused."""
    if mode in ("", "private", "none", "bridge"):
        return {"netns": _namespace(mode, "NetworkMode")}
    if mode in _NOT_A_NETWORK or not NETWORK_NAME.fullmatch(mode):
        raise PodmanUnsupported("HostConfig.NetworkMode", mode, "not a network of the box's own")
    return {"netns": {"nsmode": "bridge"}, "Networks": {mode: {}}}


def _tmpfs_mount(path: str, options: str, user: str) -> dict[str, Any]:
    """A tmpfs mount; `uid=`/`gid=` become Podman's `U` (chown to the box's user)."""
    parts = [part for part in options.split(",") if part]
    owners = {part.split("=", 1)[1] for part in parts if part.startswith(("uid=", "gid="))}
    kept = [part for part in parts if not part.startswith(("uid=", "gid="))]
    if owners:
        uid = user.split(":", 1)[0]
        gid = user.split(":", 1)[1] if ":" in user else uid
        if owners != {uid} or uid != gid:
            raise PodmanUnsupported(
                f"HostConfig.Tmpfs[{path}]",
                options,
                "Podman chowns a tmpfs only to the box's own user (its U option)",
            )
        kept.append("U")
    # Podman copies the image's files into a tmpfs unless told not to.
    kept.append("notmpcopyup")
    return {"destination": path, "type": "tmpfs", "source": "tmpfs", "options": kept}


def _ulimits(ulimits: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    limits = [
        {"type": str(u["Name"]), "soft": int(u["Soft"]), "hard": int(u["Hard"])} for u in ulimits
    ]
    if not any(limit["type"] == "nproc" for limit in limits):
        limits.append({"type": "nproc", "soft": BOX_NPROC, "hard": BOX_NPROC})
    return limits


def _security(options: list[str], profile_path: Callable[[str], str]) -> tuple[bool, str, str]:
    """no-new-privileges, the seccomp profile's path and the AppArmor profile."""
    no_new_privileges, path, apparmor = False, "", ""
    for option in options:
        if option == "no-new-privileges":
            no_new_privileges = True
        elif option.startswith("apparmor="):
            # Podman reports no AppArmor profile on a host without AppArmor, so an
            # `apparmor=unconfined` would read back as nothing: refused here instead.
            raise PodmanUnsupported("HostConfig.SecurityOpt", option, "pybox sends none")
        elif option.startswith(SECCOMP_PREFIX):
            payload = option[len(SECCOMP_PREFIX) :]
            path = payload if payload == UNCONFINED else profile_path(payload)
        else:
            raise PodmanUnsupported("HostConfig.SecurityOpt", option, "not translated for Podman")
    return no_new_privileges, path, apparmor


# Fields set in `specgen()` below; every other non-empty field is refused.
_CONFIG_FIELDS = {
    "Image", "User", "Entrypoint", "Cmd", "Env", "WorkingDir", "Hostname", "Labels",
    "Healthcheck", "OpenStdin", "Tty", "NetworkDisabled",
    # Docker client hints with no meaning in the Engine API's attach (pybox attaches
    # explicitly); StdinOnce: see podman_seal.
    "StdinOnce", "AttachStdin", "AttachStdout", "AttachStderr",
}  # fmt: skip
_HOST_FIELDS = {
    "NetworkMode", "ReadonlyRootfs", "Tmpfs", "ShmSize", "Privileged", "CapDrop",
    "CapAdd", "SecurityOpt", "PidMode", "IpcMode", "UTSMode", "CgroupnsMode",
    "CgroupParent", "Init", "Runtime", "Memory", "MemorySwap", "OomKillDisable",
    "NanoCpus", "PidsLimit", "Ulimits", "OomScoreAdj", "LogConfig", "AutoRemove",
    "RestartPolicy",
}  # fmt: skip


def needs_keeper(body: Mapping[str, Any]) -> bool:
    """A box whose stdin must outlive the attach connection that carried it (a
    sandbox): conmon closes a box's stdin when such a connection ends (it is never
    started with --leave-stdin-open), so a keeper holds one (`pybox._engine.keeper`)."""
    return bool(body.get("OpenStdin")) and body.get("StdinOnce") is False


def _refuse_what_podman_would_not_apply(body: Mapping[str, Any], host: Mapping[str, Any]) -> None:
    """Fields Podman would take and then run differently, without saying so."""
    network_none = str(host.get("NetworkMode") or "") == "none"
    if network_none != bool(body.get("NetworkDisabled")):
        # Podman has no switch apart from the network namespace: pybox's adapter
        # accepts "no network" only when both of Docker's fields say so.
        raise PodmanUnsupported(
            "NetworkDisabled",
            body.get("NetworkDisabled"),
            f"Podman has only the network namespace (NetworkMode {host.get('NetworkMode')!r})",
        )
    for field in ("MaskedPaths", "ReadonlyPaths"):
        if host.get(field) is not None:
            # Podman applies its own default lists; an explicit one (on Docker, [] is
            # none at all) would be dropped.
            raise PodmanUnsupported(
                f"HostConfig.{field}", host[field], "Podman applies its own default list"
            )


def specgen(
    name: str, body: Mapping[str, Any], profile_path: Callable[[str], str]
) -> dict[str, Any]:
    """Podman's create body for Docker's `body`; `profile_path` turns a seccomp
    profile's JSON into a path the engine can read (it checks the file)."""
    host: Mapping[str, Any] = body.get("HostConfig") or {}
    for key, value in body.items():
        if key != "HostConfig" and key not in _CONFIG_FIELDS and not _empty(value):
            raise PodmanUnsupported(key, value, "not translated for Podman")
    for key, value in host.items():
        if key not in _HOST_FIELDS and not _empty(value):
            raise PodmanUnsupported(f"HostConfig.{key}", value, "not translated for Podman")
    if body.get("Tty"):
        raise PodmanUnsupported("Tty", True, "pybox boxes use plain pipes")
    _refuse_what_podman_would_not_apply(body, host)
    user = str(body.get("User") or "")
    env = dict(item.split("=", 1) for item in body.get("Env") or [])
    no_new_privileges, seccomp_path, apparmor = _security(
        list(host.get("SecurityOpt") or []), profile_path
    )
    nano_cpus = int(host.get("NanoCpus") or 0)
    period = 100_000
    memory: dict[str, Any] = {}
    if host.get("Memory"):
        memory["limit"] = int(host["Memory"])
    if host.get("MemorySwap"):
        memory["swap"] = int(host["MemorySwap"])
    if host.get("OomKillDisable"):
        memory["disableOOMKiller"] = True
    resources: dict[str, Any] = {"memory": memory}
    if nano_cpus:
        resources["cpu"] = {"quota": nano_cpus * period // 1_000_000_000, "period": period}
    if host.get("PidsLimit"):
        resources["pids"] = {"limit": int(host["PidsLimit"])}
    restart = str((host.get("RestartPolicy") or {}).get("Name") or "no")
    on_bridge = str(host.get("NetworkMode") or "") == "bridge"
    spec: dict[str, Any] = {
        "name": name,
        "image": body["Image"],
        "entrypoint": list(body.get("Entrypoint") or []),
        "command": list(body.get("Cmd") or []),
        "env": env,
        # Only the body's environment (it already holds the image's): none of
        # Podman's defaults (`container=podman`, containers.conf's `TERM=xterm`).
        "unsetenvall": True,
        "user": user,
        # No /etc/passwd or /etc/group written on the host and bound into the box
        # for a uid the image does not list (Podman's default); as on Docker.
        "manage_password": False,
        "work_dir": body.get("WorkingDir") or "",
        "hostname": body.get("Hostname") or "",
        "labels": dict(body.get("Labels") or {}),
        # Exactly the body's (pybox's is `NONE`); none asked for is none sent, and
        # the read-back sees the image's (Podman's inspect: null).
        **({"healthconfig": body["Healthcheck"]} if body.get("Healthcheck") else {}),
        "stdin": bool(body.get("OpenStdin")),
        "terminal": False,
        **_network(str(host.get("NetworkMode") or "")),
        "pidns": _namespace(str(host.get("PidMode") or ""), "PidMode"),
        "ipcns": _namespace(str(host.get("IpcMode") or ""), "IpcMode"),
        "utsns": _namespace(str(host.get("UTSMode") or ""), "UTSMode"),
        "cgroupns": _namespace(str(host.get("CgroupnsMode") or ""), "CgroupnsMode"),
        "read_only_filesystem": bool(host.get("ReadonlyRootfs")),
        "read_write_tmpfs": False,
        "mounts": [
            _tmpfs_mount(path, options, user) for path, options in (host.get("Tmpfs") or {}).items()
        ],
        "shm_size": int(host.get("ShmSize") or 0),
        "privileged": bool(host.get("Privileged")),
        "cap_drop": list(host.get("CapDrop") or []),
        "cap_add": list(host.get("CapAdd") or []),
        "no_new_privileges": no_new_privileges,
        "seccomp_profile_path": seccomp_path,
        "cgroup_parent": host.get("CgroupParent") or "",
        "init": bool(host.get("Init")),
        "oci_runtime": host.get("Runtime") or "",
        "resource_limits": resources,
        "r_limits": _ulimits(list(host.get("Ulimits") or [])),
        "oom_score_adj": int(host.get("OomScoreAdj") or 0),
        "log_configuration": {"driver": (host.get("LogConfig") or {}).get("Type") or "none"},
        "remove": bool(host.get("AutoRemove")),
        "restart_policy": restart,
        # No host-written /etc/hosts in the box (Podman's names the host as
        # host.containers.internal); a resolv.conf only on the bridge, where the box
        # resolves names as on Docker's bridge (a build box's pip; Podman copies the
        # host's resolvers when its default network runs no DNS server of its own).
        "use_image_hosts": True,
        "use_image_resolve_conf": not on_bridge,
        "sysctl": {},
    }
    if apparmor:
        spec["apparmor_profile"] = apparmor
    if seccomp_path:
        spec["annotations"] = {SECCOMP_ANNOTATION: seccomp_path}
    return spec
