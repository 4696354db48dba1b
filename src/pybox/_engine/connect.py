"""Connect to the engine at an endpoint, and drive it as what it says it is."""

from __future__ import annotations

from pybox._core.errors import ConfigError
from pybox._engine.client import DockerEngine
from pybox._engine.endpoint import EngineEndpoint
from pybox._engine.transport import Transport

# An engine's Server header product -> pybox's name for it.
PRODUCTS = {"Docker": "docker", "Libpod": "podman"}


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
    name = PRODUCTS.get(product, "docker")
    if expected not in ("auto", name):
        raise ConfigError(
            f"The engine at {endpoint.url} ({endpoint.found_by}) is {name} "
            f"(its answers say {product or 'nothing'}), but engine = {expected!r} was "
            f"asked for. Point pybox at a {expected} socket, or choose engine = {name!r}."
        )
    if name == "podman":
        # Imported here: a Docker engine's runs do not pay for Podman's workarounds.
        from pybox._engine.podman import PodmanEngine

        engine: DockerEngine = PodmanEngine(
            endpoint, probe.api_version, probe.server_version, transport=probe.transport
        )
        engine.product = product
        return engine
    return probe
