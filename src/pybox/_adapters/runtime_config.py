"""The operator's runtime settings: the default isolation lane and the allowed ones.

In the config file: top-level `runtime = "runc" | "gvisor"`, `allowed_runtimes =
["runc", "gvisor"]` (the lanes a run may ask for; `["gvisor"]` makes gVisor the
only one), and a `[gvisor]` table whose `engine_runtime` is the name runsc is
registered under in the engine (default `runsc`). In the environment, later and
winning: `PYBOX_RUNTIME`, `PYBOX_ALLOWED_RUNTIMES` (comma-separated) and
`PYBOX_GVISOR_ENGINE_RUNTIME`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pybox._core.errors import ConfigError
from pybox._core.runtimes import RuntimePolicy, policy_from_settings

RUNTIME_SECTIONS = ("runtime", "allowed_runtimes", "gvisor")
GVISOR_KEYS = ("engine_runtime",)
RUNTIME_ENV = ("PYBOX_RUNTIME", "PYBOX_ALLOWED_RUNTIMES", "PYBOX_GVISOR_ENGINE_RUNTIME")


def runtime_policy_from_file(
    base: RuntimePolicy, data: Mapping[str, Any], path: Path
) -> RuntimePolicy:
    if not any(key in data for key in RUNTIME_SECTIONS):
        return base
    gvisor = data.get("gvisor", {})
    if not isinstance(gvisor, dict):
        raise ConfigError(f"{path}: [gvisor] must be a table, not {gvisor!r}.")
    unknown = sorted(set(gvisor) - set(GVISOR_KEYS))
    if unknown:
        raise ConfigError(
            f"{path}: unknown [gvisor] setting {', '.join(unknown)}. "
            f"Known: {', '.join(GVISOR_KEYS)}."
        )
    return policy_from_settings(
        base,
        data.get("runtime"),
        data.get("allowed_runtimes"),
        gvisor.get("engine_runtime"),
        str(path),
    )


def runtime_policy_from_env(base: RuntimePolicy, environ: Mapping[str, str]) -> RuntimePolicy:
    if not any(environ.get(name) for name in RUNTIME_ENV):
        return base
    return policy_from_settings(
        base,
        environ.get("PYBOX_RUNTIME") or None,
        environ.get("PYBOX_ALLOWED_RUNTIMES") or None,
        environ.get("PYBOX_GVISOR_ENGINE_RUNTIME") or None,
        "environment",
    )
