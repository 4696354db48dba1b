"""Building the stdlib image's tree inside pybox's Colima VM (macOS).

A Mac has no debootstrap, so the Debian tree is bootstrapped in pybox's own VM
(Ubuntu): the tools it needs (debootstrap, Debian's archive keyring, python3)
are installed there from the VM's own apt sources if missing, which changes
pybox's VM and nothing on the Mac. The tree is prepared by the same code as on
Linux (`rootfs_prepare.py`, sent to `python3 -` in the VM) and streamed out as
a tar over `colima ssh` to the engine's image import. The build folder in the
VM is removed on every exit path.

Every command is an argument list passed through `colima ssh --profile pybox
--`; Lima quotes each argument before the VM's shell sees it. The values in
them are constants, the VM's own `mktemp` answer (checked against a pattern),
and the mirror and suite, which are checked first as well.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import resources

from pybox._adapters.colima import profile as colima_module
from pybox._adapters.colima.profile import Colima, last_lines
from pybox._adapters.rootfs import (
    CommandRunner,
    PreparedTree,
    Progress,
    run_debootstrap,
    tar_stream,
)
from pybox._core.errors import ConfigError, ImageBuildError, PlatformError
from pybox._core.posture import BOX_GID, BOX_HOSTNAME, BOX_UID, PYBOX_ROOT

# Lima's user in the VM has password-less sudo; -n makes a prompt an error, never a hang.
SUDO = ("sudo", "-n")
VM_BUILD_TOOLS = ("debootstrap", "debian-archive-keyring", "python3")
VM_DEBIAN_KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
# On the VM's disk, not a RAM-backed /tmp: the tree is a few hundred MB.
VM_BUILD_TEMPLATE = "/var/tmp/pybox-build-XXXXXXXXXX"
VM_BUILD_DIR_RE = re.compile(r"/var/tmp/pybox-build-[A-Za-z0-9]{10}")
VM_INSTALL_TIMEOUT_S = 900.0
VM_STEP_TIMEOUT_S = 600.0
# What may reach the VM's shell as the mirror and the suite (after Lima's quoting).
MIRROR_RE = re.compile(r"https?://[A-Za-z0-9][A-Za-z0-9.\-]*(:[0-9]{1,5})?(/[A-Za-z0-9._~%+\-/]*)?")
SUITE_RE = re.compile(r"[a-z][a-z0-9\-]{0,31}")


def check_build_source(mirror: str | None, suite: str | None) -> tuple[str, str]:
    """The mirror and suite for a build in the VM: named explicitly, and plain."""
    if not mirror or not suite:
        missing = " and ".join(
            flag for flag, value in (("--mirror URL", mirror), ("--suite NAME", suite)) if not value
        )
        raise ConfigError(
            "Building the stdlib image in pybox's VM needs the Debian mirror and suite named "
            f"explicitly (a Mac has no apt sources to read them from): pass {missing}, for "
            "example the mirror your Linux machines use and the suite bookworm, or set "
            "mirror and suite in the [colima] table of the config file."
        )
    mirror = mirror.rstrip("/")
    if not MIRROR_RE.fullmatch(mirror):
        raise ConfigError(
            f"--mirror {mirror!r} is not a plain http(s) URL (letters, digits and . - _ ~ % + / "
            "only); pass the Debian mirror's URL."
        )
    if not SUITE_RE.fullmatch(suite):
        raise ConfigError(f"--suite {suite!r} is not a Debian suite name such as bookworm.")
    return mirror, suite


def probe_command() -> list[str]:
    return ["dpkg-query", "-W", "-f=${Package} ${db:Status-Abbrev}\\n", *VM_BUILD_TOOLS]


def apt_update_command() -> list[str]:
    return [*SUDO, "apt-get", "update", "-q"]


def apt_install_command(packages: tuple[str, ...]) -> list[str]:
    return [
        *SUDO,
        "env",
        "DEBIAN_FRONTEND=noninteractive",
        "apt-get",
        "install",
        "-y",
        "-q",
        "--no-install-recommends",
        *packages,
    ]


def mktemp_command() -> list[str]:
    return [*SUDO, "mktemp", "-d", VM_BUILD_TEMPLATE]


def prepare_command(root: str, python_path: str) -> list[str]:
    return [
        *SUDO,
        "python3",
        "-",
        root,
        BOX_HOSTNAME,
        str(BOX_UID),
        str(BOX_GID),
        PYBOX_ROOT,
        python_path,
    ]


def remove_command(folder: str) -> list[str]:
    # --one-file-system: never follow into a mount debootstrap may have left behind.
    return [*SUDO, "rm", "-rf", "--one-file-system", "--", folder]


def prepare_program() -> str:
    """pybox's own preparation code, verbatim (it imports nothing of pybox)."""
    return resources.files("pybox._adapters").joinpath("rootfs_prepare.py").read_text("utf-8")


