"""`pybox doctor`: a read-only look at the platform, tools, VM, engine, images and leftovers.

It changes nothing: on macOS it only asks Colima for its version and status and
reads the profile's settings files. Every problem comes with the exact command
to run next.
"""

from __future__ import annotations

import platform
import sys
from collections.abc import Callable, Mapping
from typing import Any

from pybox._adapters.cgroups import cgroup_version
from pybox._adapters.config import load_settings
from pybox._adapters.host import owner_alive
from pybox._adapters.state import StateStore
from pybox._core.errors import PyboxError
from pybox._core.posture import LABEL_MANAGED, LABEL_OWNER
from pybox._engine import DockerEngine, Engine, EngineEndpoint, JSONObject, find_endpoint
from pybox._orchestration.images import check_images
from pybox._orchestration.platforms import NO_TOOL_PATHS, ToolPaths, make_colima, open_host
from pybox._orchestration.vm import colima_state_dict, vm_state
from pybox._version import __version__

DOCTOR_VERSION = 1  # fields are only ever added within a version
READY_COMMAND = "echo 'print(6*7)' | pybox exec -"


def engine_facts(engine: Engine, info: JSONObject) -> dict[str, Any]:
    """What setup and doctor report about an engine."""
    return {
        "reachable": True,
        "server_version": engine.server_version,
        "api_version": engine.api_version,
        "cgroup_version": info.get("CgroupVersion"),
        "cgroup_driver": info.get("CgroupDriver"),
        "runtimes": sorted((info.get("Runtimes") or {}).keys()),
        "default_runtime": info.get("DefaultRuntime"),
        "cpus": info.get("NCPU"),
        "memory_bytes": info.get("MemTotal"),
        "security_options": info.get("SecurityOptions"),
    }


def leftover_boxes(
    engine: Engine, is_owner_alive: Callable[[str], bool | None] = owner_alive
) -> list[dict[str, Any]]:
    """Every pybox box the engine has, and whether the process that made it lives."""
    boxes = []
    for container in engine.list_containers({LABEL_MANAGED: "1"}):
        labels = container.get("Labels") or {}
        boxes.append(
            {
                "name": str((container.get("Names") or ["?"])[0]).lstrip("/"),
                "state": container.get("State"),
                "owner_alive": is_owner_alive(str(labels.get(LABEL_OWNER, ""))),
            }
        )
    return boxes


def _problem(problems: list[dict[str, str]], what: str, detail: str, next_step: str) -> None:
    problems.append({"what": what, "detail": detail, "next": next_step})


def _colima_endpoint(
    report: dict[str, Any],
    problems: list[dict[str, str]],
    settings: Any,
    environ: Mapping[str, str],
    tools: ToolPaths,
) -> EngineEndpoint | None:
    """Tools and VM on macOS; the verified engine socket, or None (with the problem)."""
    try:
        colima = make_colima(settings, environ, tools, require_docker=False)
    except PyboxError as exc:
        report["colima"] = colima_state_dict(None, str(exc))
        _problem(problems, "colima", str(exc), "brew install colima docker")
        return None
    report["colima"] = colima_state_dict(colima)
    if colima.docker is None:
        _problem(
            problems,
            "docker CLI",
            "Colima needs the docker CLI for its docker runtime; none was found in a trusted place",
            "brew install docker",
        )
    try:
        version = colima.require_version()
        report["colima"]["version"] = ".".join(map(str, version))
        state = vm_state(colima)
    except PyboxError as exc:
        _problem(problems, "colima", str(exc), "brew upgrade colima")
        return None
    report["vm"] = state.to_dict()
    if state.state == "absent":
        _problem(problems, "vm", "pybox's Colima profile does not exist yet", "pybox setup --yes")
        return None
    if state.state == "stopped":
        _problem(problems, "vm", "pybox's VM is stopped", "pybox vm start")
        return None
    if state.problems:
        _problem(
            problems,
            "vm",
            "the VM is not isolated as promised: " + "; ".join(state.problems),
            "pybox vm delete --yes && pybox setup --yes",
        )
        return None
    socket = state.status.docker_socket or ""
    return EngineEndpoint(socket[len("unix://") :], "colima status --json (profile pybox)")


