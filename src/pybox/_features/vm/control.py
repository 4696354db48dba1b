"""pybox's Colima VM: start (and verify), stop, delete, status.

Every start is followed by a read-back: the profile must be running the docker
runtime with no host folder mounted and no port forwarded, or pybox stops it
and refuses. What `pybox setup` plans for the VM is in `setup.py`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pybox._adapters.colima.profile import PROFILE, Colima, VMSize, VMStatus
from pybox._core.errors import (
    InvalidRequest,
    PlatformError,
    VMIsolationError,
)
from pybox._orchestration.hosts import Host, ToolPaths, make_colima, vm_size

Progress = Callable[[str], None]


@dataclass(frozen=True)
class VMState:
    """What `pybox vm status` shows: the profile's state and, when running, its checks."""

    state: str  # "running", "stopped" or "absent"
    status: VMStatus
    problems: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        status = self.status
        return {
            "profile": PROFILE,
            "state": self.state,
            "docker_socket": status.docker_socket,
            "runtime": status.runtime,
            "kubernetes": status.kubernetes,
            "cpus": status.cpus,
            "memory_bytes": status.memory_bytes,
            "disk_bytes": status.disk_bytes,
            "isolation_verified": self.state == "running" and not self.problems,
            "problems": list(self.problems),
            "detail": status.detail or None,
        }


def colima_of(host: Host | None, tools: ToolPaths, *, require_docker: bool = False) -> Colima:
    """The Colima driver of a session whose boxes run in the VM (found, not yet run)."""
    if host is None or not host.in_vm:
        chosen = (
            "" if host is None else f" (platform {host.name}, chosen by {host.choice.chosen_by})"
        )
        raise InvalidRequest(
            f"There is no pybox VM here{chosen}: boxes run on the local engine. The VM is "
            "used on macOS, or with PYBOX_PLATFORM=colima."
        )
    return make_colima(host.settings, host.environ, tools, require_docker=require_docker)


def size_of(host: Host) -> VMSize:
    return vm_size(host.settings)


def vm_state(colima: Colima) -> VMState:
    status = colima.status()
    if not status.running:
        return VMState("stopped" if status.exists else "absent", status, ())
    return VMState("running", status, tuple(colima.isolation_problems(status)))


def start_vm(colima: Colima, size: VMSize, progress: Progress) -> VMState:
    """Start the profile with pybox's settings (if it is not running) and verify it."""
    colima.require_version()
    if colima.status().running:
        progress(f"the VM (Colima profile {PROFILE}) is already running; checking it")
    else:
        progress(f"starting the VM: colima {' '.join(colima.start_args(size))}")
        colima.start(size)
    state = vm_state(colima)
    if state.state != "running":
        raise PlatformError(
            f"`colima start` finished but the profile {PROFILE} is not running "
            f"({state.status.detail or 'no detail'}). Try `colima start --profile {PROFILE} "
            "--verbose` to see why."
        )
    if state.problems:
        colima.stop()
        raise VMIsolationError(
            f"pybox stopped the VM and refuses to use it: {'; '.join(state.problems)}. Recreate "
            "it: `pybox vm delete --yes`, then `pybox setup --yes`."
        )
    progress(
        f"the VM is running and verified: no host folders, no port forwarding, engine at "
        f"{state.status.docker_socket}"
    )
    return state


def stop_vm(colima: Colima) -> VMState:
    if colima.status().running:
        colima.stop()
    return vm_state(colima)


def delete_vm(colima: Colima) -> VMState:
    colima.delete()
    return vm_state(colima)


def colima_state_dict(colima: Colima | None, error: str | None = None) -> dict[str, Any]:
    """The tools and VM facts `pybox doctor` reports on macOS."""
    if colima is None:
        return {"tools_ok": False, "error": error}
    facts: dict[str, Any] = {
        "colima": {"path": colima.colima.path, "found_by": colima.colima.found_by},
        "docker_cli": None
        if colima.docker is None
        else {
            "path": colima.docker.path,
            "found_by": colima.docker.found_by,
            "version": colima.docker_version(),
        },
        "colima_home": str(colima.colima_home),
        "profile_config": str(colima.profile_config),
        "lima_config": str(colima.lima_config),
    }
    return facts
