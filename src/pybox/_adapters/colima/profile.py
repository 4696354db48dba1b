"""Colima on macOS: pybox's own VM profile, the tools that drive it, and what runs in it.

pybox runs boxes in a dedicated Colima profile, `pybox`, started with no host
folders, no port forwarding, and nothing changed in the user's Docker context,
SSH config or Colima template. This module is the only code that runs `colima`:

- The `colima` and `docker` executables are taken only from trusted places
  (Homebrew's bin folders or a path given explicitly), never from `$PATH`; the
  file and every folder above it must be owned by root or the user and not
  writable by anyone else (but macOS's `admin` group, as Homebrew sets it up).
- Every call is an argument list with a minimal environment: `PATH` holds only
  the tools' own folders and the system's, so nothing on the user's `$PATH`
  runs either; `DOCKER_CONFIG` points at a folder of pybox's own, so the docker
  context Colima creates for the profile lands there, not in `~/.docker`.
- The VM's settings are read back (`colima status --json`, the profile's
  `colima.yaml` and Lima's `lima.yaml`) and the VM is refused when a host
  folder is mounted or a port can be forwarded.
- Kernel counters of a box are read inside the VM through `colima ssh`.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pybox._adapters import simple_yaml
from pybox._adapters.cgroups import (
    CGROUP_ROOT,
    CgroupCounters,
    CgroupLocation,
    SamplerFactory,
    location_of,
    relative_candidates,
)
from pybox._core.errors import PlatformError, VMIsolationError
from pybox._core.receipt import KernelObserved, Unknown
from pybox._engine import EngineEndpoint

PROFILE = "pybox"
MIN_COLIMA_VERSION = (0, 10, 0)  # the first with `--mount none` and `--port-forwarder none`
HOMEBREW_BIN_DIRS = ("/opt/homebrew/bin", "/usr/local/bin")
MACOS_ADMIN_GIDS = frozenset({80})
SYSTEM_BIN_DIRS = ("/usr/bin", "/bin", "/usr/sbin", "/sbin")
INSTALL_COMMAND = "brew install colima docker"
UPGRADE_COMMAND = "brew upgrade colima"
COMMAND_TIMEOUT_S = 120.0
START_TIMEOUT_S = 1800.0  # the first start downloads the VM image
SSH_TIMEOUT_S = 10.0
VM_SAMPLE_GAP_S = 0.25  # each read is one `colima ssh` round trip
# A sample read blocks the run's watch loop, so it gets little time; after one
# failed read the sampler stops (the receipt says so) rather than stall again.
VM_SAMPLE_TIMEOUT_S = 2.0
# The environment variables passed through to `colima`; everything else is dropped.
PASSED_ENV = ("HOME", "USER", "LOGNAME", "TMPDIR", "LANG", "LC_ALL", "COLIMA_HOME")
CONTAINER_ID_RE = re.compile(r"[0-9a-f]{64}")
_VERSION_RE = re.compile(r"colima version v?(\d+)\.(\d+)\.(\d+)")
_DOCKER_VERSION_RE = re.compile(r"Docker version v?(\d+\.\d+\.\d+)")


# -- trusted executables ------------------------------------------------------------


def _default_trusted_gids() -> frozenset[int]:
    # Homebrew makes its folders writable by the `admin` group (gid 80), whose
    # members can become root anyway; no other group is trusted.
    return MACOS_ADMIN_GIDS if sys.platform == "darwin" else frozenset()


def _writable_by_others(info: os.stat_result, trusted_gids: frozenset[int]) -> bool:
    if info.st_mode & 0o002:
        return True
    return bool(info.st_mode & 0o020) and info.st_gid not in trusted_gids


def untrusted_reason(
    path: str, uid: int | None = None, trusted_gids: frozenset[int] | None = None
) -> str | None:
    """Why `path` is not a trusted executable (None: it is).

    Trusted: a regular executable file, and every folder above both the path as
    given and the file it resolves to, owned by root or this user and writable
    by no one else: not by others, and by a group only if it is a trusted one
    (macOS's `admin`). A sticky folder such as /tmp is allowed above: there only
    an entry's owner can replace it.
    """
    me = os.getuid() if uid is None else uid
    gids = _default_trusted_gids() if trusted_gids is None else trusted_gids
    if not os.path.isabs(path):
        return "it is not an absolute path"
    try:
        real = os.path.realpath(path, strict=True)
        info = os.stat(real)
    except OSError as exc:
        return f"it cannot be read ({exc.strerror or exc})"
    if not stat.S_ISREG(info.st_mode):
        return f"{real} is not a regular file"
    if info.st_uid not in (0, me):
        return f"{real} is owned by uid {info.st_uid}, not by root or you"
    if _writable_by_others(info, gids):
        return f"{real} is writable by group or others (mode {stat.S_IMODE(info.st_mode):o})"
    if not info.st_mode & 0o111:
        return f"{real} is not executable"
    for folder in _folders_above(os.path.abspath(path)) + _folders_above(real):
        try:
            folder_info = os.stat(folder)
        except OSError as exc:
            return f"the folder {folder} cannot be read ({exc.strerror or exc})"
        if folder_info.st_uid not in (0, me):
            return f"the folder {folder} is owned by uid {folder_info.st_uid}, not by root or you"
        if _writable_by_others(folder_info, gids) and not folder_info.st_mode & stat.S_ISVTX:
            mode = stat.S_IMODE(folder_info.st_mode)
            return f"the folder {folder} is writable by group or others (mode {mode:o})"
    return None


def _folders_above(path: str) -> list[str]:
    folders: list[str] = []
    current = os.path.dirname(path)
    while True:
        folders.append(current)
        parent = os.path.dirname(current)
        if parent == current:
            return folders
        current = parent


@dataclass(frozen=True)
class HostTool:
    name: str
    path: str
    found_by: str


def find_tool(name: str, explicit: str | None, search_dirs: Sequence[str]) -> HostTool:
    """`name` from an explicit path, else the first trusted one in `search_dirs`.

    `$PATH` is never searched: a folder on it that someone else can write to
    would let them choose what pybox runs.
    """
    if explicit:
        reason = untrusted_reason(explicit)
        if reason is not None:
            raise PlatformError(
                f"The {name} executable {explicit} is not trusted: {reason}. Use a {name} "
                f"installed by Homebrew ({INSTALL_COMMAND}) or fix the ownership and permissions."
            )
        return HostTool(name, explicit, "explicit path")
    refused: list[str] = []
    for folder in search_dirs:
        candidate = os.path.join(folder, name)
        if not os.path.lexists(candidate):
            continue
        reason = untrusted_reason(candidate)
        if reason is None:
            return HostTool(name, candidate, f"trusted folder {folder}")
        refused.append(f"{candidate} ({reason})")
    where = ", ".join(search_dirs)
    if refused:
        raise PlatformError(
            f"Found {name} but not in a trusted state: {'; '.join(refused)}. Fix the ownership "
            f"and permissions, or reinstall with Homebrew ({INSTALL_COMMAND})."
        )
    raise PlatformError(
        f"{name} was not found in {where} (pybox does not search $PATH). Install it with "
        f"`{INSTALL_COMMAND}`, or name a trusted executable explicitly."
    )


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
            "docker",
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

    def _read_yaml(self, path: Path, problems: list[str]) -> dict[str, Any] | None:
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

    def isolation_problems(self, status: VMStatus) -> list[str]:
        """Everything that makes the running profile unlike the one pybox started."""
        problems: list[str] = []
        if status.runtime != "docker":
            problems.append(f"the runtime is {status.runtime!r}, not 'docker'")
        if status.kubernetes:
            problems.append("Kubernetes is running in the VM")
        if not (status.docker_socket or "").startswith("unix:///"):
            problems.append(
                f"`colima status` names no unix docker socket ({status.docker_socket!r})"
            )
        return problems + self.config_problems()

    def config_problems(self) -> list[str]:
        """What the profile's own files say against isolation (cheap: two local reads)."""
        problems: list[str] = []
        profile = self._read_yaml(self.profile_config, problems)
        if profile is not None:
            for mount in profile.get("mounts") or []:
                location = mount.get("location") if isinstance(mount, dict) else mount
                if str(location).strip().lower() != "none":
                    problems.append(f"{self.profile_config} mounts the host folder {location!r}")
            forwarder = profile.get("portForwarder")
            if str(forwarder).lower() != "none":
                problems.append(
                    f"{self.profile_config} sets portForwarder {forwarder!r}, not 'none'"
                )
            kubernetes = profile.get("kubernetes")
            if isinstance(kubernetes, dict) and kubernetes.get("enabled"):
                problems.append(f"{self.profile_config} enables Kubernetes")
            if profile.get("runtime") not in (None, "docker"):
                problems.append(f"{self.profile_config} sets runtime {profile.get('runtime')!r}")
        lima = self._read_yaml(self.lima_config, problems)
        if lima is not None:
            for mount in lima.get("mounts") or []:
                location = mount.get("location") if isinstance(mount, dict) else mount
                problems.append(f"{self.lima_config} mounts the host folder {location!r}")
            for rule in lima.get("portForwards") or []:
                reason = self._forward_problem(rule)
                if reason:
                    problems.append(f"{self.lima_config}: {reason}")
        return problems

    def _forward_problem(self, rule: Any) -> str | None:
        """Only rules that forward nothing, or the engine's unix socket into the
        profile's own folder, are allowed."""
        if not isinstance(rule, dict):
            return f"unreadable port-forward rule {rule!r}"
        if rule.get("ignore") is True:
            return None
        host_socket = rule.get("hostSocket")
        if rule.get("guestSocket") and isinstance(host_socket, str):
            inside = os.path.abspath(host_socket).startswith(str(self.colima_home) + os.sep)
            return None if inside else f"a socket is forwarded to {host_socket}, outside Colima"
        return f"a port-forward rule is active: {rule!r}"

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


# -- kernel counters inside the VM -------------------------------------------------------


def read_command(paths: Sequence[str]) -> list[str]:
    """`grep` prints every line of every file prefixed by its path; missing files
    are skipped (`-s`). Paths come from constants and a checked container ID."""
    return ["grep", "-H", "-s", "^", *paths]


def parse_read(output: str, paths: Sequence[str]) -> dict[str, str]:
    """`path:line` lines -> path -> text."""
    found: dict[str, list[str]] = {}
    known = set(paths)
    for line in output.splitlines():
        path, sep, rest = line.partition(":")
        if sep and path in known:
            found.setdefault(path, []).append(rest)
    return {path: "\n".join(lines) + "\n" for path, lines in found.items()}


class VMCgroupSampler(CgroupCounters):
    """Reads a box's cgroup files inside the VM, one `colima ssh` per sample.

    Reads are rationed to one every `VM_SAMPLE_GAP_S` unless forced (as the box
    starts, as the program ends, before a kill), because each is a round trip.
    """

    def __init__(self, colima: Colima, location: CgroupLocation, gap_s: float) -> None:
        super().__init__(location, gap_s)
        self._colima = colima
        self._paths = {path: name for name, path in location.files.items()}
        self._last_read = 0.0
        self.failure: str | None = None

    def _read_values(self) -> dict[str, str]:
        self._last_read = time.monotonic()
        paths = list(self._paths)
        try:
            result = self._colima.run_in_vm(read_command(paths), timeout_s=VM_SAMPLE_TIMEOUT_S)
        except PlatformError as exc:
            self.failure = str(exc)
            return {}
        texts = parse_read(result.stdout, paths)
        if not texts and result.stderr.strip():
            # `grep -s` is silent about missing files: a message is from colima or ssh.
            self.failure = f"`colima ssh` failed (exit {result.returncode}): " + last_lines(
                result.stderr
            )
        return {self._paths[path]: text for path, text in texts.items()}

    def sample(self, *, force: bool = False) -> bool:
        if not force and not self.gone and time.monotonic() - self._last_read < self.interval_s:
            return True
        return super().sample()

    def observation(self) -> tuple[KernelObserved, list[Unknown]]:
        observed, unknown = super().observation()
        unknown.append(
            Unknown(
                "kernel counters between samples",
                f"read inside the VM over `colima ssh` about every {self.interval_s:g} s (and as "
                "the program ends); counters without a kernel peak file are highest samples",
            )
        )
        if self.failure:
            unknown.append(Unknown("some kernel samples", f"a read failed: {self.failure}"))
        return observed, unknown


def locate_in_vm(colima: Colima, container_id: str) -> CgroupLocation | None:
    """Find the box's cgroup inside the VM with one read of a probe file per layout."""
    if not CONTAINER_ID_RE.fullmatch(container_id):
        raise PlatformError(f"Refusing to look up an unexpected container ID {container_id!r}.")
    probes: dict[str, tuple[int, str]] = {}
    for relative in relative_candidates(container_id):
        probes[f"{CGROUP_ROOT}/{relative}/memory.max"] = (2, relative)
        probes[f"{CGROUP_ROOT}/memory/{relative}/memory.limit_in_bytes"] = (1, relative)
    result = colima.run_in_vm(read_command(list(probes)))
    answered = parse_read(result.stdout, list(probes))
    for path, (version, relative) in probes.items():
        if path in answered:
            return location_of(version, relative, CGROUP_ROOT)
    return None


def vm_sampler_factory(colima: Colima, gap_s: float = VM_SAMPLE_GAP_S) -> SamplerFactory:
    def factory(container_id: str) -> VMCgroupSampler | None:
        try:
            location = locate_in_vm(colima, container_id)
        except PlatformError:
            return None  # the run records the kernel counters as unknown
        return None if location is None else VMCgroupSampler(colima, location, gap_s)

    return factory


def last_lines(text: str, count: int = 3) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return " / ".join(lines[-count:])[:600] or "no message"


def _str_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
