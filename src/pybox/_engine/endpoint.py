"""Where the engine's API socket is, and how pybox found it."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from pybox._core.errors import ConfigError, EngineUnavailable


@dataclass(frozen=True)
class EngineEndpoint:
    """An engine address and the reason pybox chose it (shown by `doctor` and receipts)."""

    socket_path: str
    found_by: str

    @property
    def url(self) -> str:
        return f"unix://{self.socket_path}"


def socket_candidates(environ: Mapping[str, str]) -> list[tuple[str, str]]:
    """The usual socket paths, in the order pybox tries them."""
    candidates = [
        ("/var/run/docker.sock", "the default Docker socket"),
        ("/run/docker.sock", "the default Docker socket"),
    ]
    runtime_dir = environ.get("XDG_RUNTIME_DIR")
    if runtime_dir:
        candidates.append((f"{runtime_dir}/docker.sock", "the rootless Docker socket"))
    return candidates


def find_endpoint(environ: Mapping[str, str]) -> EngineEndpoint:
    """`DOCKER_HOST` if set, else the first usual socket path that exists."""
    docker_host = environ.get("DOCKER_HOST", "").strip()
    if docker_host:
        if not docker_host.startswith("unix://"):
            raise ConfigError(
                f"DOCKER_HOST={docker_host!r} is not a unix socket. pybox only drives a local "
                "engine through its unix socket (for example unix:///var/run/docker.sock); "
                "unset DOCKER_HOST or point it at a unix:// socket."
            )
        return EngineEndpoint(docker_host[len("unix://") :], "DOCKER_HOST")
    candidates = socket_candidates(environ)
    for path, why in candidates:
        if os.path.exists(path):
            return EngineEndpoint(path, why)
    tried = ", ".join(path for path, _ in candidates)
    raise EngineUnavailable(
        f"No container engine socket found (tried {tried}). Install and start Docker "
        "(for example: sudo apt-get install docker.io && sudo systemctl start docker), "
        "or set DOCKER_HOST=unix:///path/to/docker.sock."
    )
