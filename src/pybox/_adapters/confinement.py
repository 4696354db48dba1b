"""Where a box's confinement comes from: pybox's profile file and the host's AppArmor."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pybox._core.errors import ConfigError
from pybox._core.seccomp import (
    APPARMOR_ENABLED_PATH,
    Confinement,
    apparmor_requirement,
    canonical,
)

PROFILE_FILE = "seccomp.json"
# Read beside the code, not through importlib.resources (which costs every run a few
# ms of imports): pybox is installed as files (its lock files are found the same way).
PROFILE_PATH = Path(__file__).parents[1] / "_core" / PROFILE_FILE


def seccomp_profile() -> str:
    """pybox's seccomp profile, shipped in the package, as canonical JSON."""
    try:
        text = PROFILE_PATH.read_text("utf-8")
        return canonical(text)
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"pybox's seccomp profile (pybox/_core/{PROFILE_FILE}) could not be read: {exc}. "
            "Reinstall pybox; no box runs without it."
        ) from exc


def host_apparmor(path: str = APPARMOR_ENABLED_PATH) -> tuple[bool | None, str]:
    """(whether this machine's kernel has AppArmor enabled, what was read)."""
    try:
        with open(path, encoding="ascii", errors="replace") as handle:
            value = handle.read(16).strip()
    except FileNotFoundError:
        return False, f"{path} does not exist (no AppArmor in this kernel)"
    except OSError as exc:
        return None, f"{path} could not be read ({exc.strerror})"
    return value.startswith("Y"), f"{path} is {value or 'empty'}"


def confinement(info: Mapping[str, Any], *, local_host: bool) -> Confinement:
    """The confinement boxes on this engine must have.

    `local_host` is False when the engine runs elsewhere (a VM): then this
    machine's AppArmor says nothing about the engine's, and only the engine's
    own SecurityOptions count.
    """
    if local_host:
        enabled, checked = host_apparmor()
    else:
        enabled = None
        checked = "the engine's host is a VM, whose AppArmor pybox learns from the engine only"
    profile, basis = apparmor_requirement(info.get("SecurityOptions") or [], enabled, checked)
    return Confinement(seccomp_profile(), profile, basis)
