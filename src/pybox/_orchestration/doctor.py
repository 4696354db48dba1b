"""`pybox doctor`: a read-only look at this machine, the engine, images and leftovers."""

from __future__ import annotations

import platform
import sys
from collections.abc import Mapping
from typing import Any

from pybox._adapters.cgroups import cgroup_version
from pybox._adapters.config import load_settings
from pybox._adapters.engine import DockerEngine, find_endpoint
from pybox._adapters.host import owner_alive
from pybox._adapters.state import StateStore
from pybox._core.errors import PyboxError
from pybox._core.posture import LABEL_MANAGED, LABEL_OWNER
from pybox._orchestration.images import check_images
from pybox._version import __version__

DOCTOR_VERSION = 1


def diagnose(environ: Mapping[str, str], config_path: str | None = None) -> dict[str, Any]:
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
    }
    problems: list[dict[str, str]] = report["problems"]
    try:
        settings = load_settings(environ, config_path)
    except PyboxError as exc:
        problems.append(
            {"what": "configuration", "detail": str(exc), "next": "fix the configuration"}
        )
        return report
    report["config"] = {
        "sources": list(settings.sources),
        "state_dir": str(settings.state_dir),
        "policy": settings.policy.to_dict(),
    }
    try:
        endpoint = find_endpoint(environ)
        report["engine"] = {"socket": endpoint.url, "found_by": endpoint.found_by}
        engine = DockerEngine.connect(endpoint)
        info = engine.info()
    except PyboxError as exc:
        problems.append({"what": "engine", "detail": str(exc), "next": "start the engine"})
        return report
    report["engine"].update(
        {
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
    )
    if not any("seccomp" in str(opt) for opt in info.get("SecurityOptions") or []):
        problems.append(
            {
                "what": "seccomp",
                "detail": "the engine reports no seccomp support",
                "next": "use an engine built with seccomp",
            }
        )
    state = StateStore(settings.state_dir)
    try:
        images = check_images(engine, state)
    except PyboxError as exc:
        problems.append({"what": "images", "detail": str(exc), "next": "pybox image build stdlib"})
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
        problems.append(
            {
                "what": "stdlib image",
                "detail": "no usable stdlib image is recorded",
                "next": "pybox setup --yes",
            }
        )
    for status in images:
        if status.problem:
            problems.append(
                {
                    "what": f"image {status.record.name}",
                    "detail": status.problem,
                    "next": f"pybox image build {status.record.name}",
                }
            )
    leftovers = []
    for container in engine.list_containers({LABEL_MANAGED: "1"}):
        labels = container.get("Labels") or {}
        alive = owner_alive(str(labels.get(LABEL_OWNER, "")))
        leftovers.append(
            {
                "name": str((container.get("Names") or ["?"])[0]).lstrip("/"),
                "state": container.get("State"),
                "owner_alive": alive,
            }
        )
    report["boxes"] = leftovers
    orphaned = [box for box in leftovers if box["owner_alive"] is False]
    if orphaned:
        problems.append(
            {
                "what": "leftover boxes",
                "detail": f"{len(orphaned)} box(es) whose pybox process is gone",
                "next": "pybox sweep",
            }
        )
    return report
