"""Where the engine's API socket is, and how pybox found it.

Docker first (`DOCKER_HOST`, its usual sockets), then Podman (`CONTAINER_HOST`,
rootful `/run/podman/podman.sock`, rootless `$XDG_RUNTIME_DIR/podman/podman.sock`)
when no Docker socket exists. `engine = "docker" | "podman"` (the config file,
`PYBOX_ENGINE` or `--engine`) looks only for that engine's sockets.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from pybox._core.errors import ConfigError, EngineUnavailable

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


@dataclass(frozen=True)
class EngineKind:
    """One engine pybox can find: its name, its address variable, its usual sockets,
    and what to do when none is there (None: the generic advice)."""

    name: str
    variable: str
    candidates: Callable[[Mapping[str, str]], list[tuple[str, str]]]
    unavailable: Callable[[str], str] | None = None


def _podman_unavailable(tried: str) -> str:
    return (
        f"No Podman API socket found (tried {tried}). Start Podman's API service: "
        + START_PODMAN.format(socket=ROOTFUL_PODMAN_SOCKET)
        + " (as root; rootless: systemctl --user start podman.socket), or set "
        "CONTAINER_HOST=unix:///path/to/podman.sock."
    )


DOCKER = EngineKind("docker", "DOCKER_HOST", docker_candidates)
PODMAN = EngineKind("podman", "CONTAINER_HOST", podman_candidates, _podman_unavailable)
# Each `engine` setting -> the engines it looks for, in order.
KINDS: dict[str, tuple[EngineKind, ...]] = {
    "auto": (DOCKER, PODMAN),
    DOCKER.name: (DOCKER,),
    PODMAN.name: (PODMAN,),
}
ENGINES = tuple(KINDS)


def engine_kinds(engine: str) -> tuple[EngineKind, ...]:
    """The engines an `engine` setting looks for ("auto": Docker's, then Podman's)."""
    if engine not in KINDS:
        raise ConfigError(f"engine must be one of {', '.join(ENGINES)}, not {engine!r}.")
    return KINDS[engine]


def socket_candidates(environ: Mapping[str, str], engine: str = "docker") -> list[tuple[str, str]]:
    """The usual socket paths of `engine` ("auto": Docker's, then Podman's), in order."""
    return [candidate for kind in engine_kinds(engine) for candidate in kind.candidates(environ)]


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
    kinds = engine_kinds(engine)
    first = environ.get(kinds[0].variable, "").strip()
    if first:
        return _unix(kinds[0].variable, first, kinds[0].name)
    candidates = [
        (path, why, kind.name) for kind in kinds for path, why in kind.candidates(environ)
    ]
    for path, why, name in candidates:
        if os.path.exists(path):
            return EngineEndpoint(path, why, name)
    for kind in kinds[1:]:
        value = environ.get(kind.variable, "").strip()
        if value:
            return _unix(kind.variable, value, kind.name)
    tried = ", ".join(path for path, _, _ in candidates)
    if len(kinds) == 1 and kinds[0].unavailable is not None:
        raise EngineUnavailable(kinds[0].unavailable(tried))
    raise EngineUnavailable(
        f"No container engine socket found (tried {tried}). Install and start Docker "
        "(for example: sudo apt-get install docker.io && sudo systemctl start docker), "
        "or Podman (sudo apt-get install podman, then `podman system service`), "
        "or set DOCKER_HOST=unix:///path/to/docker.sock."
    )
