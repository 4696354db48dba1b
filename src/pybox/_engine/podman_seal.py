"""The Podman backend's translations of a sealed box: Docker's, with every difference.

Podman (4.3) answers the compatible inspect with some fields in its own form,
some not at all, and keeps others only in its own inspect answer (which
`PodmanEngine` puts under `"Libpod"`). Each entry of `MAPPINGS` replaces one
of the Docker translation's requirements (`pybox._engine.docker_seal`) with
what Podman must show for the same box; a field not listed is read back
exactly as on Docker. Its create request is Docker's body in Podman's own
form (`pybox._engine.specgen`). `tests/unit/test_posture_podman.py` pins each
mapping with Podman's recorded answer, and docs/engines.md lists them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pybox._core.seal import BoxSpec, Check, Requirement
from pybox._core.seccomp import security_opt_view
from pybox._engine.docker_seal import DOCKER_SEAL, docker_requirements, tmpfs_map

LIBPOD = "Libpod"
# Sent explicitly to Podman (its default is above what its runtime may set).
PODMAN_NPROC = 16384


def _libpod(*path: str) -> tuple[str, ...]:
    return (LIBPOD, *path)


def podman_tmpfs_options(options: str, uid: int) -> str:
    """Docker's tmpfs options as Podman shows them: `uid=`/`gid=` of the box's own
    user become `U`; Podman adds `rprivate`. pybox sends `notmpcopyup`, which Podman
    shows as the absence of `tmpcopyup` (the image's files copied in)."""
    parts = [p for p in options.split(",") if p and not p.startswith(("uid=", "gid="))]
    if f"uid={uid}" in options.split(","):
        parts.append("U")
    return ",".join([*parts, "rprivate"])


def tmpfs_view(value: Any, uid: int | None = None) -> Any:
    """A tmpfs map compared by each path's set of options (Podman reorders them).

    Once the box has started, Podman shows its `U` as the owner it resolved:
    `uid=<uid>,gid=<uid>`; with the box's own uid given, that pair reads as `U`."""
    if not isinstance(value, Mapping):
        return value
    shown = {}
    for path, options in value.items():
        parts = set(str(options).split(","))
        owner = {f"uid={uid}", f"gid={uid}"}
        if uid is not None and owner <= parts:
            parts = (parts - owner) | {"U"}
        shown[path] = sorted(parts)
    return shown


def ulimits_view(value: Any) -> Any:
    """Ulimits by name, sorted (Podman says RLIMIT_NOFILE where Docker says nofile)."""
    if not isinstance(value, list):
        return value
    shown = []
    for item in value:
        if not isinstance(item, Mapping):
            return value
        name = str(item.get("Name", "")).lower().removeprefix("rlimit_")
        shown.append((name, item.get("Soft"), item.get("Hard")))
    return sorted(shown)


@dataclass(frozen=True)
class BoxFacts:
    """What the mappings need of a box: its user's uid and its tmpfs mounts."""

    uid: int
    tmpfs: tuple[tuple[str, str], ...]


def box_facts(spec: BoxSpec) -> BoxFacts:
    uid = int(spec.user.split(":", 1)[0])
    return BoxFacts(uid, tuple(tmpfs_map(spec.writable).items()))


Mapping_ = Callable[[BoxFacts, Requirement], tuple[Requirement, ...]]


def _replace(
    path: tuple[str, ...],
    expected: Any,
    why: str,
    check: Check = Check.EQUAL,
    view: Callable[[Any], Any] | None = None,
) -> Mapping_:
    def mapped(spec: BoxFacts, docker: Requirement) -> tuple[Requirement, ...]:
        return (Requirement(path, expected, f"{docker.why}; Podman: {why}", check, view=view),)

    return mapped


def _tmpfs(spec: BoxFacts, docker: Requirement) -> tuple[Requirement, ...]:
    expected = {path: podman_tmpfs_options(o, spec.uid) for path, o in spec.tmpfs}
    return (
        Requirement(
            ("HostConfig", "Tmpfs"),
            expected,
            f"{docker.why}; Podman: uid/gid as U (chown to the box's user), no copy-up, "
            "rprivate, and no /run or /var/tmp tmpfs of its own; once started, U shows as "
            "the box's uid and gid",
            view=lambda value: tmpfs_view(value, spec.uid),
        ),
    )


def _cap_drop(spec: BoxFacts, docker: Requirement) -> tuple[Requirement, ...]:
    why = (
        f"{docker.why}; Podman lists its default set under CapDrop, so its own "
        "answer's bounding and effective sets must be empty"
    )
    return (
        Requirement(_libpod("BoundingCaps"), [], why, Check.EMPTY),
        Requirement(_libpod("EffectiveCaps"), [], why, Check.EMPTY),
        Requirement(_libpod("HostConfig", "CapAdd"), [], why, Check.EMPTY),
    )


def seccomp_file_view(value: Any) -> Any:
    """SecurityOpt with Podman's `seccomp=<dir>/seccomp-<sha256>.json` shown as
    `seccomp=sha256:<sha256>`, as Docker's profile text is (the adapter writes the
    file by its content's hash and checks it before create)."""
    if not isinstance(value, list):
        return value
    shown = []
    for option in value:
        text = str(option)
        name = text.rsplit("/", 1)[-1]
        if text.startswith("seccomp=/") and name.startswith("seccomp-") and name.endswith(".json"):
            digest = name[len("seccomp-") : -len(".json")]
            if len(digest) == 64 and all(c in "0123456789abcdef" for c in digest):
                shown.append(f"seccomp=sha256:{digest}")
                continue
        shown.append(security_opt_view([option])[0])
    return shown


def _security_opt(spec: BoxFacts, docker: Requirement) -> tuple[Requirement, ...]:
    why = (
        f"{docker.why}; Podman shows the profile as the file it was read from "
        "(content-addressed), and no unmask= or label=disable"
    )
    return (
        Requirement(("HostConfig", "SecurityOpt"), docker.expected, why, view=seccomp_file_view),
        Requirement(
            _libpod("HostConfig", "SecurityOpt"), docker.expected, why, view=seccomp_file_view
        ),
    )


def _ulimits(spec: BoxFacts, docker: Requirement) -> tuple[Requirement, ...]:
    expected = [*docker.expected, {"Name": "nproc", "Soft": PODMAN_NPROC, "Hard": PODMAN_NPROC}]
    return (
        Requirement(
            ("HostConfig", "Ulimits"),
            expected,
            f"{docker.why}; Podman: RLIMIT_ names, and an explicit RLIMIT_NPROC {PODMAN_NPROC} "
            "(its default is more than the runtime may set; the processes cap bites first)",
            view=ulimits_view,
        ),
    )


def _log_config(spec: BoxFacts, docker: Requirement) -> tuple[Requirement, ...]:
    why = f"{docker.why}; Podman adds empty Path, Tag and Size"
    return (
        Requirement(("HostConfig", "LogConfig", "Type"), "none", why),
        Requirement(("HostConfig", "LogConfig", "Config"), {}, why, Check.EMPTY),
    )


def _runtime(spec: BoxFacts, docker: Requirement) -> tuple[Requirement, ...]:
    return (
        Requirement(
            _libpod("OCIRuntime"),
            docker.expected,
            f"{docker.why}; Podman's compatible answer always says 'oci', its own names it",
        ),
    )


_NOT_REPORTED = "Podman's answers do not carry this field"
# Measured on Podman 4.3.1: a box on a network of its own (egress `packages` or
# `open`) reads back with NetworkMode 'bridge' in both answers, the network
# named only under NetworkSettings.Networks.
_OWN_NETWORK = "a box on a network of its own reads as 'bridge', the network named"


def _network_keys(value: Any) -> Any:
    return sorted(value) if isinstance(value, Mapping) else value


def _network_disabled(_facts: BoxFacts, docker: Requirement) -> tuple[Requirement, ...]:
    if docker.expected is True:
        why = f"{docker.why}; Podman: {_NOT_REPORTED} (null); its own answer's network mode is none"
        return (Requirement(_libpod("HostConfig", "NetworkMode"), "none", why),)
    why = f"{docker.why}; Podman: {_NOT_REPORTED} (null); {_OWN_NETWORK} in its own answer"
    return (Requirement(_libpod("HostConfig", "NetworkMode"), "bridge", why),)


def _network_mode(_facts: BoxFacts, docker: Requirement) -> tuple[Requirement, ...]:
    if docker.expected == "bridge":
        # A build box, on the engine's default network: its own answer names the same
        # mode (its default network, which its compatible API calls 'bridge').
        return (
            docker,
            Requirement(
                _libpod("HostConfig", "NetworkMode"),
                "bridge",
                f"{docker.why}; Podman: its own answer names the same mode",
            ),
        )
    if docker.expected == "none":
        return (docker,)
    why = f"{docker.why}; Podman: {_OWN_NETWORK} under NetworkSettings.Networks"
    return (
        Requirement(("HostConfig", "NetworkMode"), "bridge", why),
        Requirement(
            _libpod("NetworkSettings", "Networks"), [docker.expected], why, view=_network_keys
        ),
    )


def _annotations(_facts: BoxFacts, docker: Requirement) -> tuple[Requirement, ...]:
    why = (
        f"{docker.why}; Podman: its own answer lists them, with its record of its own "
        f"settings ({PODMAN_OWN_ANNOTATIONS}*, each also read back under its own field) "
        "and nothing else"
    )
    return (
        Requirement(
            _libpod("Config", "Annotations"), {}, why, Check.EMPTY, view=_foreign_annotations
        ),
    )


# Podman's record of settings it was given (privileged, init, seccomp...): each of
# those is read back under its own field too.
PODMAN_OWN_ANNOTATIONS = "io.podman.annotations."
# What Podman 4.3 writes on every container its own API makes (a sandbox's box,
# made through the keeper): who manages it, when it was made, the image's stop
# signal. No runtime reads them (crun reads `run.oci.*`, gVisor `dev.gvisor.*`);
# measured in CI's Podman pass.
PODMAN_OWN_ANNOTATION_KEYS = frozenset(
    {"io.container.manager", "io.kubernetes.cri-o.Created", "org.opencontainers.image.stopSignal"}
)


def _foreign_annotations(value: Any) -> Any:
    """The annotations that are not Podman's record of its own settings."""
    if not isinstance(value, Mapping):
        return value
    return {
        k: v
        for k, v in value.items()
        if not str(k).startswith(PODMAN_OWN_ANNOTATIONS) and k not in PODMAN_OWN_ANNOTATION_KEYS
    }


MAPPINGS: dict[str, Mapping_] = {
    "Config.StdinOnce": _replace(
        ("Config", "StdinOnce"),
        False,
        "it reports no stdin-once (false), yet conmon closes the box's stdin when the "
        "attach connection that carried it ends, as Docker's stdin-once does (a box that "
        "must outlive it, a sandbox, gets a keeper process that holds one connection "
        "for the box's lifetime)",
        Check.EMPTY,
    ),
    "Config.AttachStdin": _replace(
        ("Config", "AttachStdin"), False, f"{_NOT_REPORTED} (reported false)", Check.EMPTY
    ),
    "Config.AttachStdout": _replace(
        ("Config", "AttachStdout"), False, f"{_NOT_REPORTED} (reported false)", Check.EMPTY
    ),
    "Config.AttachStderr": _replace(
        ("Config", "AttachStderr"), False, f"{_NOT_REPORTED} (reported false)", Check.EMPTY
    ),
    "Config.NetworkDisabled": _network_disabled,
    "HostConfig.NetworkMode": _network_mode,
    "HostConfig.Tmpfs": _tmpfs,
    "HostConfig.CapDrop": _cap_drop,
    "HostConfig.SecurityOpt": _security_opt,
    "HostConfig.PidMode": _replace(
        ("HostConfig", "PidMode"), "private", "reports its own namespace as 'private'"
    ),
    "HostConfig.UTSMode": _replace(
        ("HostConfig", "UTSMode"), "private", "reports its own namespace as 'private'"
    ),
    "HostConfig.IpcMode": _replace(
        ("HostConfig", "IpcMode"),
        "shareable",
        "4.3 reports a private IPC namespace as 'shareable' (a new namespace either way; "
        "/dev/shm is its own size-capped tmpfs, ShmSize read back)",
    ),
    "HostConfig.CgroupnsMode": _replace(
        _libpod("HostConfig", "CgroupMode"),
        "private",
        "the compatible answer leaves it empty, its own answer names it",
    ),
    "HostConfig.Runtime": _runtime,
    "HostConfig.MaskedPaths": _replace(
        ("HostConfig", "MaskedPaths"),
        [],
        f"{_NOT_REPORTED}: it masks its default list (a superset of pybox's) unless the box "
        "is privileged or has unmask= (both read back)",
        Check.EMPTY,
    ),
    "HostConfig.ReadonlyPaths": _replace(
        ("HostConfig", "ReadonlyPaths"),
        [],
        f"{_NOT_REPORTED}: its default read-only list is a superset of pybox's unless the "
        "box is privileged or has unmask= (both read back)",
        Check.EMPTY,
    ),
    "HostConfig.Ulimits": _ulimits,
    "HostConfig.LogConfig": _log_config,
    "HostConfig.Annotations": _annotations,
}


def _mapped(facts: BoxFacts, table: tuple[Requirement, ...]) -> tuple[Requirement, ...]:
    mapped: list[Requirement] = []
    for requirement in table:
        mapping = MAPPINGS.get(requirement.name)
        mapped.extend((requirement,) if mapping is None else mapping(facts, requirement))
    return tuple(mapped)


def podman_requirements(spec: BoxSpec) -> tuple[Requirement, ...]:
    """The Docker translation's table with each of Podman's differences mapped."""
    return _mapped(box_facts(spec), docker_requirements(spec))


# The fields Podman's read-back checks in place of each Docker field MAPPINGS
# replaces by other paths (a field not listed is read back under its own name).
# `pybox verify`'s posture case accepts a refusal named by any of them.
READ_BACK_AS: dict[str, frozenset[str]] = {
    "Config.NetworkDisabled": frozenset({"Libpod.HostConfig.NetworkMode"}),
    "HostConfig.CapDrop": frozenset(
        {"Libpod.BoundingCaps", "Libpod.EffectiveCaps", "Libpod.HostConfig.CapAdd"}
    ),
    "HostConfig.SecurityOpt": frozenset(
        {"HostConfig.SecurityOpt", "Libpod.HostConfig.SecurityOpt"}
    ),
    "HostConfig.CgroupnsMode": frozenset({"Libpod.HostConfig.CgroupMode"}),
    "HostConfig.Runtime": frozenset({"Libpod.OCIRuntime"}),
    "HostConfig.LogConfig": frozenset({"HostConfig.LogConfig.Type", "HostConfig.LogConfig.Config"}),
    "HostConfig.Annotations": frozenset({"Libpod.Config.Annotations"}),
}


class PodmanSeal:
    """The Podman backend's translations (`pybox._core.seal.SealTranslation`).
    Its create request is Docker's body; `PodmanEngine` sends it in Podman's own
    form (`pybox._engine.specgen`)."""

    def requirements(self, spec: BoxSpec) -> tuple[Requirement, ...]:
        return podman_requirements(spec)

    def create_request(self, spec: BoxSpec) -> dict[str, Any]:
        return DOCKER_SEAL.create_request(spec)

    def read_back_as(self, field: str) -> frozenset[str]:
        return READ_BACK_AS.get(field, frozenset({field}))


PODMAN_SEAL = PodmanSeal()
