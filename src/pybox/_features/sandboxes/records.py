"""What a caller is told about a sandbox, and the settings sandboxes live by (pure)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pybox._core.limits import Limits
from pybox._core.sandbox_settings import SandboxSettings

__all__ = ["SandboxSettings"]  # the operator's, kept in _core for the config file

# The program file of a sandbox's `run`: in the workspace, rewritten by each run,
# so an agent's own main.py there is never overwritten.
RUN_PROGRAM = "_pybox_run.py"
# The limits a sandbox's box has for its whole life (its cgroup and tmpfs): a run
# cannot ask for other values. Its timeout and output caps are per run.
BOX_WIDE = ("memory_bytes", "cpus", "pids", "open_files", "writable_bytes")
LIVE_STATES = ("creating", "ready", "busy")
# Where installed libraries go in the workspace, put first on every later run's
# sys.path with PYTHONPATH (the user site would be ignored in a venv image).
PACKAGES_FOLDER = ".pybox-packages"
# Who gave the answers of a sandbox's file tools (listings, reads, digests), as
# results say it: pybox's own program, started isolated from the workspace, but
# in the box, so pybox still checks every shape and size.
FILES_SOURCE = "pybox's file program in the box (isolated: python -I -S), checked by pybox"


@dataclass(frozen=True)
class SandboxInfo:
    sandbox_id: str
    image: str
    image_id: str
    limits: Limits
    state: str
    reason: str
    created_at: float
    last_used_at: float
    expires_at: float  # the end of its lifetime
    idle_ttl_s: float
    libraries: tuple[str, ...]
    runs: int
    # Its isolation lane ("runc", "gvisor"); "" for a record from before lanes were kept.
    runtime: str = ""

    @property
    def idle_expires_at(self) -> float:
        return min(self.last_used_at + self.idle_ttl_s, self.expires_at)

    def to_dict(self) -> dict[str, Any]:
        return {
            "sandbox_id": self.sandbox_id,
            "environment": self.image,
            "image_id": self.image_id,
            "state": self.state,
            "reason": self.reason,
            "limits": self.limits.to_dict(),
            "created_at": self.created_at,
            "last_used_at": self.last_used_at,
            "expires_at": self.expires_at,
            "idle_expires_at": self.idle_expires_at,
            "idle_ttl_s": self.idle_ttl_s,
            "libraries": list(self.libraries),
            "runs": self.runs,
            "runtime": self.runtime or None,
        }


def store_tag(state_dir: Path) -> str:
    """The label value that ties a sandbox's box to the store that records it."""
    return hashlib.sha256(str(state_dir.resolve()).encode()).hexdigest()[:16]


def persists() -> dict[str, str]:
    """What a sandbox keeps between runs, for the capabilities resource and docs."""
    return {
        "kept": "files in the workspace (/pybox/work) and packages installed with libraries",
        "not_kept": "variables, imports and processes: each run is a fresh process, and "
        "nothing a run started is left running when it ends; files outside the workspace "
        "and SysV IPC objects are removed between runs",
    }
