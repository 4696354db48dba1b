"""What pybox refuses about an engine as a whole, before any box (Docker or Podman).

A rootless engine on a cgroup v1 host cannot enforce memory, CPU or process
limits (Podman 4.3 says "Resource limits are not supported and ignored on
cgroups V1 rootless systems" and runs the box anyway): pybox refuses it,
with the reason and the fix, rather than run boxes without their caps.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pybox._core.errors import EngineError
from pybox._engine.endpoint import ROOTFUL_PODMAN_SOCKET, START_PODMAN

ENGINE_TITLES = {"docker": "Docker", "podman": "Podman"}


def rootless(info: Mapping[str, Any]) -> bool:
    return any(str(o) == "name=rootless" for o in info.get("SecurityOptions") or [])


def limits_problem(name: str, info: Mapping[str, Any]) -> str | None:
    """Why this engine cannot cap a box's resources, or None."""
    if rootless(info) and str(info.get("CgroupVersion")) == "1":
        title = ENGINE_TITLES.get(name, name)
        return (
            f"rootless {title} on a cgroup v1 host cannot enforce memory, CPU or process "
            "limits (it ignores them and runs the box anyway). Fix: boot the host with "
            "cgroup v2 and delegate the cpu, memory and pids controllers to the user "
            "(systemd.unified_cgroup_hierarchy=1; check with `cat "
            "/sys/fs/cgroup/user.slice/user-$(id -u).slice/cgroup.controllers`), or use "
            f"rootful {title}"
        )
    return None


def refuse_unsafe_engine(name: str, info: Mapping[str, Any]) -> None:
    problem = limits_problem(name, info)
    if problem is not None:
        raise EngineError(f"pybox refuses this engine: {problem}.")


def podman_start_hint(cgroup_version: int | None) -> str | None:
    """How to start Podman's API service when Podman is installed (None: it is not)."""
    import shutil  # here: a run that reaches the engine never needs it

    if shutil.which("podman") is None:
        return None
    # crun (Podman's default) refuses a cgroup v1 or hybrid host; runc does not.
    runtime = "--runtime runc " if cgroup_version == 1 else ""
    return (
        "sudo podman "
        + runtime
        + START_PODMAN.format(socket=ROOTFUL_PODMAN_SOCKET).removeprefix("podman ")
    )
