"""Colima on macOS: pybox's own VM profile, the tools that drive it, and what runs in it.

pybox runs boxes in a dedicated Colima profile, `pybox`, started with no host
folders, no port forwarding, and nothing changed in the user's Docker context,
SSH config or Colima template. This module is the only code that runs `colima`:

- The `colima` and `docker` executables are taken only from trusted places
  (`tools.py`), never from `$PATH`.
- Every call is an argument list with a minimal environment: `PATH` holds only
  the tools' own folders and the system's, so nothing on the user's `$PATH`
  runs either; `DOCKER_CONFIG` points at a folder of pybox's own, so the docker
  context Colima creates for the profile lands there, not in `~/.docker`.
- The VM's settings are read back (`colima status --json`, the profile's
  `colima.yaml` and Lima's `lima.yaml`, `isolation.py`) and the VM is refused
  when a host folder is mounted or a port can be forwarded.
- Kernel counters of a box are read inside the VM through `colima ssh`
  (`sampler.py`).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pybox._adapters.colima import isolation
from pybox._adapters.colima.tools import HostTool
from pybox._core.errors import PlatformError, VMIsolationError
from pybox._engine import EngineEndpoint

PROFILE = "pybox"
MIN_COLIMA_VERSION = (0, 10, 0)  # the first with `--mount none` and `--port-forwarder none`
SYSTEM_BIN_DIRS = ("/usr/bin", "/bin", "/usr/sbin", "/sbin")
UPGRADE_COMMAND = "brew upgrade colima"
COMMAND_TIMEOUT_S = 120.0
# The VM's container runtime: pybox drives Docker in it.
COLIMA_RUNTIME = "docker"
START_TIMEOUT_S = 1800.0  # the first start downloads the VM image
SSH_TIMEOUT_S = 10.0
# The environment variables passed through to `colima`; everything else is dropped.
PASSED_ENV = ("HOME", "USER", "LOGNAME", "TMPDIR", "LANG", "LC_ALL", "COLIMA_HOME")
_VERSION_RE = re.compile(r"colima version v?(\d+)\.(\d+)\.(\d+)")
_DOCKER_VERSION_RE = re.compile(r"Docker version v?(\d+\.\d+\.\d+)")


# -- the VM ---------------------------------------------------------------------------


@dataclass(frozen=True)
class VMSize:
    """What the user gives the VM (Colima's units: whole CPUs, GiB)."""

    cpus: int = 2
    memory_gib: int = 2
    disk_gib: int = 20


@dataclass(frozen=True)
class VMStatus:
    running: bool
    exists: bool
    detail: str = ""
    docker_socket: str | None = None
    runtime: str | None = None
    kubernetes: bool | None = None
    cpus: int | None = None
    memory_bytes: int | None = None
    disk_bytes: int | None = None
    raw: dict[str, Any] = field(default_factory=dict)


def parse_colima_version(text: str) -> tuple[int, int, int] | None:
    match = _VERSION_RE.search(text)
    if match is None:
        return None
    major, minor, patch = (int(part) for part in match.groups())
    return (major, minor, patch)


def _version_text(version: tuple[int, ...]) -> str:
    return ".".join(map(str, version))


class Colima:
    """Runs `colima` (always with `--profile pybox`) and reads the profile's files."""

    def __init__(
        self,
        colima: HostTool,
        docker: HostTool | None,
        *,
        environ: Mapping[str, str],
        docker_config_dir: Path,
    ) -> None:
        self.colima = colima
        self.docker = docker
        self._environ = dict(environ)
        self.docker_config_dir = docker_config_dir
        home = environ.get("HOME") or str(Path.home())
        self.colima_home = Path(environ.get("COLIMA_HOME") or os.path.join(home, ".colima"))

    # -- files --------------------------------------------------------------------------

    @property
    def profile_config(self) -> Path:
        return self.colima_home / PROFILE / "colima.yaml"

    @property
    def lima_config(self) -> Path:
        return self.colima_home / "_lima" / f"colima-{PROFILE}" / "lima.yaml"

    def created_paths(self) -> list[tuple[str, str]]:
        """The folders Colima creates for the profile, for a dry run to list."""
        return [
            (str(self.colima_home / PROFILE), "the profile's settings (colima.yaml)"),
            (
                str(self.colima_home / "_lima" / f"colima-{PROFILE}"),
                "the VM: its disk, lima.yaml, logs and the engine socket",
            ),
            (
                str(self.colima_home / "_lima" / "_disks" / f"colima-{PROFILE}"),
                "the VM's container data disk",
            ),
            (
                str(self.docker_config_dir),
                "pybox's own DOCKER_CONFIG, where Colima records its docker context "
                "(your ~/.docker is not touched)",
            ),
        ]

    # -- running colima --------------------------------------------------------------------

    def environment(self) -> dict[str, str]:
        folders: list[str] = []
        for tool in (self.colima, self.docker):
            if tool is not None:
                folder = os.path.dirname(tool.path)
                if folder not in folders:
                    folders.append(folder)
        folders += [f for f in SYSTEM_BIN_DIRS if f not in folders]
        env = {key: self._environ[key] for key in PASSED_ENV if self._environ.get(key)}
        env["PATH"] = os.pathsep.join(folders)
        env["DOCKER_CONFIG"] = str(self.docker_config_dir)
        return env

    def run(
        self,
        args: Sequence[str],
        *,
        timeout_s: float = COMMAND_TIMEOUT_S,
        input_text: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        try:
            return self._capture([self.colima.path, *args], timeout_s, input_text)
        except subprocess.TimeoutExpired:
            raise PlatformError(
                f"`colima {' '.join(args)}` did not finish within {timeout_s:g} s. Check the VM "
                f"with `colima status --profile {PROFILE}`."
            ) from None
        except OSError as exc:
            raise PlatformError(f"Cannot run {self.colima.path}: {exc.strerror or exc}.") from exc

    def _capture(
        self, argv: list[str], timeout_s: float, input_text: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run a trusted tool (argv, never a shell) in pybox's own small environment."""
        return subprocess.run(
            argv,
            input=input_text,
            stdin=subprocess.DEVNULL if input_text is None else None,
            capture_output=True,
            text=True,
            encoding="utf-8",
            errors="replace",
            env=self.environment(),
            timeout=timeout_s,
            check=False,
        )

    def _checked(self, args: Sequence[str], *, timeout_s: float = COMMAND_TIMEOUT_S) -> str:
        result = self.run(args, timeout_s=timeout_s)
        if result.returncode != 0:
            raise PlatformError(
                f"`colima {' '.join(args)}` failed (exit {result.returncode}): "
                f"{last_lines(result.stderr or result.stdout)}"
            )
        return result.stdout

    def version(self) -> tuple[int, int, int]:
        output = self._checked(["version"])
        version = parse_colima_version(output)
        if version is None:
            raise PlatformError(
                f"Cannot read Colima's version from {output.strip()[:200]!r}. pybox needs a "
                f"Colima release {_version_text(MIN_COLIMA_VERSION)} or newer: `{UPGRADE_COMMAND}`."
            )
        return version

    def require_version(self) -> tuple[int, int, int]:
        version = self.version()
        if version < MIN_COLIMA_VERSION:
            raise PlatformError(
                f"Colima {_version_text(version)} is too old: pybox needs "
                f"{_version_text(MIN_COLIMA_VERSION)} or newer (for `--mount none` and "
                f"`--port-forwarder none`). Upgrade it: `{UPGRADE_COMMAND}`."
            )
        return version

    def docker_version(self) -> str | None:
        """The docker CLI's version (Colima uses the CLI; pybox itself does not)."""
        if self.docker is None:
            return None
        try:
            result = self._capture([self.docker.path, "--version"], COMMAND_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise PlatformError(f"Cannot run {self.docker.path} --version: {exc}.") from exc
        match = _DOCKER_VERSION_RE.search(result.stdout)
        return match.group(1) if match else None

    @staticmethod
    def start_args(size: VMSize) -> list[str]:
        return [
            "start",
            "--profile",
            PROFILE,
            "--runtime",
            COLIMA_RUNTIME,
            "--mount",
            "none",
            "--port-forwarder",
            "none",
            "--activate=false",
            "--ssh-config=false",
            "--template=false",
            "--kubernetes=false",
            "--cpu",
            str(size.cpus),
            "--memory",
            str(size.memory_gib),
            "--disk",
            str(size.disk_gib),
        ]

    def start(self, size: VMSize) -> None:
        self._checked(self.start_args(size), timeout_s=START_TIMEOUT_S)

    def stop(self) -> None:
        self._checked(["stop", "--profile", PROFILE])

    def delete(self) -> None:
        self._checked(["delete", "--profile", PROFILE, "--force", "--data"])

    def status(self) -> VMStatus:
        result = self.run(["status", "--profile", PROFILE, "--json"])
        exists = self.profile_config.exists()
        if result.returncode != 0:
            message = last_lines(result.stderr or result.stdout)
            lowered = message.lower()
            if "not running" in lowered or "does not exist" in lowered:
                return VMStatus(running=False, exists=exists, detail=message)
            raise PlatformError(
                f"`colima status --profile {PROFILE} --json` failed (exit "
                f"{result.returncode}): {message}"
            )
        try:
            raw = json.loads(result.stdout)
        except ValueError:
            raw = None
        if not isinstance(raw, dict):
            raise PlatformError(
                f"`colima status --json` answered something that is not a JSON object: "
                f"{result.stdout.strip()[:200]!r}"
            )
        socket = raw.get("docker_socket")
        return VMStatus(
            running=True,
            exists=exists,
            docker_socket=socket if isinstance(socket, str) and socket else None,
            runtime=_str_or_none(raw.get("runtime")),
            kubernetes=raw.get("kubernetes") if isinstance(raw.get("kubernetes"), bool) else None,
            cpus=_int_or_none(raw.get("cpu")),
            memory_bytes=_int_or_none(raw.get("memory")),
            disk_bytes=_int_or_none(raw.get("disk")),
            raw=raw,
        )

    # -- isolation ----------------------------------------------------------------------

    def isolation_problems(self, status: VMStatus) -> list[str]:
        """Everything that makes the running profile unlike the one pybox started."""
        problems: list[str] = []
        if status.runtime != COLIMA_RUNTIME:
            problems.append(f"the runtime is {status.runtime!r}, not {COLIMA_RUNTIME!r}")
        if status.kubernetes:
            problems.append("Kubernetes is running in the VM")
        if not (status.docker_socket or "").startswith("unix:///"):
            problems.append(
                f"`colima status` names no unix docker socket ({status.docker_socket!r})"
            )
        return problems + self.config_problems()

    def config_problems(self) -> list[str]:
        """What the profile's own files say against isolation (`isolation.py`)."""
        return isolation.config_problems(self.profile_config, self.lima_config, self.colima_home)

    def verified_endpoint(self) -> tuple[EngineEndpoint, VMStatus]:
        """The engine socket of the running, verified profile; refuses anything else."""
        status = self.status()
        if not status.running:
            raise PlatformError(
                f"The pybox VM (Colima profile {PROFILE}) is not running"
                + (f" ({status.detail})" if status.detail else "")
                + ". Start it with `pybox vm start`"
                + ("" if status.exists else ", after creating it with `pybox setup --yes`")
                + "."
            )
        problems = self.isolation_problems(status)
        if problems:
            raise VMIsolationError(
                f"pybox refuses to use the Colima profile {PROFILE}: "
                + "; ".join(problems)
                + ". Recreate it: `pybox vm delete --yes`, then `pybox setup --yes`."
            )
        assert status.docker_socket is not None
        return (
            EngineEndpoint(
                status.docker_socket[len("unix://") :], f"colima status --json (profile {PROFILE})"
            ),
            status,
        )

    # -- inside the VM --------------------------------------------------------------------

    def ssh_args(self, command: Sequence[str]) -> list[str]:
        # Lima quotes every argument before its remote shell sees it, so an
        # argument list arrives as the same argument list.
        return ["ssh", "--profile", PROFILE, "--", *command]

    def run_in_vm(
        self, command: Sequence[str], *, timeout_s: float = SSH_TIMEOUT_S
    ) -> subprocess.CompletedProcess[str]:
        return self.run(self.ssh_args(command), timeout_s=timeout_s)


def last_lines(text: str, count: int = 3) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return " / ".join(lines[-count:])[:600] or "no message"


def _str_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
