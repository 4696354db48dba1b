"""Whether pybox's Colima profile is still the one pybox started: its settings files.

The profile's `colima.yaml` and Lima's `lima.yaml` are read back and every
setting that weakens isolation is named: a host folder mounted, a port
forwarder, Kubernetes, another runtime, or a port-forward rule that forwards
anything but the engine's unix socket into Colima's own folder. What the
running VM itself reports (`colima status`) is checked in `profile.py`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pybox._adapters import simple_yaml


def config_problems(profile_config: Path, lima_config: Path, colima_home: Path) -> list[str]:
    """What the profile's own files say against isolation (cheap: two local reads).

    `profile_config` is the profile's `colima.yaml`, `lima_config` Lima's
    `lima.yaml`; an engine socket may be forwarded only into `colima_home`."""
    problems: list[str] = []
    profile = _read_yaml(profile_config, problems)
    if profile is not None:
        for mount in profile.get("mounts") or []:
            location = mount.get("location") if isinstance(mount, dict) else mount
            if str(location).strip().lower() != "none":
                problems.append(f"{profile_config} mounts the host folder {location!r}")
        forwarder = profile.get("portForwarder")
        if str(forwarder).lower() != "none":
            problems.append(f"{profile_config} sets portForwarder {forwarder!r}, not 'none'")
        kubernetes = profile.get("kubernetes")
        if isinstance(kubernetes, dict) and kubernetes.get("enabled"):
            problems.append(f"{profile_config} enables Kubernetes")
        if profile.get("runtime") not in (None, "docker"):
            problems.append(f"{profile_config} sets runtime {profile.get('runtime')!r}")
    lima = _read_yaml(lima_config, problems)
    if lima is not None:
        for mount in lima.get("mounts") or []:
            location = mount.get("location") if isinstance(mount, dict) else mount
            problems.append(f"{lima_config} mounts the host folder {location!r}")
        for rule in lima.get("portForwards") or []:
            reason = _forward_problem(rule, colima_home)
            if reason:
                problems.append(f"{lima_config}: {reason}")
    return problems


def _forward_problem(rule: Any, colima_home: Path) -> str | None:
    """Only rules that forward nothing, or the engine's unix socket into the
    profile's own folder, are allowed."""
    if not isinstance(rule, dict):
        return f"unreadable port-forward rule {rule!r}"
    if rule.get("ignore") is True:
        return None
    host_socket = rule.get("hostSocket")
    if rule.get("guestSocket") and isinstance(host_socket, str):
        inside = os.path.abspath(host_socket).startswith(str(colima_home) + os.sep)
        return None if inside else f"a socket is forwarded to {host_socket}, outside Colima"
    return f"a port-forward rule is active: {rule!r}"


def _read_yaml(path: Path, problems: list[str]) -> dict[str, Any] | None:
    try:
        data = simple_yaml.load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        problems.append(f"{path} does not exist, so the VM's settings cannot be verified")
        return None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        problems.append(f"{path} cannot be read, so the VM cannot be verified: {exc}")
        return None
    if not isinstance(data, dict):
        problems.append(f"{path} is not a settings mapping")
        return None
    return data
