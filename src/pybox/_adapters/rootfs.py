"""Making a root filesystem with debootstrap, and packing it for the engine.

Never a shell: every command is an argument list. Nothing is pulled from a
container registry; packages come from the Debian archive mirror the machine
already uses (or one named with --mirror).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from pybox._adapters.rootfs_prepare import (
    has_file,
    installed_packages,
    prepare_tree,
)
from pybox._core.errors import ImageBuildError
from pybox._core.posture import BOX_GID, BOX_HOSTNAME, BOX_UID, PYBOX_ROOT

Progress = Callable[[str], None]

PER_PACKAGE_LINES = (
    "I: Retrieving",
    "I: Validating",
    "I: Unpacking",
    "I: Configuring",
    "I: Extracting",
    # dpkg's and apt's, as mmdebstrap shows them
    "Get:",
    "Selecting previously",
    "Preparing to unpack",
    "Unpacking ",
    "Setting up ",
    "(Reading database",
    "Processing triggers",
)


def require_tools() -> None:
    missing = [tool for tool in ("debootstrap", "tar") if shutil.which(tool) is None]
    if missing:
        raise ImageBuildError(
            f"{', '.join(missing)} not found. Install it first (for example: sudo apt-get "
            f"install {' '.join(missing)})."
        )
    if os.geteuid() != 0:
        raise ImageBuildError(
            "Building the base image with debootstrap needs root; as any other user pybox "
            "builds it with mmdebstrap in a user namespace. Run `pybox setup` as yourself "
            "to see what that needs."
        )


@dataclass(frozen=True)
class CommandRunner:
    """Where a build command runs: here, or (with a prefix such as `colima ssh
    --profile pybox -- sudo -n` and Colima's environment) inside pybox's VM.
    Either way the command is an argument list."""

    prefix: tuple[str, ...] = ()
    env: Mapping[str, str] | None = None
    where: str = "this machine"

    def argv(self, command: Sequence[str]) -> list[str]:
        return [*self.prefix, *command]


LOCAL = CommandRunner()


def debootstrap_command(
    target: str, *, suite: str, mirror: str, packages: tuple[str, ...], keyring: str | None
) -> list[str]:
    argv = ["debootstrap", "--variant=minbase", f"--include={','.join(packages)}"]
    if keyring:
        argv.append(f"--keyring={keyring}")
    return [*argv, suite, target, mirror]


def run_debootstrap(
    target: Path | str,
    *,
    suite: str,
    mirror: str,
    packages: tuple[str, ...],
    keyring: str | None,
    progress: Progress,
    runner: CommandRunner = LOCAL,
) -> None:
    argv = runner.argv(
        debootstrap_command(
            str(target), suite=suite, mirror=mirror, packages=packages, keyring=keyring
        )
    )
    run_bootstrapper(
        argv,
        "debootstrap",
        runner,
        progress,
        f"for suite {suite} from {mirror}",
        "Check the mirror (--mirror) and the suite (--suite).",
    )


def run_bootstrapper(
    argv: list[str],
    tool: str,
    runner: CommandRunner,
    progress: Progress,
    what: str,
    next_step: str,
    marker: str | None = None,
) -> list[str]:
    """Run debootstrap or mmdebstrap, showing its phases (not one line per package).

    Lines that start with `marker` (what a hook reports) are returned, not shown.
    """
    started = time.monotonic()
    tail: list[str] = []
    marked: list[str] = []
    try:
        process = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            errors="replace",
            env=None if runner.env is None else dict(runner.env),
        )
    except OSError as exc:
        raise ImageBuildError(f"Cannot run {argv[0]}: {exc.strerror or exc}.") from exc
    with process:
        assert process.stdout is not None
        for raw_line in process.stdout:
            line = raw_line.rstrip()
            if marker is not None and line.startswith(marker):
                marked.append(line[len(marker) :])
                continue
            tail = [*tail, line][-15:]
            if line.startswith(PER_PACKAGE_LINES) and "base system" not in line:
                continue  # one line per package is noise; keep the phases
            progress(f"[{time.monotonic() - started:6.1f}s] {tool}: {line}")
        code = process.wait()
    if code != 0:
        last = "\n  ".join(tail)
        raise ImageBuildError(
            f"{tool} failed (exit {code}) on {runner.where} {what}. Its last lines:\n  {last}\n"
            f"{next_step}"
        )
    return marked


def prepare_rootfs(root: Path, progress: Progress) -> None:
    """Make a freshly bootstrapped tree fit to be a box's read-only root."""
    prepare_tree(
        root, progress, hostname=BOX_HOSTNAME, uid=BOX_UID, gid=BOX_GID, pybox_root=PYBOX_ROOT
    )


def tar_command(root: str) -> list[str]:
    """Pack a tree as an uncompressed tar on stdout, numeric owners kept.

    Extended attributes (file capabilities among them) are left out on purpose.
    """
    return ["tar", "--numeric-owner", "-C", root, "-cf", "-", "."]


def tar_stream(root: Path | str, runner: CommandRunner = LOCAL) -> Iterator[bytes]:
    """The tree as a tar stream, read as it is packed (here or in the VM)."""
    argv = runner.argv(tar_command(str(root)))
    try:
        process = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=None if runner.env is None else dict(runner.env),
        )
    except OSError as exc:
        raise ImageBuildError(f"Cannot run {argv[0]}: {exc.strerror or exc}.") from exc
    with process:
        assert process.stdout is not None
        while chunk := process.stdout.read(1 << 20):
            yield chunk
        code = process.wait()
        if code != 0:
            error = process.stderr.read().decode(errors="replace") if process.stderr else ""
            raise ImageBuildError(
                f"tar failed (exit {code}) packing {root} on {runner.where}: {error.strip()}"
            )


@dataclass(frozen=True)
class PreparedTree:
    packages: tuple[str, ...]
    python_found: bool


class RootfsBuilder(Protocol):
    """Where the stdlib image's tree is bootstrapped, prepared and packed."""

    where: str

    def require_tools(self, progress: Progress) -> None: ...

    def workspace(self, progress: Progress) -> AbstractContextManager[str]:
        """A build folder for the tree (its path is yielded), removed on every exit."""
        ...

    def bootstrap(
        self,
        root: str,
        *,
        suite: str,
        mirror: str,
        packages: tuple[str, ...],
        keyring: str | None,
        progress: Progress,
    ) -> None: ...

    def prepare(self, root: str, python_path: str, progress: Progress) -> PreparedTree: ...

    def tar(self, root: str) -> Iterator[bytes]: ...


class LocalRootfsBuilder:
    """debootstrap on this (Linux) machine, as root, in a temporary folder."""

    where = "this machine"

    def require_tools(self, progress: Progress) -> None:
        require_tools()

    @contextmanager
    def workspace(self, progress: Progress) -> Iterator[str]:
        workdir = Path(tempfile.mkdtemp(prefix="pybox-build-"))
        try:
            yield str(workdir / "rootfs")
        finally:
            shutil.rmtree(workdir, ignore_errors=True)

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
        run_debootstrap(
            Path(root),
            suite=suite,
            mirror=mirror,
            packages=packages,
            keyring=keyring,
            progress=progress,
        )

    def prepare(self, root: str, python_path: str, progress: Progress) -> PreparedTree:
        tree = Path(root)
        prepare_rootfs(tree, progress)
        return PreparedTree(installed_packages(tree), has_file(tree, python_path))

    def tar(self, root: str) -> Iterator[bytes]:
        return tar_stream(root)