def missing_tools(probe_output: str) -> tuple[str, ...]:
    installed = set()
    for line in probe_output.splitlines():
        name, _, status = line.strip().partition(" ")
        if status.startswith("ii"):
            installed.add(name)
    return tuple(tool for tool in VM_BUILD_TOOLS if tool not in installed)


class VMRootfsBuilder:
    """debootstrap inside pybox's Colima VM; the same tree and recipe as on Linux."""

    where = f"pybox's VM (Colima profile {colima_module.PROFILE})"

    def __init__(self, colima: Colima) -> None:
        self._colima = colima
        self.runner = CommandRunner(
            prefix=(colima.colima.path, *colima.ssh_args(SUDO)),
            env=colima.environment(),
            where=self.where,
        )

    def _run(
        self, command: list[str], what: str, *, timeout_s: float, input_text: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        try:
            result = self._colima.run(
                self._colima.ssh_args(command), timeout_s=timeout_s, input_text=input_text
            )
        except PlatformError as exc:
            raise ImageBuildError(f"Cannot {what} in {self.where}: {exc}") from exc
        if result.returncode != 0:
            raise ImageBuildError(
                f"Cannot {what} in {self.where}: `{' '.join(command)}` failed (exit "
                f"{result.returncode}): {last_lines(result.stderr or result.stdout)}"
            )
        return result

    def require_tools(self, progress: Progress) -> None:
        try:
            probe = self._colima.run_in_vm(probe_command(), timeout_s=VM_STEP_TIMEOUT_S)
        except PlatformError as exc:
            raise ImageBuildError(
                f"Cannot look for the build tools in {self.where}: {exc}"
            ) from exc
        missing = missing_tools(probe.stdout)
        if not missing:
            progress(f"found {', '.join(VM_BUILD_TOOLS)} in {self.where}")
            return
        progress(
            f"installing {', '.join(missing)} in {self.where} (pybox's own VM, not your Mac) "
            "from the VM's apt sources"
        )
        self._run(apt_update_command(), "update the package lists", timeout_s=VM_INSTALL_TIMEOUT_S)
        self._run(
            apt_install_command(missing),
            f"install {', '.join(missing)}",
            timeout_s=VM_INSTALL_TIMEOUT_S,
        )

    @contextmanager
    def workspace(self, progress: Progress) -> Iterator[str]:
        made = self._run(mktemp_command(), "make a build folder", timeout_s=VM_STEP_TIMEOUT_S)
        folder = made.stdout.strip()
        if not VM_BUILD_DIR_RE.fullmatch(folder):
            raise ImageBuildError(
                f"`mktemp` in {self.where} answered {folder[:200]!r}, not a folder like "
                f"{VM_BUILD_TEMPLATE}; nothing was built."
            )
        progress(f"building in {folder} in {self.where}")
        try:
            yield f"{folder}/rootfs"
        except BaseException:
            self._remove(folder, progress, failing=True)
            raise
        self._remove(folder, progress, failing=False)

    def _remove(self, folder: str, progress: Progress, *, failing: bool) -> None:
        try:
            self._run(
                remove_command(folder), "remove the build folder", timeout_s=VM_STEP_TIMEOUT_S
            )
        except ImageBuildError as exc:
            message = (
                f"{exc} Remove it with `colima ssh --profile {colima_module.PROFILE} -- "
                f"{' '.join(remove_command(folder))}`."
            )
            if failing:  # the build's own error is the one to report
                progress(message)
                return
            raise ImageBuildError(message) from exc
        progress(f"removed the build folder {folder} in {self.where}")

    def bootstrap(
        self,
        root: str,
        *,
        suite: str,
        mirror: str,
        packages: tuple[str, ...],
        keyring: str | None,
        progress: Progress,
    ) -> None:
        check_build_source(mirror, suite)
        run_debootstrap(
            root,
            suite=suite,
            mirror=mirror,
            packages=packages,
            keyring=keyring,
            progress=progress,
            runner=self.runner,
        )

    def prepare(self, root: str, python_path: str, progress: Progress) -> PreparedTree:
        result = self._run(
            prepare_command(root, python_path),
            "prepare the root filesystem",
            timeout_s=VM_STEP_TIMEOUT_S,
            input_text=prepare_program(),
        )
        for line in result.stderr.splitlines():
            if line.strip():
                progress(f"in the VM: {line.strip()}")
        output = result.stdout
        lines = output.strip().splitlines()
        try:
            facts = json.loads(lines[-1]) if lines else None
        except ValueError:
            facts = None
        if not isinstance(facts, dict) or not isinstance(facts.get("packages"), list):
            raise ImageBuildError(
                f"The preparation in {self.where} answered {output.strip()[-300:]!r}, not its "
                "report; nothing was imported."
            )
        return PreparedTree(
            tuple(str(package) for package in facts["packages"]),
            facts.get("python_found") is True,
        )

    def tar(self, root: str) -> Iterator[bytes]:
        return tar_stream(root, self.runner)
