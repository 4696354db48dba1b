"""The isolation lanes a box can run in, and the operator's choice among them (pure).

A lane is what stands between the program and the host kernel:

- `runc`: a container on the host kernel, confined by pybox's seccomp profile,
  AppArmor (where the host has it), dropped capabilities and cgroups;
- `gvisor`: the same container settings, run by gVisor's `runsc`: the program's
  system calls go to gVisor's Sentry, a kernel in user space, and only the
  Sentry (under gVisor's own seccomp filter) talks to the host kernel.

The operator names a default lane (`runtime = "gvisor"`) and the lanes a run may
ask for (`allowed_runtimes`); a run asking for another lane is refused, never
moved to the default. The engine knows gVisor under the name it was registered
with (`runsc` by default): that name is sent as HostConfig.Runtime and read back.
How each limit is applied in each lane is in `pybox._core.runtime_limits`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pybox._core.errors import ConfigError, EgressRefused, RuntimeNotAllowed, RuntimeUnavailable

RUNC = "runc"
GVISOR = "gvisor"
LANES = (RUNC, GVISOR)
DEFAULT_GVISOR_ENGINE_RUNTIME = "runsc"
# The runsc flags pybox's documentation and `pybox doctor` give for this kind of
# machine: ptrace works without nested virtualisation (KVM hangs there), and a box
# has no network anyway.
GVISOR_RUNTIME_ARGS = ("--platform=ptrace", "--network=none")


@dataclass(frozen=True)
class RuntimeChoice:
    """The lane of one run: pybox's name for it, the engine's name, and who chose it."""

    lane: str = RUNC
    engine_runtime: str = RUNC
    chosen_by: str = "built-in"
    # The runtime's arguments as the engine reports them (GET /info), when it does.
    engine_runtime_args: tuple[str, ...] = ()

    @property
    def shares_host_kernel(self) -> bool:
        return self.lane == RUNC

    @property
    def kernel_status_required(self) -> tuple[tuple[str, str], ...]:
        """What the box's PID 1 must read in /proc/self/status before a program runs.
        Under runc the host kernel applies pybox's seccomp filter (mode 2) and
        no-new-privileges, and says so; under gVisor the Sentry is the kernel, shows
        neither and loads no OCI profile (docs/isolation.md), so nothing is required."""
        return (("Seccomp", "2"), ("NoNewPrivs", "1")) if self.shares_host_kernel else ()


RUNC_CHOICE = RuntimeChoice()


def _lane(value: object, where: str) -> str:
    if value not in LANES:
        raise ConfigError(f"{where}: a runtime is one of {', '.join(LANES)}, not {value!r}.")
    return str(value)


@dataclass(frozen=True)
class RuntimePolicy:
    """The operator's lanes: the default one and those a run may ask for."""

    default: str = RUNC
    allowed: tuple[str, ...] = LANES
    gvisor_engine_runtime: str = DEFAULT_GVISOR_ENGINE_RUNTIME
    source: str = "built-in"

    def __post_init__(self) -> None:
        for lane in (self.default, *self.allowed):
            _lane(lane, self.source)
        if not self.allowed:
            raise ConfigError(f"{self.source}: allowed_runtimes names no runtime.")
        if self.default not in self.allowed:
            raise ConfigError(
                f"{self.source}: the default runtime {self.default!r} is not among the "
                f"allowed runtimes ({', '.join(self.allowed)}). Add it to allowed_runtimes "
                "or choose one of them as runtime."
            )
        if not self.gvisor_engine_runtime or not all(
            c.isalnum() or c in "-_." for c in self.gvisor_engine_runtime
        ):
            raise ConfigError(
                f"{self.source}: gvisor.engine_runtime must be the name gVisor is registered "
                f"under in the engine (for example runsc), not {self.gvisor_engine_runtime!r}."
            )

    def engine_runtime(self, lane: str) -> str:
        return self.gvisor_engine_runtime if lane == GVISOR else RUNC

    def choose(self, requested: str | None) -> RuntimeChoice:
        """The lane for a run that asked for `requested` (None: the default), or a refusal."""
        if requested is None:
            lane, chosen_by = self.default, f"the operator's default ({self.source})"
        else:
            lane, chosen_by = requested, "the run's request"
            if lane not in LANES:
                raise RuntimeNotAllowed(
                    f"Runtime {lane!r} is not one pybox knows; ask for one of {', '.join(LANES)}."
                )
            if lane not in self.allowed:
                raise RuntimeNotAllowed(
                    f"Runtime {lane!r} is not allowed by the operator ({self.source}): "
                    f"allowed are {', '.join(self.allowed)}. Ask for one of those, or ask "
                    "the operator to add it to allowed_runtimes."
                )
        return RuntimeChoice(lane, self.engine_runtime(lane), chosen_by)

    def to_dict(self) -> dict[str, Any]:
        return {
            "default": self.default,
            "allowed": list(self.allowed),
            "gvisor_engine_runtime": self.gvisor_engine_runtime,
            "source": self.source,
        }


