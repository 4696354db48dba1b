"""The build box's posture: the box pybox pip-installs into images.

It is a sealed box (`pybox._core.seal`) with the differences a build needs, each stated
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

`build_box` says it in box words (`pybox._core.seal`); each backend translates
and reads it back as it does a run box.

Everything else is a run box's: pybox's seccomp profile, the AppArmor
requirement, no host path or volume, no devices, private namespaces, no logs.
"""

from __future__ import annotations

from dataclasses import dataclass

from pybox._core.seal import BoxNetwork, BoxSpec, Writable
from pybox._core.seccomp import Confinement

BUILD_HOSTNAME = "pybox-build"
BUILD_USER = "0:0"
# Stated, not the engine's default: Podman's (1048576) is more than its runtime may
# set on some hosts, and Docker's is whatever its daemon inherited.
BUILD_OPEN_FILES = 4096
BUILD_ULIMITS = (("nofile", BUILD_OPEN_FILES, BUILD_OPEN_FILES), ("core", 0, 0))


@dataclass(frozen=True)
class BuildBoxSpec:
    """Everything that decides what one build box is."""

    image_id: str
    entrypoint: tuple[str, ...]
    env: tuple[str, ...]
    labels: tuple[tuple[str, str], ...]
    network: str
    tmp_bytes: int
    memory_bytes: int
    cpus: int
    pids: int
    confinement: Confinement
    runtime: str = "runc"


def build_box(spec: BuildBoxSpec) -> BoxSpec:
    """The build box in box words: the one posture every backend translates."""
    return BoxSpec(
        image=spec.image_id,
        image_why="the recorded stdlib image",
        user=BUILD_USER,
        user_why="root in the box, to install; no capability",
        entrypoint=spec.entrypoint,
        entrypoint_why="a sleep that ends the box by itself",
        env=spec.env,
        workdir="/",
        hostname=BUILD_HOSTNAME,
        labels=spec.labels,
        confinement=spec.confinement,
        runtime=spec.runtime,
        memory_bytes=spec.memory_bytes,
        nano_cpus=spec.cpus * 1_000_000_000,
        pids=spec.pids,
        ulimits=BUILD_ULIMITS,
        # Writable root (it becomes the image) and a size-capped /tmp.
        readonly_root=False,
        writable=(Writable("/tmp", spec.tmp_bytes, "1777"),),
        writable_why="a size-capped /tmp",
        # The bridge, detached before start, attached for the install only.
        network=BoxNetwork(spec.network, "the network pip's install step is attached to"),
    )