def diagnose(
    environ: Mapping[str, str], config_path: str | None = None, tools: ToolPaths = NO_TOOL_PATHS
) -> dict[str, Any]:
    """Facts and the next step for each problem. Changes nothing."""
    report: dict[str, Any] = {
        "doctor_version": DOCTOR_VERSION,
        "pybox_version": __version__,
        "platform": {
            "system": platform.system(),
            "machine": platform.machine(),
            "python": sys.version.split()[0],
            "cgroup_version": cgroup_version() if platform.system() == "Linux" else None,
        },
        "problems": [],
        "next": [],
    }
    problems: list[dict[str, str]] = report["problems"]
    try:
        _diagnose(report, problems, environ, config_path, tools)
    finally:
        report["next"] = [p["next"] for p in problems] or [READY_COMMAND]
    return report


def _diagnose(
    report: dict[str, Any],
    problems: list[dict[str, str]],
    environ: Mapping[str, str],
    config_path: str | None,
    tools: ToolPaths,
) -> None:
    try:
        settings = load_settings(environ, config_path)
    except PyboxError as exc:
        _problem(problems, "configuration", str(exc), "fix the configuration file named above")
        return
    report["config"] = {
        "sources": list(settings.sources),
        "state_dir": str(settings.state_dir),
        "policy": settings.policy.to_dict(),
    }
    host = open_host(settings, environ)
    report["platform"]["pybox_platform"] = host.name
    report["platform"]["chosen_by"] = host.choice.chosen_by
    if host.in_vm:
        endpoint = _colima_endpoint(report, problems, settings, environ, tools)
        if endpoint is None:
            return
        start_hint = "pybox vm start"
    else:
        start_hint = "sudo systemctl start docker"
        try:
            endpoint = find_endpoint(environ)
        except PyboxError as exc:
            _problem(problems, "engine", str(exc), start_hint)
            return
    report["engine"] = {"socket": endpoint.url, "found_by": endpoint.found_by}
    try:
        engine = DockerEngine.connect(endpoint)
        info = engine.info()
    except PyboxError as exc:
        _problem(problems, "engine", str(exc), start_hint)
        return
    report["engine"].update(engine_facts(engine, info))
    if not any("seccomp" in str(opt) for opt in info.get("SecurityOptions") or []):
        _problem(
            problems,
            "seccomp",
            "the engine reports no seccomp support",
            "use an engine built with seccomp (for example Debian's docker.io)",
        )
    state = StateStore(settings.state_dir)
    try:
        images = check_images(engine, state)
    except PyboxError as exc:
        _problem(problems, "images", str(exc), "pybox image build stdlib")
        images = []
    report["images"] = [
        {
            "name": status.record.name,
            "image_id": status.record.image_id,
            "recipe_hash": status.record.recipe_hash,
            "present": status.present,
            "problem": status.problem,
        }
        for status in images
    ]
    if not any(s.record.name == "stdlib" and s.problem is None for s in images):
        _problem(
            problems, "stdlib image", "no usable stdlib image is recorded", "pybox setup --yes"
        )
    for status in images:
        if status.problem:
            _problem(
                problems,
                f"image {status.record.name}",
                status.problem,
                f"pybox image build {status.record.name}",
            )
    leftovers = leftover_boxes(engine)
    report["boxes"] = leftovers
    orphaned = [box for box in leftovers if box["owner_alive"] is False]
    if orphaned:
        _problem(
            problems,
            "leftover boxes",
            f"{len(orphaned)} box(es) whose pybox process is gone",
            "pybox sweep",
        )
