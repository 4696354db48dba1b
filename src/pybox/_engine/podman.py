"""`PodmanEngine`: Podman through its Docker-compatible API socket.

Every call is the Docker Engine API's except where Podman's compatible layer
cannot say what pybox asks for:

- create goes through Podman's own API (`specgen`), which expresses the
  private cgroup namespace, no extra writable tmpfs, the seccomp profile (as a
  file on the engine's machine, content-addressed and checked) and explicit
  ulimits;
- inspect answers the compatible document with Podman's own beside it, under
  `"Libpod"`, so the posture can read what only Podman's answer holds (the
  cgroup namespace, the bounding capabilities, the runtime, the cgroup path).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from pybox._core.errors import EngineError
from pybox._core.seccomp import profile_sha256
from pybox._engine.client import DockerEngine
from pybox._engine.interface import JSONObject
from pybox._engine.specgen import specgen

# Podman's own API, versioned by Podman's release (4.0.0 or later speaks this form).
LIBPOD = "/v4.0.0/libpod"
LIBPOD_KEY = "Libpod"
ENGINE_NAME = "podman"


def profile_dir() -> Path:
    """Where pybox keeps seccomp profiles for a local Podman to read (content-addressed)."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.geteuid() != 0:
        return Path(runtime) / "pybox" / "seccomp"
    return Path.home() / ".cache" / "pybox" / "seccomp"


def _canonical_sha256(text: str) -> str:
    """The profile's digest as the posture names it (`sha256:` cut off)."""
    return profile_sha256(text).removeprefix("sha256:")


def write_profile(profile_json: str, directory: Path | None = None) -> str:
    """The path of a file holding exactly `profile_json` (by its canonical hash),
    written once and checked every time: Podman reads it when the box is created."""
    try:
        digest = _canonical_sha256(profile_json)
    except ValueError:
        raise EngineError("The box's seccomp profile is not JSON; it was not sent.") from None
    folder = directory or profile_dir()
    path = folder / f"seccomp-{digest}.json"
    try:
        if not (path.is_file() and _canonical_sha256(path.read_text("utf-8")) == digest):
            folder.mkdir(parents=True, exist_ok=True, mode=0o755)
            handle, temporary = tempfile.mkstemp(dir=folder, prefix=".seccomp-")
            with os.fdopen(handle, "w", encoding="utf-8") as out:
                out.write(profile_json)
            os.chmod(temporary, 0o644)
            os.replace(temporary, path)
        if _canonical_sha256(path.read_text("utf-8")) != digest:
            raise EngineError(f"The seccomp profile file {path} changed while pybox wrote it.")
    except (OSError, ValueError) as exc:
        raise EngineError(
            f"pybox could not keep its seccomp profile for Podman in {path}: {exc}. "
            f"Make {folder} writable by this user."
        ) from exc
    return str(path)


class PodmanEngine(DockerEngine):
    """The Engine API calls, with create and inspect in Podman's own terms."""

    name = ENGINE_NAME

    def create_container(self, name: str, body: JSONObject) -> str:
        spec = specgen(name, body, write_profile)
        result = self._call("POST", f"{LIBPOD}/containers/create", body=spec, versioned=False)
        container_id = self._field(result, "Id")
        if not isinstance(container_id, str) or not container_id:
            raise EngineError(f"Podman created {name} but returned no container ID: {result!r}")
        return container_id

    def inspect_container(self, container_id: str) -> JSONObject | None:
        compat = super().inspect_container(container_id)
        if compat is None:
            return None
        own: Any = self._call(
            "GET",
            f"{LIBPOD}/containers/{container_id}/json",
            versioned=False,
            answers={404: None},
        )
        if own is None:
            return None
        return {**compat, LIBPOD_KEY: own}

    def cgroup_path(self, container_id: str) -> str | None:
        """The started box's cgroup, as Podman reports it (None: not reported)."""
        own: Any = self._call(
            "GET",
            f"{LIBPOD}/containers/{container_id}/json",
            versioned=False,
            answers={404: None},
        )
        state = own.get("State") if isinstance(own, dict) else None
        path = state.get("CgroupPath") if isinstance(state, dict) else None
        return path if isinstance(path, str) and path else None
