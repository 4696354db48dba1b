"""What `pybox setup` does for the VM on macOS: the VM itself, then the stdlib image
built inside it. It plans first (every folder, file, download and command) and
only acts with `--yes`.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass

from pybox._adapters.colima.profile import MIN_COLIMA_VERSION, PROFILE, Colima, VMSize
from pybox._adapters.colima.rootfs_build import (
    SUDO,
    VM_BUILD_TEMPLATE,
    VM_BUILD_TOOLS,
    VM_DEBIAN_KEYRING,
    apt_install_command,
    apt_update_command,
    check_build_source,
    mktemp_command,
    prepare_command,
    probe_command,
    remove_command,
)
from pybox._adapters.colima.tools import INSTALL_COMMAND
from pybox._adapters.rootfs import debootstrap_command, tar_command
from pybox._core.errors import (
    PyboxError,
)
from pybox._features.images.records import STDLIB_PACKAGES, STDLIB_PYTHON
from pybox._features.vm.control import vm_state
from pybox._orchestration.hosts import Host


@dataclass(frozen=True)
class SetupItem:
    kind: str  # "folder", "download", "command", "verify", "check" (found), "missing"
    text: str


def plan_colima_vm(
    find_colima: Callable[[], Colima], size: VMSize
) -> tuple[Colima | None, list[SetupItem]]:
    """The VM part of `pybox setup`: what exists, and what `--yes` would create and run."""
    items: list[SetupItem] = []
    try:
        colima = find_colima()
    except PyboxError as exc:
        items.append(SetupItem("missing", str(exc)))
        items.append(SetupItem("command", f"install the tools first: {INSTALL_COMMAND}"))
        return None, items
    items.append(SetupItem("check", f"colima: {colima.colima.path} ({colima.colima.found_by})"))
    if colima.docker is not None:
        version = colima.docker_version() or "version unknown"
        items.append(
            SetupItem(
                "check", f"docker CLI: {colima.docker.path} ({colima.docker.found_by}), {version}"
            )
        )
    try:
        colima_version = colima.require_version()
    except PyboxError as exc:
        items.append(SetupItem("missing", str(exc)))
        return None, items
    minimum = ".".join(map(str, MIN_COLIMA_VERSION))
    items.append(
        SetupItem(
            "check", f"Colima {'.'.join(map(str, colima_version))} (needs {minimum} or newer)"
        )
    )
    state = vm_state(colima)
    if state.state == "running":
        verdict = "verified" if not state.problems else "REFUSED: " + "; ".join(state.problems)
        items.append(SetupItem("check", f"the VM (profile {PROFILE}) is running: {verdict}"))
        return colima, items
    if state.state == "absent":
        for path, why in colima.created_paths():
            items.append(SetupItem("folder", f"{path}: {why}"))
        items.append(
            SetupItem(
                "download",
                "Colima's VM disk image (a few hundred MB, once) into Colima's cache "
                "(~/Library/Caches/colima on macOS)",
            )
        )
    else:
        items.append(SetupItem("check", f"the VM (profile {PROFILE}) exists and is stopped"))
    items.append(SetupItem("command", f"colima {' '.join(colima.start_args(size))}"))
    items.append(
        SetupItem(
            "verify",
            f"read back `colima status --profile {PROFILE} --json`, {colima.profile_config} and "
            f"{colima.lima_config}: refuse mounts, port forwards, Kubernetes",
        )
    )
    return colima, items


@dataclass(frozen=True)
class VMBuildSource:
    """The Debian mirror and suite for a build in the VM, and where they came from."""

    mirror: str | None
    suite: str | None
    found_in: str

    def checked(self) -> tuple[str, str]:
        """Refuse (before the VM is touched) a missing or unusual mirror or suite."""
        return check_build_source(self.mirror, self.suite)


def vm_build_source(host: Host, mirror: str | None, suite: str | None) -> VMBuildSource:
    """The flags, else the `[colima]` table's `mirror` and `suite` (a Mac has no apt sources)."""
    configured = host.settings.colima
    found_in = "--mirror" if mirror else "the config file's [colima] mirror"
    return VMBuildSource(mirror or configured.mirror, suite or configured.suite, found_in)


def plan_vm_image(colima: Colima, source: VMBuildSource) -> list[SetupItem]:
    """The image part of `pybox setup` on macOS: every command run in the VM, every download."""
    items: list[SetupItem] = []
    try:
        mirror, suite = source.checked()
    except PyboxError as exc:
        items.append(SetupItem("missing", str(exc)))
        mirror, suite = source.mirror or "<--mirror URL>", source.suite or "<--suite NAME>"
    else:
        items.append(
            SetupItem("check", f"Debian mirror {mirror} (from {source.found_in}), suite {suite}")
        )

    def in_vm(command: list[str]) -> str:
        return shlex.join(["colima", *colima.ssh_args(command)])  # as one would type it

    tools = ", ".join(VM_BUILD_TOOLS)
    folder = VM_BUILD_TEMPLATE
    root = f"{folder}/rootfs"
    items += [
        SetupItem("command", f"{in_vm(probe_command())} (are the build tools in the VM?)"),
        SetupItem(
            "command",
            f"{in_vm(apt_update_command())}, then "
            f"{in_vm(apt_install_command(VM_BUILD_TOOLS))}: only the missing ones, installed "
            "in pybox's own VM, never on your Mac",
        ),
        SetupItem(
            "download", f"the VM's Ubuntu packages of {tools} if missing, from its apt sources"
        ),
        SetupItem("command", f"{in_vm(mktemp_command())} (a build folder in the VM)"),
        SetupItem(
            "command",
            in_vm(
                [
                    *SUDO,
                    *debootstrap_command(
                        root,
                        suite=suite,
                        mirror=mirror,
                        packages=STDLIB_PACKAGES,
                        keyring=VM_DEBIAN_KEYRING,
                    ),
                ]
            ),
        ),
        SetupItem("download", f"the Debian packages of python3 and a minimal base from {mirror}"),
        SetupItem(
            "command",
            f"{in_vm(prepare_command(root, STDLIB_PYTHON))} with pybox's rootfs_prepare.py on "
            "stdin (the same preparation as on Linux)",
        ),
        SetupItem(
            "command",
            f"{in_vm([*SUDO, *tar_command(root)])}, streamed into the engine's image import, "
            "recorded in images.json",
        ),
        SetupItem("command", f"{in_vm(remove_command(folder))} (always, even on failure)"),
    ]
    return items
