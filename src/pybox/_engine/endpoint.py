"""Where the engine's API socket is, and how pybox found it.

Docker first (`DOCKER_HOST`, its usual sockets), then Podman (`CONTAINER_HOST`,
rootful `/run/podman/podman.sock`, rootless `$XDG_RUNTIME_DIR/podman/podman.sock`)
when no Docker socket exists. `engine = "docker" | "podman"` (the config file,
`PYBOX_ENGINE` or `--engine`) looks only for that engine's sockets.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from pybox._core.errors import ConfigError, EngineUnavailable

ENGINES = ("auto", "docker", "podman")
ROOTFUL_PODMAN_SOCKET = "/run/podman/podman.sock"
START_PODMAN = "podman system service --time=0 unix://{socket} &"


@dataclass(frozen=True)
class EngineEndpoint:
    """An engine address and the reason pybox chose it (shown by `doctor` and receipts)."""

    socket_path: str
    found_by: str
    # The engine the socket belongs to, as far as its place says ("docker",
    # "podman"); the engine's own answer decides once connected.
    engine: str = "docker"

    @property
    def url(self) -> str:
        return f"unix://{self.socket_path}"


def docker_candidates(environ: Mapping[str, str]) -> list[tuple[str, str]]:
    candidates = [
        ("/var/run/docker.sock", "the default Docker socket"),
        ("/run/docker.sock", "the default Docker socket"),
    ]
    runtime_dir = environ.get("XDG_RUNTIME_DIR")
    if runtime_dir:
        candidates.append((f"{runtime_dir}/docker.sock", "the rootless Docker socket"))
    return candidates


def podman_candidates(environ: Mapping[str, str]) -> list[tuple[str, str]]:
    candidates = [(ROOTFUL_PODMAN_SOCKET, "the rootful Podman socket")]
    runtime_dir = environ.get("XDG_RUNTIME_DIR")
    if runtime_dir:
        candidates.append((f"{runtime_dir}/podman/podman.sock", "the rootless Podman socket"))
    return candidates


def socket_candidates(environ: Mapping[str, str], engine: str = "docker") -> list[tuple[str, str]]:
    """The usual socket paths of `engine` ("auto": Docker's, then Podman's), in order."""
    if engine == "podman":
        return podman_candidates(environ)
    if engine == "auto":
        return docker_candidates(environ) + podman_candidates(environ)
    return docker_candidates(environ)


def _unix(variable: str, value: str, engine: str) -> EngineEndpoint:
    if not value.startswith("unix://"):
        raise ConfigError(
            f"{variable}={value!r} is not a unix socket. pybox only drives a local "
            "engine through its unix socket (for example unix:///var/run/docker.sock); "
            f"unset {variable} or point it at a unix:// socket."
        )
    return EngineEndpoint(value[len("unix://") :], variable, engine)


def find_endpoint(environ: Mapping[str, str], engine: str = "auto") -> EngineEndpoint:
    """The engine's variable if set (`DOCKER_HOST`, `CONTAINER_HOST` for Podman),
    else the first usual socket path that exists."""
    if engine not in ENGINES:
        raise ConfigError(f"engine must be one of {', '.join(ENGINES)}, not {engine!r}.")
    docker_host = environ.get("DOCKER_HOST", "").strip()
    container_host = environ.get("CONTAINER_HOST", "").strip()
    if engine in ("auto", "docker") and docker_host:
        return _unix("DOCKER_HOST", docker_host, "docker")
    if engine == "podman" and container_host:
        return _unix("CONTAINER_HOST", container_host, "podman")
    candidates = socket_candidates(environ, engine)
    for path, why in candidates:
        if os.path.exists(path):
            return EngineEndpoint(path, why, "podman" if "Podman" in why else "docker")
    if engine == "auto" and container_host:
        return _unix("CONTAINER_HOST", container_host, "podman")
    tried = ", ".join(path for path, _ in candidates)
    if engine == "podman":
        raise EngineUnavailable(
            f"No Podman API socket found (tried {tried}). Start Podman's API service: "
            + START_PODMAN.format(socket=ROOTFUL_PODMAN_SOCKET)
            + " (as root; rootless: systemctl --user start podman.socket), or set "
            "CONTAINER_HOST=unix:///path/to/podman.sock."
        )
    raise EngineUnavailable(
        f"No container engine socket found (tried {tried}). Install and start Docker "
        "(for example: sudo apt-get install docker.io && sudo systemctl start docker), "
        "or Podman (sudo apt-get install podman, then `podman system service`), "
        "or set DOCKER_HOST=unix:///path/to/docker.sock."
    )
