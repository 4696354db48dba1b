"""Preparing a bootstrapped tree to be a box's root: the one implementation.

This file is standard library only and imports nothing of pybox, because it
runs in two places: imported on a Linux host (`pybox._adapters.rootfs`), and
sent verbatim on stdin to `python3 -` inside pybox's Colima VM, where the tree
is built on macOS; and (as text inside mmdebstrap's customize hook) in the user
namespace of a build without root. Run as a program it takes ROOT HOSTNAME UID GID PYBOX_ROOT
PYTHON_PATH, prepares ROOT, and prints one JSON line: the installed packages
and whether PYTHON_PATH exists in the tree. Keep it compatible with the
Python 3 of the VM's Ubuntu (3.8 and newer).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

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


def _tree_files(root: Path) -> Iterator[str]:
    """Every file of the tree, not descending into what is mounted on it (mmdebstrap's
    hooks see /proc, /sys and /dev mounted in the tree)."""
    device = os.lstat(root).st_dev
    for directory, subdirectories, files in os.walk(root):
        subdirectories[:] = [
            name
            for name in subdirectories
            if os.lstat(os.path.join(directory, name)).st_dev == device
        ]
        for name in files:
            yield os.path.join(directory, name)


def _strip_setid_bits(root: Path) -> int:
    stripped = 0
    for path in _tree_files(root):
        mode = os.lstat(path).st_mode
        if stat.S_ISREG(mode) and mode & (stat.S_ISUID | stat.S_ISGID):
            os.chmod(path, stat.S_IMODE(mode) & ~(stat.S_ISUID | stat.S_ISGID))
            stripped += 1
    return stripped


def _strip_file_capabilities(root: Path) -> int:
    """File capabilities are extended attributes; the box gets none (mmdebstrap's tar
    keeps extended attributes, where pybox's own tar leaves them out)."""
    stripped = 0
    for path in _tree_files(root):
        try:
            os.removexattr(path, "security.capability", follow_symlinks=False)
        except OSError:
            continue  # none set (the usual case), or none supported here
        stripped += 1
    return stripped


def prepare_tree(
    root: Path,
    progress: Callable[[str], None],
    *,
    hostname: str,
    uid: int,
    gid: int,
    pybox_root: str,
) -> None:
    """Make a freshly bootstrapped tree fit to be a box's read-only root."""
    for relative in STRIP_PATHS:
        path = root / relative
        if path.is_dir():
            shutil.rmtree(path)
            path.mkdir(mode=0o755)
    # Nothing of the build machine stays in the image.
    (root / "etc/hostname").write_text(f"{hostname}\n")
    (root / "etc/hosts").write_text("127.0.0.1\tlocalhost\n::1\tlocalhost\n")
    resolv = root / "etc/resolv.conf"
    if resolv.is_symlink() or resolv.exists():
        resolv.unlink()
    resolv.write_text("")
    with (root / "etc/passwd").open("a") as handle:
        handle.write(f"sandbox:x:{uid}:{gid}:pybox sandbox:/pybox/work:/usr/sbin/nologin\n")
    with (root / "etc/group").open("a") as handle:
        handle.write(f"sandbox:x:{gid}:\n")
    (root / pybox_root.lstrip("/")).mkdir(mode=0o755, exist_ok=True)
    stripped = _strip_setid_bits(root)
    capabilities = _strip_file_capabilities(root)
    progress(
        f"prepared the root filesystem (caches removed, {stripped} setuid/setgid bits and "
        f"{capabilities} file capabilities cleared)"
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


def has_file(root: Path, path: str) -> bool:
    return (root / path.lstrip("/")).exists()


def main(argv: list[str]) -> int:
    root_text, hostname, uid, gid, pybox_root, python_path = argv
    root = Path(root_text)
    prepare_tree(
        root,
        lambda line: print(line, file=sys.stderr, flush=True),
        hostname=hostname,
        uid=int(uid),
        gid=int(gid),
        pybox_root=pybox_root,
    )
    facts = {
        "packages": list(installed_packages(root)),
        "python_found": has_file(root, python_path),
    }
    print(json.dumps(facts))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
