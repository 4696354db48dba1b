"""`pybox doctor`'s look at the isolation lanes: is gVisor registered with the engine?

Read-only, like the rest of doctor. When `runsc` is installed on this machine but the
engine does not have it registered, the report holds the exact daemon configuration
entry to add; pybox never edits the daemon's configuration itself.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from typing import Any

from pybox._core.runtimes import (
    GVISOR,
    GVISOR_RUNTIME_ARGS,
    RuntimePolicy,
    daemon_config_snippet,
    engine_runtimes,
)

RUNSC_PLACES = ("/usr/bin/runsc", "/usr/local/bin/runsc", "/usr/sbin/runsc")
DAEMON_CONFIG = "/etc/docker/daemon.json"


def find_runsc(which: Callable[[str], str | None] = shutil.which) -> str | None:
    found = which("runsc")
    if found:
        return found
    return next((p for p in RUNSC_PLACES if os.access(p, os.X_OK)), None)


def gvisor_report(
    info: dict[str, Any],
    policy: RuntimePolicy,
    *,
    local_host: bool,
    runsc_path: str | None,
) -> tuple[dict[str, Any], list[dict[str, str]]]:
    """The gVisor facts for doctor, and the problems (only when the operator's
    policy needs gVisor: its default lane, or the only one allowed)."""
    name = policy.gvisor_engine_runtime
    registered = {r.name: r for r in engine_runtimes(info)}
    gvisor_like = sorted(r.name for r in registered.values() if r.is_gvisor)
    entry = registered.get(name)
    needed = policy.default == GVISOR
    report: dict[str, Any] = {
        "engine_runtime": name,
        "registered": entry is not None,
        "runtime_args": list(entry.args) if entry else None,
        "other_gvisor_runtimes": [n for n in gvisor_like if n != name],
        "runsc_path": runsc_path if local_host else None,
        "daemon_config": None,
        "notes": [],
        "needed_by_policy": needed,
    }
    problems: list[dict[str, str]] = []
    notes: list[str] = report["notes"]
    if entry is None:
        snippet = daemon_config_snippet(name, runsc_path or "")
        if local_host and runsc_path:
            report["daemon_config"] = snippet
            notes.append(
                f"runsc is installed ({runsc_path}) but the engine has no runtime {name!r}: "
                f"add this to {DAEMON_CONFIG} (merge it with what is there), then restart "
                "the daemon; pybox never edits it"
            )
        else:
            notes.append(
                "runsc (gVisor) is not installed: sudo apt-get install runsc, then register "
                f"it in {DAEMON_CONFIG} as `pybox doctor` will show"
            )
        if needed:
            problems.append(
                {
                    "what": "gvisor runtime",
                    "detail": f"the operator's runtime is gvisor ({policy.source}) but the "
                    f"engine has no runtime {name!r}, so every run is refused",
                    "next": f"register runsc in {DAEMON_CONFIG}:\n{snippet}\nthen restart "
                    "the daemon"
                    if runsc_path
                    else "sudo apt-get install runsc, then run `pybox doctor` again",
                }
            )
        return report, problems
    args = set(entry.args)
    if "--network=none" not in args:
        notes.append(
            f"runtime {name!r} is registered without --network=none; boxes have no network "
            "either way (NetworkMode none), but --network=none also keeps gVisor's own "
            "network stack out of the sandbox"
        )
    if "--platform=kvm" in args:
        notes.append(
            "runtime registered with --platform=kvm: it hangs under nested virtualisation; "
            f"use {' '.join(GVISOR_RUNTIME_ARGS)} there"
        )
    if "--oci-seccomp" not in args:
        notes.append(
            "runsc does not load pybox's seccomp profile inside the sandbox (no "
            "--oci-seccomp); gVisor's Sentry handles the program's system calls, and the "
            "receipt says so"
        )
    return report, problems
