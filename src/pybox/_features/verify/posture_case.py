"""The posture case of `pybox verify`: boxes weakened on purpose, refused before start.

`WEAKENINGS` asks, one hardening field at a time, for a box weaker than the
posture: the field removed where the engine's default is weaker, otherwise
set to a weaker value. `WeakenedCreateEngine` is the narrow hook that makes
the request: it wraps the real engine and changes only the create body. It
is used only by `pybox verify`; no front end, API or option can reach it.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pybox._boxes.cleanup import remove_and_confirm
from pybox._boxes.record import RunOutcome
from pybox._core.errors import PyboxError
from pybox._core.limits import MIB
from pybox._core.receipt import Status
from pybox._core.seal import SealTranslation
from pybox._core.seccomp import SECCOMP_PREFIX
from pybox._engine import AttachStream, Engine, EngineEndpoint, JSONObject
from pybox._engine.interface import ARCHIVE_MAX_BYTES, SealedBoxes
from pybox._features.verify.verdict import Verdict

_REMOVE = object()
IO_URING_CALLS = ("io_uring_setup", "io_uring_enter", "io_uring_register")
HOST_DIR = "{host_dir}"  # replaced by an empty folder that verify made on the host
DONOR = "{donor}"  # replaced by a never-started box of the same run, made for this
SECCOMP = "{seccomp}"  # replaced by pybox's own seccomp option, from the create body
# Replaced by a profile that is pybox's with io_uring allowed again: a profile
# that is almost right must be refused like a missing one.
SECCOMP_IO_URING = "{seccomp_io_uring}"


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
        "HostConfig.SecurityOpt",
        "pybox's seccomp profile left out (the engine's default)",
        ["no-new-privileges"],
    ),
    _w(
        "HostConfig.SecurityOpt",
        "a seccomp profile that allows io_uring",
        ["no-new-privileges", SECCOMP_IO_URING],
    ),
    _w(
        "HostConfig.SecurityOpt",
        "AppArmor unconfined",
        ["no-new-privileges", SECCOMP, "apparmor=unconfined"],
    ),
    _w("HostConfig.SecurityOpt", "no-new-privileges left out", [SECCOMP]),
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


def seccomp_names(body: JSONObject) -> dict[str, str]:
    """The placeholders for pybox's own seccomp option, and for one that allows io_uring."""
    options = (body.get("HostConfig") or {}).get("SecurityOpt") or []
    own = next((o for o in options if str(o).startswith(SECCOMP_PREFIX)), "")
    profile = json.loads(own[len(SECCOMP_PREFIX) :]) if own else {"syscalls": []}
    profile["syscalls"].append(
        {"names": list(IO_URING_CALLS), "action": "SCMP_ACT_ALLOW", "comment": "verify"}
    )
    return {
        SECCOMP: own,
        SECCOMP_IO_URING: SECCOMP_PREFIX + json.dumps(profile, separators=(",", ":")),
    }


def _refused(what: str) -> PyboxError:
    return PyboxError(f"verify's posture engine does not {what}")


class WeakenedCreateEngine(SealedBoxes):
    """The real engine, except that each create asks for a weakened box.

    For the posture case only: it records whether the box was ever attached or
    started, and the engine's own state of the box just before its removal.
    """

    def __init__(self, engine: Engine, host_dir: str) -> None:
        self._engine = engine
        self._host_dir = host_dir
        self.weakening: Weakening | None = None
        self.donor_id: str | None = None
        self.created = False
        self.started = False
        self.attached = False
        self.state_before_removal: str | None = None

    def reset(self, weakening: Weakening) -> None:
        self.weakening = weakening
        self.created = self.started = self.attached = False
        self.state_before_removal = None

    @property
    def endpoint(self) -> EngineEndpoint:
        return self._engine.endpoint

    @property
    def name(self) -> str:
        return self._engine.name

    def cgroup_path(self, container_id: str) -> str | None:
        return self._engine.cgroup_path(container_id)

    @property
    def seal(self) -> SealTranslation:
        return self._engine.seal

    @property
    def stdin_keeper(self) -> bool:
        return self._engine.stdin_keeper

    @property
    def commit_how(self) -> str:
        return self._engine.commit_how

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
        names = {HOST_DIR: self._host_dir, DONOR: f"{name}-donor", **seccomp_names(body)}
        if self.weakening.needs_donor:
            # A box of the same run, never started, for the weakening to point at.
            self.donor_id = self._engine.create_container(names[DONOR], body)
        container_id = self._engine.create_container(name, weaken(body, self.weakening, names))
        self.created = True
        return container_id

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

    # The posture case only runs boxes: building or moving images is refused.

    def import_image(
        self, tar_chunks: Iterable[bytes], repo: str, tag: str, changes: list[str]
    ) -> str:
        raise _refused("import images")

    def remove_image(self, reference: str) -> bool:
        raise _refused("remove images")

    def put_archive(self, container_id: str, path: str, tar_bytes: bytes) -> None:
        raise _refused("upload archives")

    def get_archive(
        self,
        container_id: str,
        path: str,
        *,
        max_bytes: int = ARCHIVE_MAX_BYTES,
        timeout_s: float = 300.0,
    ) -> bytes:
        raise _refused("read archives")

    def exec_create(self, container_id: str, argv: list[str], user: str) -> str:
        raise _refused("exec")

    def exec_start(self, exec_id: str) -> AttachStream:
        raise _refused("exec")

    def exec_exit_code(self, exec_id: str) -> int | None:
        raise _refused("exec")

    def connect_network(self, network: str, container_id: str) -> None:
        raise _refused("connect networks")

    def disconnect_network(self, network: str, container_id: str) -> None:
        raise _refused("disconnect networks")

    def commit(self, container_id: str, repo: str, tag: str, config: JSONObject) -> str:
        raise _refused("commit images")

    def tag_image(self, reference: str, repo: str, tag: str) -> None:
        raise _refused("tag images")

    def push_image(self, repo: str, tag: str) -> str:
        raise _refused("push images")

    def pull_image(self, repo: str, digest: str, platform: str) -> None:
        raise _refused("pull images")

    def discard_donor(self) -> bool:
        donor, self.donor_id = self.donor_id, None
        return donor is None or remove_and_confirm(self._engine, donor)


def judge_weakened(
    outcome: RunOutcome, verdict: Verdict, weakening: Weakening, hook: WeakenedCreateEngine
) -> bool:
    receipt = outcome.receipt
    fields = [m.field for m in receipt.observed_by_engine.posture_mismatches]
    # A backend may read some of Docker's fields back under other names (Podman's).
    named = hook.seal.read_back_as(weakening.field)
    label = f"{weakening.field} ({weakening.how})"
    return all(
        (
            verdict.check(
                receipt.status is Status.SANDBOX_ERROR and bool(named & set(fields)),
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
