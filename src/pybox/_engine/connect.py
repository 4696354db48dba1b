"""Connect to the engine at an endpoint, and drive it as what it says it is."""

from __future__ import annotations

from collections.abc import Callable

from pybox._core.errors import ConfigError
from pybox._engine.client import DockerEngine
from pybox._engine.endpoint import DOCKER, PODMAN, EngineEndpoint
from pybox._engine.transport import Transport

# An engine's Server header product -> pybox's name for it.
PRODUCTS = {"Docker": DOCKER.name, "Libpod": PODMAN.name}


def _podman() -> type[DockerEngine]:
    # Imported here: a Docker engine's runs do not pay for Podman's workarounds.
    from pybox._engine.podman import PodmanEngine

    return PodmanEngine


# pybox's name for an engine -> the backend that drives it.
BACKENDS: dict[str, Callable[[], type[DockerEngine]]] = {
    DOCKER.name: lambda: DockerEngine,
    PODMAN.name: _podman,
}


def backend_named(name: str) -> type[DockerEngine]:
    """The backend of the engine pybox calls `name` (an unknown one: Docker's API)."""
    return BACKENDS.get(name, BACKENDS[DOCKER.name])()


def connect_engine(
    endpoint: EngineEndpoint, expected: str = "auto", transport: Transport | None = None
) -> DockerEngine:
    """A `DockerEngine` or `PodmanEngine`, by the engine's own answer.

    `expected` ("docker", "podman") is the operator's choice: a socket whose
    engine says otherwise is refused, never driven as the wrong one.
    """
    probe = (
        DockerEngine.connect(endpoint)
        if transport is None
        else DockerEngine.connect(endpoint, transport)
    )
    product = str(getattr(probe, "product", ""))
    name = PRODUCTS.get(product, DOCKER.name)
    if expected not in ("auto", name):
        raise ConfigError(
            f"The engine at {endpoint.url} ({endpoint.found_by}) is {name} "
            f"(its answers say {product or 'nothing'}), but engine = {expected!r} was "
            f"asked for. Point pybox at a {expected} socket, or choose engine = {name!r}."
        )
    backend = backend_named(name)
    if backend is DockerEngine:  # the probe already speaks Docker's API
        return probe
    engine = backend(endpoint, probe.api_version, probe.server_version, transport=probe.transport)
    engine.product = product
    return engine
