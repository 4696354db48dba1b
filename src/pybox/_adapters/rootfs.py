"""Making a root filesystem with debootstrap, and packing it for the engine.

Never a shell: every command is an argument list. Nothing is pulled from a
container registry; packages come from the Debian archive mirror the machine
already uses (or one named with --mirror).
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from pybox._core.errors import ImageBuildError
from pybox._core.posture import BOX_GID, BOX_HOSTNAME, BOX_UID, PYBOX_ROOT

Progress = Callable[[str], None]

PER_PACKAGE_LINES = (
    "I: Retrieving",
    "I: Validating",
    "I: Unpacking",
    "I: Configuring",
    "I: Extracting",
)

# Removed after the install: caches, documentation and logs the box never needs.
STRIP_PATHS = (
    "var/cache/apt",
    "var/lib/apt/lists",
    "var/cache/debconf/templates.dat-old",
    "var/log",
    "usr/share/doc",
    "usr/share/man",
    "usr/share/info",
    "usr/share/lintian",
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
            "Building the base image with debootstrap needs root. Run it as root (for "
            "example: sudo pybox image build stdlib)."
        )


def run_debootstrap(
    target: Path,
    *,
    suite: str,
    mirror: str,
    packages: tuple[str, ...],
    keyring: str | None,
    progress: Progress,
) -> None:
    argv = ["debootstrap", "--variant=minbase", f"--include={','.join(packages)}"]
    if keyring:
        argv.append(f"--keyring={keyring}")
    argv += [suite, str(target), mirror]
    started = time.monotonic()
    tail: list[str] = []
    with subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        errors="replace",
    ) as process:
        assert process.stdout is not None
        for raw_line in process.stdout:
            line = raw_line.rstrip()
            tail = [*tail, line][-15:]
            if line.startswith(PER_PACKAGE_LINES) and "base system" not in line:
                continue  # one line per package is noise; keep the phases
            progress(f"[{time.monotonic() - started:6.1f}s] debootstrap: {line}")
        code = process.wait()
    if code != 0:
        last = "\n  ".join(tail)
        raise ImageBuildError(
            f"debootstrap failed (exit {code}) for suite {suite} from {mirror}. Its last lines:\n"
            f"  {last}\nCheck the mirror (--mirror) and the suite (--suite)."
        )


def _strip_setid_bits(root: Path) -> int:
    stripped = 0
    for directory, _, files in os.walk(root):
        for name in files:
            path = os.path.join(directory, name)
            mode = os.lstat(path).st_mode
            if stat.S_ISREG(mode) and mode & (stat.S_ISUID | stat.S_ISGID):
                os.chmod(path, stat.S_IMODE(mode) & ~(stat.S_ISUID | stat.S_ISGID))
                stripped += 1
    return stripped


def prepare_rootfs(root: Path, progress: Progress) -> None:
    """Make a freshly bootstrapped tree fit to be a box's read-only root."""
    for relative in STRIP_PATHS:
        path = root / relative
        if path.is_dir():
            shutil.rmtree(path)
            path.mkdir(mode=0o755)
    # Nothing of the build machine stays in the image.
    (root / "etc/hostname").write_text(f"{BOX_HOSTNAME}\n")
    (root / "etc/hosts").write_text("127.0.0.1\tlocalhost\n::1\tlocalhost\n")
    resolv = root / "etc/resolv.conf"
    if resolv.is_symlink() or resolv.exists():
        resolv.unlink()
    resolv.write_text("")
    with (root / "etc/passwd").open("a") as handle:
        handle.write(f"sandbox:x:{BOX_UID}:{BOX_GID}:pybox sandbox:/pybox/work:/usr/sbin/nologin\n")
    with (root / "etc/group").open("a") as handle:
        handle.write(f"sandbox:x:{BOX_GID}:\n")
    (root / PYBOX_ROOT.lstrip("/")).mkdir(mode=0o755, exist_ok=True)
    stripped = _strip_setid_bits(root)
    progress(
        f"prepared the root filesystem (caches removed, {stripped} setuid/setgid bits cleared)"
    )


def installed_packages(root: Path) -> tuple[str, ...]:
    """`name=version` of every installed package, from dpkg's status file."""
    packages: list[str] = []
    try:
        text = (root / "var/lib/dpkg/status").read_text(errors="replace")
    except OSError:
        return ()
    for stanza in text.split("\n\n"):
        fields = dict(
            line.split(": ", 1)
            for line in stanza.splitlines()
            if ": " in line and not line[0].isspace()
        )
        if "Package" in fields and "installed" in fields.get("Status", ""):
            packages.append(f"{fields['Package']}={fields.get('Version', '')}")
    return tuple(sorted(packages))


def tar_stream(root: Path) -> Iterator[bytes]:
    """The tree as an uncompressed tar stream, numeric owners kept.

    Extended attributes (file capabilities among them) are left out on purpose.
    """
    with subprocess.Popen(
        ["tar", "--numeric-owner", "-C", str(root), "-cf", "-", "."],
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    ) as process:
        assert process.stdout is not None
        while chunk := process.stdout.read(1 << 20):
            yield chunk
        code = process.wait()
        if code != 0:
            error = process.stderr.read().decode(errors="replace") if process.stderr else ""
            raise ImageBuildError(f"tar failed (exit {code}) packing {root}: {error.strip()}")
