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
from pybox._adapters.confinement import host_apparmor, seccomp_profile
from pybox._adapters.host_facts import owner_alive
from pybox._adapters.state import StateStore
from pybox._core.display import plural
from pybox._core.errors import PyboxError
from pybox._core.posture import LABEL_MANAGED, LABEL_OWNER
from pybox._core.seccomp import (
    ENGINE_APPARMOR_PROFILE,
    PROFILE_NAME,
    UNCONFINED,
    apparmor_requirement,
    profile_sha256,
)
from pybox._engine import (
    DockerEngine,
    Engine,
    EngineEndpoint,
    JSONObject,
    connect_engine,
    find_endpoint,
)
from pybox._engine.endpoint import PODMAN, engine_kinds
from pybox._features.images.records import check_images, other_users_image_hint
from pybox._features.vm.control import colima_state_dict, vm_state
from pybox._orchestration.engine_checks import limits_problem, podman_start_hint
from pybox._orchestration.engine_steps import START_ENGINE, engine_next_step
from pybox._orchestration.hosts import NO_TOOL_PATHS, ToolPaths, make_colima, open_host
from pybox._version import __version__

DOCTOR_VERSION = 1  # fields are only ever added within a version
READY_COMMAND = "echo 'print(6*7)' | pybox exec -"
ENGINE_UNREACHABLE = "unknown: engine unreachable"


def engine_facts(engine: Engine, info: JSONObject) -> dict[str, Any]:
    """What setup and doctor report about an engine."""
    return {
        "reachable": True,
        "name": engine.name,
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


def seccomp_problem(security_options: list[Any]) -> tuple[str, str] | None:
    """(what is wrong, the next step) when the engine's seccomp is off or unconfined."""
    seccomp = [str(o) for o in security_options if str(o).startswith("name=seccomp")]
    if not seccomp:
        return (
            "the engine reports no seccomp support, so it cannot apply pybox's seccomp "
            "profile and every run is refused",
            "use an engine built with seccomp (for example Debian's docker.io)",
        )
    if any(f"profile={UNCONFINED}" in option for option in seccomp):
        return (
            f"the engine runs containers seccomp-unconfined by default ({seccomp[0]}); pybox "
            "sends its own profile and checks it, but every other container on this engine "
            "has no system-call filter",
            'remove "seccomp-profile" from /etc/docker/daemon.json (or dockerd\'s '
            "--seccomp-profile) and restart the engine",
        )
    return None


def _confinement(
    report: dict[str, Any],
    problems: list[dict[str, str]],
    info: JSONObject,
    *,
    local_host: bool,
) -> None:
    """Report the seccomp profile and AppArmor boxes get; flag what would weaken them."""
    options = list(info.get("SecurityOptions") or [])
    host_enabled, host_checked = host_apparmor() if local_host else (None, "not checked")
    required, basis = apparmor_requirement(options, host_enabled, host_checked)
    try:
        profile = seccomp_profile()
    except PyboxError as exc:
        _problem(problems, "seccomp profile", str(exc), "pip install --force-reinstall pybox")
        profile = None
    report["confinement"] = {
        "seccomp_profile": PROFILE_NAME,
        "seccomp_profile_sha256": None if profile is None else profile_sha256(profile),
        "apparmor_profile": required,
        "apparmor": basis,
    }
    problem = seccomp_problem(options)
    if problem is not None:
        _problem(problems, "seccomp", *problem)
    engine_has = any(str(o).startswith("name=apparmor") for o in options)
    if host_enabled and not engine_has:
        _problem(
            problems,
            "apparmor",
            f"this machine's kernel has AppArmor ({host_checked}) but the engine confines "
            "no container with it, so pybox refuses every box (it requires the engine's "
            f"{ENGINE_APPARMOR_PROFILE} profile)",
            "install apparmor (apparmor_parser) for the engine and restart it",
        )


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
        "ok": False,
        "problems": [],
        "unchecked": {},
        "next": [],
    }
    problems: list[dict[str, str]] = report["problems"]
    try:
        _diagnose(report, problems, environ, config_path, tools)
    finally:
        for what in ("images", "boxes"):
            if what not in report:
                # Never a count that was not taken: say why it is unknown.
                report["unchecked"][what] = (
                    ENGINE_UNREACHABLE if "engine" in problems_of(problems) else "not checked"
                )
        report["ok"] = not problems
        report["next"] = [p["next"] for p in problems] or [READY_COMMAND]
    return report


def problems_of(problems: list[dict[str, str]]) -> set[str]:
    return {p["what"] for p in problems}


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
        "runtimes": settings.runtimes.to_dict(),
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
        start_hint = START_ENGINE
        podman_hint = podman_start_hint(report["platform"]["cgroup_version"])
        try:
            endpoint = find_endpoint(environ, settings.engine)
        except PyboxError as exc:
            if podman_hint and PODMAN in engine_kinds(settings.engine):
                # Podman is installed but its API service is not listening.
                start_hint = podman_hint
            _problem(problems, "engine", str(exc), engine_next_step(exc, None, start_hint))
            return
        if endpoint.engine == PODMAN.name and podman_hint:
            start_hint = podman_hint
    report["engine"] = {
        "socket": endpoint.url,
        "found_by": endpoint.found_by,
        "chosen_by": f"engine = {settings.engine!r} ({settings.engine_source})",
        "reachable": False,
    }
    try:
        if host.in_vm:
            engine: Engine = DockerEngine.connect(endpoint)
        else:
            engine = connect_engine(endpoint, settings.engine)
        info = engine.info()
    except PyboxError as exc:
        _problem(
            problems,
            "engine",
            str(exc),
            engine_next_step(exc, endpoint.socket_path, start_hint, found_by=endpoint.found_by),
        )
        return
    report["engine"].update(engine_facts(engine, info))
    problem = limits_problem(engine.name, info)
    if problem is not None:
        _problem(problems, "engine", problem, problem.split("Fix: ", 1)[-1])
    _confinement(report, problems, info, local_host=not host.in_vm)
    from pybox._orchestration.runtime_doctor import find_runsc, gvisor_report

    report["gvisor"], gvisor_problems = gvisor_report(
        dict(info), settings.runtimes, local_host=not host.in_vm, runsc_path=find_runsc()
    )
    problems.extend(gvisor_problems)
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
        other = other_users_image_hint(engine, state)
        _problem(
            problems,
            "stdlib image",
            f"no usable stdlib image is recorded in {state.root}" + (f". {other}" if other else ""),
            "pybox setup --yes (as yourself, without sudo)",
        )
    for status in images:
        if status.problem:
            _problem(
                problems,
                f"image {status.record.name}",
                status.problem,
                status.record.rebuild_command,
            )
    leftovers = leftover_boxes(engine)
    report["boxes"] = leftovers
    orphaned = [box for box in leftovers if box["owner_alive"] is False]
    if orphaned:
        _problem(
            problems,
            "leftover boxes",
            f"{plural(len(orphaned), 'box', 'boxes')} whose pybox process is gone",
            "pybox sweep",
        )
