"""Where boxes run: the local engine (Linux) or pybox's own Colima VM (macOS).

The choice comes from the operating system, unless the operator sets
`platform = "linux" | "colima"` in the config file or `PYBOX_PLATFORM` in the
environment (for tests, or an unusual setup such as Colima on Linux). Everything
else (the engine, the receipts, the front ends) is the same on both.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from pybox._adapters.cgroups import (
    Sampler,
    SamplerFactory,
    engine_path_sampler_factory,
)
from pybox._adapters.config import Settings
from pybox._adapters.host_facts import owner_alive
from pybox._boxes.outputs import FileMarker
from pybox._boxes.program import SAMPLE_INTERVAL_S
from pybox._core.errors import InvalidRequest, PlatformError, VMIsolationError
from pybox._engine import DockerEngine, Engine, connect_engine, find_endpoint

# The Colima driver is imported where the VM is used: a Linux run does not pay for it.
if TYPE_CHECKING:
    from pybox._adapters.colima.profile import Colima, VMSize


@dataclass(frozen=True)
class PlatformChoice:
    name: str  # "linux" or "colima"
    chosen_by: str


def choose_platform(settings: Settings, sys_platform: str | None = None) -> PlatformChoice:
    if settings.platform != "auto":
        return PlatformChoice(settings.platform, settings.platform_source)
    system = sys_platform or sys.platform
    if system == "darwin":
        return PlatformChoice("colima", "macOS (sys.platform darwin)")
    return PlatformChoice("linux", f"the operating system (sys.platform {system})")


@dataclass(frozen=True)
class ToolPaths:
    """Explicit tool paths given on the command line (they win over the config)."""

    colima: str | None = None
    docker: str | None = None


NO_TOOL_PATHS = ToolPaths()


def make_colima(
    settings: Settings,
    environ: Mapping[str, str],
    tools: ToolPaths = NO_TOOL_PATHS,
    *,
    search_dirs: Sequence[str] | None = None,
    require_docker: bool = True,
) -> Colima:
    """Find the tools (explicit flag, then PYBOX_COLIMA / PYBOX_DOCKER_CLI, then
    the config file, then `search_dirs`: Homebrew's folders) and return the Colima driver."""
    from pybox._adapters.colima.profile import Colima
    from pybox._adapters.colima.tools import HOMEBREW_BIN_DIRS, find_tool

    search_dirs = HOMEBREW_BIN_DIRS if search_dirs is None else search_dirs
    colima = find_tool(
        "colima",
        tools.colima or environ.get("PYBOX_COLIMA") or settings.colima.colima,
        search_dirs,
    )
    docker_path = tools.docker or environ.get("PYBOX_DOCKER_CLI") or settings.colima.docker
    try:
        docker = find_tool("docker", docker_path, search_dirs)
    except PlatformError:
        if require_docker:
            raise
        docker = None  # pybox talks to the engine socket itself; Colima needs the CLI
    return Colima(
        colima,
        docker,
        environ=environ,
        docker_config_dir=settings.state_dir / "colima-docker-config",
    )


def vm_size(settings: Settings) -> VMSize:
    from pybox._adapters.colima.profile import VMSize

    colima = settings.colima
    return VMSize(cpus=colima.cpus, memory_gib=colima.memory_gib, disk_gib=colima.disk_gib)


class Host(Protocol):
    """Where a session's boxes run: how to reach the engine, watch a box's
    counters, mark returned files and tell whether a box's owner is alive.
    One class per place (`LocalHost`, `ColimaHost`); callers never compare names."""

    settings: Settings
    environ: Mapping[str, str]
    choice: PlatformChoice

    @property
    def name(self) -> str:
        """The platform's name, for people and reports ("linux", "colima")."""
        ...

    @property
    def in_vm(self) -> bool:
        """True when boxes run in pybox's own VM rather than on this machine's engine."""
        ...

    def connect(self) -> Engine: ...

    def check_before_run(self) -> None:
        """Refuse to run when the place boxes run in is no longer as pybox set it up."""
        ...

    def sampler_factory(self) -> SamplerFactory: ...

    def output_marker(self) -> FileMarker | None: ...

    def owner_alive(self, owner: str) -> bool | None:
        """Whether the pybox process named in a box's owner label is alive (None: unknown)."""
        ...

    def colima(self) -> Colima:
        """The checked Colima driver; only a host in a VM has one."""
        ...


class LocalHost:
    """Boxes run on this machine's engine (Linux)."""

    in_vm = False

    def __init__(
        self, settings: Settings, environ: Mapping[str, str], choice: PlatformChoice
    ) -> None:
        self.settings = settings
        self.environ: Mapping[str, str] = dict(environ)
        self.choice = choice
        self._engine: Engine | None = None

    @property
    def name(self) -> str:
        return self.choice.name

    def connect(self) -> Engine:
        """Docker or Podman (`engine` in the config, PYBOX_ENGINE, or found), driven
        as what its answers say it is."""
        choice = self.settings.engine
        engine = connect_engine(find_endpoint(self.environ, choice), choice)
        self._engine = engine
        return engine

    def check_before_run(self) -> None:
        return None

    def sampler_factory(self) -> SamplerFactory:
        """Counters from the cgroup the engine names (Podman), else its usual layouts."""
        return engine_path_sampler_factory(SAMPLE_INTERVAL_S, lambda: self._engine)

    def output_marker(self) -> FileMarker | None:
        return None

    def owner_alive(self, owner: str) -> bool | None:
        return owner_alive(owner)

    def colima(self) -> Colima:
        raise InvalidRequest(
            f"There is no pybox VM here (platform {self.name}, chosen by "
            f"{self.choice.chosen_by}): boxes run on the local engine. The VM is used on "
            "macOS, or with PYBOX_PLATFORM=colima."
        )


class ColimaHost:
    """Boxes run in pybox's own Colima VM (macOS); pybox itself runs on the Mac."""

    in_vm = True

    def __init__(
        self, settings: Settings, environ: Mapping[str, str], choice: PlatformChoice
    ) -> None:
        self.settings = settings
        self.environ: Mapping[str, str] = dict(environ)
        self.choice = choice
        self._colima: Colima | None = None
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return self.choice.name

    def colima(self) -> Colima:
        """The checked Colima driver (found in a trusted place, new enough)."""
        with self._lock:
            if self._colima is None:
                colima = make_colima(self.settings, self.environ, require_docker=False)
                colima.require_version()
                self._colima = colima
            return self._colima

    def connect(self) -> Engine:
        endpoint, _ = self.colima().verified_endpoint()
        return DockerEngine.connect(endpoint)

    def check_before_run(self) -> None:
        """Re-read the profile's files before every box: a long-lived session must
        not keep using a VM that was reconfigured with a mount or a port forwarder
        after it connected."""
        from pybox._adapters.colima.profile import PROFILE

        problems = self.colima().config_problems()
        if problems:
            raise VMIsolationError(
                f"pybox refuses to use the Colima profile {PROFILE}: "
                + "; ".join(problems)
                + ". Recreate it: `pybox vm delete --yes`, then `pybox setup --yes`."
            )

    def sampler_factory(self) -> SamplerFactory:
        from pybox._adapters.colima.sampler import vm_sampler_factory

        def factory(container_id: str) -> Sampler | None:
            return vm_sampler_factory(self.colima())(container_id)

        return factory

    def output_marker(self) -> FileMarker | None:
        """Returned files from the VM get the macOS quarantine mark."""

        def mark(paths: list[Path]) -> None:
            from pybox._adapters.quarantine import mark_quarantined  # only the Mac's runs

            mark_quarantined(paths)

        return mark

    def owner_alive(self, owner: str) -> bool | None:
        # Owners are pybox processes on the Mac, where this runs, not in the VM.
        return owner_alive(owner)


HOSTS: dict[str, Callable[[Settings, Mapping[str, str], PlatformChoice], Host]] = {
    "linux": LocalHost,
    "colima": ColimaHost,
}


def open_host(settings: Settings, environ: Mapping[str, str] | None = None) -> Host:
    env = os.environ if environ is None else environ
    choice = choose_platform(settings)
    return HOSTS[choice.name](settings, env, choice)
