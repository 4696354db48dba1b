"""The build box's posture: the box pybox pip-installs into images, as a table.

It is the run box's table with the differences a build needs, each stated
here, and it is read back from the engine before the build box starts, like
every box pybox makes:

- it runs as root in its container (to install into /opt/venv), with every
  capability dropped and no-new-privileges;
- its root filesystem is writable (the packages are installed into it, then
  committed);
- it is created on the engine's bridge network, detached before start and
  attached only for the install step (the engine's view of its networks is
  checked at every step, see builds.py); so the engine also writes its
  /etc/hosts and resolver file, which pip needs to resolve the index;
- its caps are the build's (memory, CPU, processes, open files), not a run's.

On Podman the same table is read back with Podman's answers mapped
(`pybox._core.posture_podman.podman_build_requirements`), as a run box's is.

Everything else is a run box's: pybox's seccomp profile, the AppArmor
requirement, no host path or volume, no devices, private namespaces, no logs.
"""

from __future__ import annotations

from dataclasses import dataclass

from pybox._core.readback import (
    Check,
    Requirement,
    config_field,
    host_absent,
    host_field,
    sealed_host_requirements,
)
from pybox._core.seccomp import Confinement

BUILD_HOSTNAME = "pybox-build"
BUILD_USER = "0:0"
# Stated, not the engine's default: Podman's (1048576) is more than its runtime may
# set on some hosts, and Docker's is whatever its daemon inherited.
BUILD_OPEN_FILES = 4096
BUILD_ULIMITS = (
    {"Name": "nofile", "Soft": BUILD_OPEN_FILES, "Hard": BUILD_OPEN_FILES},
    {"Name": "core", "Soft": 0, "Hard": 0},
)


@dataclass(frozen=True)
class BuildBoxSpec:
    """Everything that decides what one build box is."""

    image_id: str
    entrypoint: tuple[str, ...]
    env: tuple[str, ...]
    labels: tuple[tuple[str, str], ...]
    network: str
    tmpfs: tuple[tuple[str, str], ...]
    memory_bytes: int
    cpus: int
    pids: int
    confinement: Confinement
    runtime: str = "runc"
    # The engine that makes it ("docker", "podman"): how its answers are read back.
    engine: str = "docker"


def build_requirements(spec: BuildBoxSpec) -> tuple[Requirement, ...]:
    """The whole posture of a build box. Its create body and read-back derive from it."""
    return (
        Requirement(("Image",), spec.image_id, "the recorded stdlib image", create_path=("Image",)),
        config_field("User", BUILD_USER, "root in the box, to install; no capability"),
        config_field("Entrypoint", list(spec.entrypoint), "a sleep that ends the box by itself"),
        config_field("Cmd", [], "nothing from the image runs", Check.EMPTY),
        config_field("Env", list(spec.env), "only the build's environment", Check.INCLUDES),
        config_field("WorkingDir", "/", "the build runs from the root"),
        config_field("Hostname", BUILD_HOSTNAME, "not the host's name"),
        config_field("Labels", dict(spec.labels), "a leftover can be found", Check.INCLUDES),
        config_field("Healthcheck", {"Test": ["NONE"]}, "nothing else execs inside the box"),
        config_field("ExposedPorts", {}, "no ports", Check.EMPTY),
        config_field("Volumes", {}, "no image volumes", Check.EMPTY),
        # Network: the bridge, detached before start, attached for the install only.
        host_field("NetworkMode", spec.network, "the network pip's install step is attached to"),
        host_field("PortBindings", {}, "no published ports", Check.EMPTY),
        host_field("PublishAllPorts", False, "no published ports", Check.EMPTY),
        host_absent("ExtraHosts", "no host entries"),
        host_absent("Dns", "the engine's resolvers only"),
        host_absent("Links", "no links to other containers"),
        # Filesystem: writable root (it becomes the image); nothing from the host.
        host_field("ReadonlyRootfs", False, "the packages are installed into it", Check.EMPTY),
        host_field("Tmpfs", dict(spec.tmpfs), "a size-capped /tmp"),
        *sealed_host_requirements(spec.confinement, spec.runtime, "the expected runtime"),
        # The build's own caps.
        host_field("Memory", spec.memory_bytes, "memory cap"),
        host_field("MemorySwap", spec.memory_bytes, "swap equal to memory: no swap"),
        host_field("OomKillDisable", False, "the kernel may end it over its memory", Check.EMPTY),
        host_field("NanoCpus", spec.cpus * 1_000_000_000, "CPU cap"),
        host_field("PidsLimit", spec.pids, "processes cap"),
        host_field("Ulimits", [dict(u) for u in BUILD_ULIMITS], "open files cap; no core dumps"),
        host_field("OomScoreAdj", 0, "no change to OOM priority", Check.EMPTY),
        host_field("LogConfig", {"Type": "none", "Config": {}}, "the engine keeps no logs"),
        host_field("AutoRemove", False, "pybox removes the box and confirms it", Check.EMPTY),
        host_field("RestartPolicy", {"Name": "no"}, "never restarted", Check.INCLUDES),
    )


def build_readback_requirements(spec: BuildBoxSpec) -> tuple[Requirement, ...]:
    """`build_requirements(spec)` as the spec's engine shows them (Podman: mapped)."""
    table = build_requirements(spec)
    if spec.engine != "podman":
        return table
    # Imported here: a Docker engine's builds do not pay for Podman's views.
    from pybox._core.posture_podman import podman_build_requirements

    return podman_build_requirements(spec, table)