def policy_from_settings(
    base: RuntimePolicy,
    default: object | None,
    allowed: object | None,
    engine_runtime: object | None,
    where: str,
) -> RuntimePolicy:
    """`base` with the settings given (None: unchanged), checked."""
    if default is not None:
        default = _lane(default, where)
    if allowed is not None:
        if isinstance(allowed, str):
            allowed = [item.strip() for item in allowed.split(",") if item.strip()]
        if not isinstance(allowed, Sequence) or not all(isinstance(a, str) for a in allowed):
            raise ConfigError(f"{where}: allowed_runtimes must be a list of runtime names.")
        allowed = tuple(dict.fromkeys(_lane(a, where) for a in allowed))
    if engine_runtime is not None and not isinstance(engine_runtime, str):
        raise ConfigError(f"{where}: gvisor.engine_runtime must be a string.")
    new_allowed = base.allowed if allowed is None else allowed
    new_default = base.default if default is None else default
    if default is None and new_default not in new_allowed and len(new_allowed) == 1:
        new_default = new_allowed[0]  # "only gvisor allowed" makes gvisor the default
    return RuntimePolicy(
        default=str(new_default),
        allowed=tuple(new_allowed),
        gvisor_engine_runtime=base.gvisor_engine_runtime
        if engine_runtime is None
        else engine_runtime,
        source=where,
    )


# -- what the engine says it has ----------------------------------------------------


@dataclass(frozen=True)
class EngineRuntime:
    """One runtime registered with the engine (GET /info `Runtimes`)."""

    name: str
    path: str
    args: tuple[str, ...]

    @property
    def is_gvisor(self) -> bool:
        return DEFAULT_GVISOR_ENGINE_RUNTIME in (self.path.rsplit("/", 1)[-1], self.name)


def engine_runtimes(info: Mapping[str, Any]) -> tuple[EngineRuntime, ...]:
    runtimes = info.get("Runtimes") or {}
    found = []
    for name, raw in sorted(runtimes.items()) if isinstance(runtimes, Mapping) else ():
        entry: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
        args = entry.get("runtimeArgs") or ()
        found.append(
            EngineRuntime(
                str(name),
                str(entry.get("path") or ""),
                tuple(str(a) for a in args) if isinstance(args, list) else (),
            )
        )
    return tuple(found)


def daemon_config_snippet(name: str = DEFAULT_GVISOR_ENGINE_RUNTIME, path: str = "") -> str:
    """The daemon.json entry that registers runsc (the operator adds it; pybox never does)."""
    args = ", ".join(f'"{a}"' for a in GVISOR_RUNTIME_ARGS)
    return (
        "{\n"
        '  "runtimes": {\n'
        f'    "{name}": {{"path": "{path or "/usr/bin/runsc"}", "runtimeArgs": [{args}]}}\n'
        "  }\n"
        "}"
    )


def resolve_on_engine(choice: RuntimeChoice, info: Mapping[str, Any]) -> RuntimeChoice:
    """`choice` with the engine's arguments for it; a lane the engine lacks is refused."""
    if choice.lane == RUNC:
        return choice
    for runtime in engine_runtimes(info):
        if runtime.name == choice.engine_runtime:
            return RuntimeChoice(choice.lane, choice.engine_runtime, choice.chosen_by, runtime.args)
    registered = ", ".join(r.name for r in engine_runtimes(info)) or "none"
    raise RuntimeUnavailable(
        f"The gvisor runtime needs the engine to have gVisor registered as "
        f"{choice.engine_runtime!r}; it has {registered}. Install runsc and add it to the "
        "daemon's configuration (`pybox doctor` prints the exact entry), then restart the "
        "daemon; or run with the runc runtime."
    )


def refuse_egress_without_network(mode: str, choice: RuntimeChoice) -> None:
    """A box that may reach out (egress `packages` or `open`) needs a network stack;
    runsc registered with `--network=none` gives its boxes none, so pybox's proxy
    could never be reached: refused before anything is made, never run silently
    without the network the receipt would name."""
    if (
        mode == "none"
        or choice.lane != GVISOR
        or "--network=none" not in choice.engine_runtime_args
    ):
        return
    raise EgressRefused(
        f"egress {mode!r} cannot work in the gVisor lane here: the engine runs "
        f"{choice.engine_runtime!r} with --network=none, which gives a box no network stack, "
        "so pybox's egress proxy is unreachable from it. Run it with egress none, or ask "
        "for runtime runc for a run that needs the network (docs/isolation.md)."
    )
