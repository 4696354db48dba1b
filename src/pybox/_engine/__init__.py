"""The container engine client, in layers a reader can name.

- `endpoint`: where the engine is and how pybox found it;
- `transport`: how bytes get there (a unix socket today; TCP+TLS or ssh plug in here);
- `http1`: HTTP/1.1 on one connection, as much as the Engine API needs (not `http.client`);
- `errors`: the one place that turns an engine's HTTP answer into an exception;
- `stream`: the hijacked attach connection and its stdout/stderr demultiplexing;
- `interface`: what boxes need and what images need from an engine (Protocols);
- `client`: `DockerEngine`, the Engine API over a transport;
- `podman`, `specgen`: `PodmanEngine`, where Podman's compatible API falls short;
- `connect`: the engine at an endpoint, driven as what it says it is.

The package knows no policy, no posture and no receipts.
"""

from __future__ import annotations

from pybox._engine.client import DockerEngine
from pybox._engine.connect import connect_engine
from pybox._engine.endpoint import ENGINES, EngineEndpoint, find_endpoint, socket_candidates
from pybox._engine.interface import (
    AttachStream,
    BoxEngine,
    Engine,
    ImageEngine,
    JSONObject,
    NetworkEngine,
)

__all__ = [
    "ENGINES",
    "AttachStream",
    "BoxEngine",
    "DockerEngine",
    "Engine",
    "EngineEndpoint",
    "ImageEngine",
    "JSONObject",
    "NetworkEngine",
    "connect_engine",
    "find_endpoint",
    "socket_candidates",
]
