"""Checks `pybox mcp` makes before it serves anything (pure: the caller brings the facts).

A server that starts with a setting that cannot work fails every agent call
later, far from the operator who can fix it. So what is certain to fail is
refused at start (exit 2, nothing started), and what only might is said on
stderr at start.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from pybox._core.errors import ConfigError
from pybox._core.limits import MIB, Policy


def check_images(allowed: tuple[str, ...] | None, recorded: Iterable[str], where: str) -> None:
    """Every image named with --images must be one pybox recorded."""
    if allowed is None:
        return
    known = sorted(recorded)
    missing = [name for name in allowed if name not in known]
    if not allowed:
        raise ConfigError("--images names no image; name at least one, or leave it out.")
    if missing:
        names = ", ".join(map(repr, missing))
        raise ConfigError(
            f"--images: no image {names} is recorded in {where} (recorded: "
            f"{', '.join(known) or 'none'}). Build it with `pybox image build NAME` (stdlib: "
            "`pybox setup --yes`), or leave it out of --images."
        )


@dataclass(frozen=True)
class Machine:
    """The engine machine's size, as the engine reports it (`/info`: NCPU, MemTotal)."""

    cpus: int | None
    memory_bytes: int | None


def machine_fit(policy: Policy, machine: Machine) -> tuple[list[str], list[str]]:
    """(problems, warnings) of the policy on this machine.

    A default above the machine is a problem: every run that asks for nothing
    would be refused. A ceiling above it is a warning: the built-in ceilings
    (4 CPUs, 8192 MiB) are above many small machines, and runs up to the
    machine still work; a run asking above the machine is refused at call time.
    """
    problems: list[str] = []
    warnings: list[str] = []
    checks = (
        (
            "memory",
            policy.defaults.memory_bytes,
            policy.ceilings.memory_bytes,
            machine.memory_bytes,
        ),
        ("cpus", policy.defaults.cpus, policy.ceilings.cpus, machine.cpus),
    )
    for what, default, ceiling, available in checks:
        if available is None or available <= 0:
            continue
        if what == "memory":
            has = f"{available / MIB:.0f} MiB of memory"
            shown_default, shown_ceiling = f"{default // MIB} MiB", f"{ceiling // MIB} MiB"
            default_key, ceiling_flag = "--default-memory (defaults.memory_mib)", "--max-memory"
        else:
            has = f"{available} CPU{'' if available == 1 else 's'}"
            shown_default, shown_ceiling = f"{default:g} CPUs", f"{ceiling:g} CPUs"
            default_key, ceiling_flag = "defaults.cpus (PYBOX_DEFAULT_CPUS)", "--max-cpus"
        if default > available:
            problems.append(
                f"The default {what} ({shown_default}) is above what the engine's machine has "
                f"({has}, engine-observed): every run would be refused. Lower {default_key}."
            )
        elif ceiling > available:
            warnings.append(
                f"the {what} ceiling ({shown_ceiling}) is above what the engine's machine has "
                f"({has}, engine-observed); a run asking for more than the machine has is "
                f"refused. Lower {ceiling_flag} to say so in the tool descriptions."
            )
    return problems, warnings
