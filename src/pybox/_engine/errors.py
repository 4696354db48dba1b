"""The one place that turns what the engine (or the way to it) did into an exception."""

from __future__ import annotations

import json

from pybox._core.errors import EngineAPIError, EngineUnavailable
from pybox._engine.endpoint import EngineEndpoint


def engine_message(raw: bytes) -> str:
    """The engine's own explanation from an error body (JSON `message` or text)."""
    try:
        decoded = json.loads(raw)
    except ValueError:
        return raw.decode("utf-8", "replace").strip()[:500]
    if isinstance(decoded, dict) and isinstance(decoded.get("message"), str):
        return str(decoded["message"])
    return raw.decode("utf-8", "replace").strip()[:500]


def api_error(what: str, status: int, raw: bytes) -> EngineAPIError:
    """The engine answered, and said no: `what` names the operation for the user."""
    message = engine_message(raw)
    return EngineAPIError(
        f"The engine refused {what} (HTTP {status}): {message}",
        status=status,
        engine_message=message,
    )


def unreachable(endpoint: EngineEndpoint, exc: OSError) -> EngineUnavailable:
    """The engine could not be reached at all, with the next step for each cause."""
    if isinstance(exc, PermissionError):
        hint = (
            "permission denied. Run as a user in the 'docker' group (sudo usermod -aG "
            "docker $USER, then log in again) or as root."
        )
    elif isinstance(exc, FileNotFoundError):
        hint = "the socket does not exist. Is the engine installed and running?"
    elif isinstance(exc, ConnectionRefusedError):
        hint = "connection refused. Start the engine (for example: sudo systemctl start docker)."
    else:
        hint = f"{exc.strerror or exc}. Check that the engine is running."
    return EngineUnavailable(f"Cannot reach the container engine at {endpoint.url}: {hint}")


def connection_lost(endpoint: EngineEndpoint, what: str, exc: Exception) -> EngineUnavailable:
    return EngineUnavailable(
        f"Lost the connection to the engine at {endpoint.url} during {what}: {exc}. "
        "Check that the engine is still running."
    )
