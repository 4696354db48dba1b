"""Building the stdlib image's tree without root: mmdebstrap in a user namespace.

A user who may reach the engine (the `docker` group) but is not root cannot run
debootstrap. mmdebstrap's unshare mode bootstraps the same minbase tree inside
an unprivileged user namespace, mapped onto the user's subordinate IDs
(/etc/subuid, /etc/subgid), and writes it as a tar file the user owns. The tree
is prepared inside that namespace by the one preparation (rootfs_prepare.py),
run as mmdebstrap's customize hook, so root inside the namespace can change
files that belong to the tree's root. Never a shell: mmdebstrap executes the
hook file directly because it is an executable file.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from pybox._adapters import rootfs_prepare
from pybox._adapters.rootfs import (
    LOCAL,
    LocalRootfsBuilder,
    PreparedTree,
    Progress,
    RootfsBuilder,
    run_bootstrapper,
)
from pybox._core.errors import ImageBuildError
from pybox._core.posture import BOX_GID, BOX_HOSTNAME, BOX_UID, PYBOX_ROOT

# Makes /bin, /lib, /sbin links into /usr without the usrmerge package (and its
# perl) where the suite needs it, so the tree holds the packages debootstrap's does.
MERGED_USR_HOOKS = "/usr/share/mmdebstrap/hooks/maybe-merged-usr"
SUBORDINATE_IDS = 65536  # a whole 16-bit range, what mmdebstrap maps
TAR_NAME = "rootfs.tar"
FACTS_NAME = "facts.json"
HOOK_NAME = "prepare-hook"
FACTS_MARKER = "pybox-facts: "


@dataclass(frozen=True)
class Need:
    """One thing a build needs: whether this user has it, and how to get it."""

    what: str
    have: bool
    fix: str


@dataclass(frozen=True)
class BuildAccess:
    """How this user can build the stdlib tree on this machine, and what is missing."""

    user: str
    is_root: bool
    method: str
    needs: tuple[Need, ...]

    @property
    def missing(self) -> tuple[Need, ...]:
        return tuple(need for need in self.needs if not need.have)


def _user() -> str:
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())


def has_subordinate_ids(path: Path, user: str, uid: int) -> bool:
    """Whether `path` (/etc/subuid or /etc/subgid) gives `user` a whole 16-bit range."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return False
    for line in lines:
        parts = line.strip().split(":")
        matches = len(parts) == 3 and parts[0] in (user, str(uid)) and parts[2].isdigit()
        if matches and int(parts[2]) >= SUBORDINATE_IDS:
            return True
    return False


def _sysctl(name: str) -> str | None:
    try:
        return Path("/proc/sys", name).read_text().strip()
    except OSError:
        return None


def userns_problem() -> str | None:
    """Why an unprivileged user namespace cannot be made here, or None when it can.

    The kernel switches are read first (they name the fix); then one namespace
    is made and left at once, which catches a seccomp or AppArmor refusal too.
    """
    if _sysctl("kernel/unprivileged_userns_clone") == "0":
        return "kernel.unprivileged_userns_clone is 0"
    if _sysctl("user/max_user_namespaces") == "0":
        return "user.max_user_namespaces is 0"
    if _sysctl("kernel/apparmor_restrict_unprivileged_userns") == "1":
        return "kernel.apparmor_restrict_unprivileged_userns is 1"
    unshare = shutil.which("unshare")
    if unshare is None:
        return "unshare (util-linux) is not installed, so it cannot be checked"
    try:
        probe = subprocess.run(
            [unshare, "--user", "--map-root-user", "true"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unshare --user could not run: {exc}"
    if probe.returncode != 0:
        said = probe.stderr.decode(errors="replace").strip() or f"exit {probe.returncode}"
        return f"unshare --user --map-root-user failed: {said}"
    return None


def userns_fix(problem: str | None) -> str:
    """The switch that allows unprivileged user namespaces, named after what refused them."""
    for setting, allowed in (
        ("kernel.unprivileged_userns_clone", "1"),
        ("user.max_user_namespaces", "15000"),
        ("kernel.apparmor_restrict_unprivileged_userns", "0"),
    ):
        if problem is not None and problem.startswith(setting):
            return f"sudo sysctl -w {setting}={allowed} (and in /etc/sysctl.d to keep it)"
    return "allow unprivileged user namespaces on this machine (ask its administrator)"


def build_access() -> BuildAccess:
    """What building the stdlib tree needs from this user, and what it has. Changes nothing."""
    user = _user()
    if os.geteuid() == 0:
        return BuildAccess(
            user,
            True,
            "debootstrap, as root",
            tuple(
                Need(tool, shutil.which(tool) is not None, f"sudo apt-get install {tool}")
                for tool in ("debootstrap", "tar")
            ),
        )
    ids = f"sudo usermod --add-subuids 100000-165535 --add-subgids 100000-165535 {user}"
    problem = userns_problem()
    return BuildAccess(
        user,
        False,
        "mmdebstrap --mode=unshare (no root needed)",
        (
            Need(
                "mmdebstrap",
                shutil.which("mmdebstrap") is not None,
                "sudo apt-get install mmdebstrap",
            ),
            Need(
                "newuidmap and newgidmap",
                shutil.which("newuidmap") is not None and shutil.which("newgidmap") is not None,
                "sudo apt-get install uidmap",
            ),
            Need(
                f"{SUBORDINATE_IDS} subordinate user IDs for {user} in /etc/subuid",
                has_subordinate_ids(Path("/etc/subuid"), user, os.getuid()),
                ids,
            ),
            Need(
                f"{SUBORDINATE_IDS} subordinate group IDs for {user} in /etc/subgid",
                has_subordinate_ids(Path("/etc/subgid"), user, os.getuid()),
                ids,
            ),
            Need(
                "unprivileged user namespaces"
                + ("" if problem is None else f" (not allowed: {problem})"),
                problem is None,
                userns_fix(problem),
            ),
        ),
    )


def hook_script(python: str) -> str:
    """The customize hook: the one preparation, run on the tree mmdebstrap passes as $1.

    Root in the namespace is a subordinate ID, not this user, so it may not read
    this user's files (pybox's own install among them): the preparation's source
    travels inside the hook, which is readable by all. Values are Python
    literals, never a shell command. The facts go to stdout after a marker.
    """
    source = Path(rootfs_prepare.__file__).read_text(encoding="utf-8")
    return (
        f"#!{python} -I\n"
        "import json, pathlib, sys\n"
        f"SOURCE = {source!r}\n"
        "ns = {'__name__': 'pybox_rootfs_prepare'}\n"
        "exec(compile(SOURCE, 'rootfs_prepare.py', 'exec'), ns)\n"
        "root = pathlib.Path(sys.argv[1])\n"
        "ns['prepare_tree'](root, lambda line: print(line, file=sys.stderr, flush=True), "
        f"hostname={BOX_HOSTNAME!r}, uid={BOX_UID!r}, gid={BOX_GID!r}, "
        f"pybox_root={PYBOX_ROOT!r})\n"
        "facts = {'packages': list(ns['installed_packages'](root))}\n"
        f"print({FACTS_MARKER!r} + json.dumps(facts), flush=True)\n"
    )


def hook_python() -> str:
    """Debian's own Python runs the hook: a venv's or pyenv's may sit in a folder
    that root in the namespace cannot enter."""
    for candidate in ("/usr/bin/python3", os.path.realpath(sys.executable)):
        if candidate and os.path.exists(candidate) and not any(c.isspace() for c in candidate):
            return candidate
    raise ImageBuildError(
        "No Python for mmdebstrap's hook: /usr/bin/python3 is missing. Install it "
        "(sudo apt-get install python3)."
    )


def mmdebstrap_command(
    target: str,
    *,
    suite: str,
    mirror: str,
    packages: tuple[str, ...],
    keyring: str | None,
    hook: str,
) -> list[str]:
    argv = ["mmdebstrap", "--mode=unshare", "--variant=minbase", f"--include={','.join(packages)}"]
    if keyring:
        argv.append(f"--keyring={keyring}")
    if Path(MERGED_USR_HOOKS).is_dir():
        argv.append(f"--hook-dir={MERGED_USR_HOOKS}")
    return [*argv, f"--customize-hook={hook}", suite, target, mirror]


def tar_has(tar_path: Path, path: str) -> bool:
    wanted = {path.lstrip("/"), "./" + path.lstrip("/")}
    with tarfile.open(tar_path) as archive:
        return any(member.name in wanted for member in archive)


class UnshareRootfsBuilder:
    """mmdebstrap in an unprivileged user namespace, writing a tar file the user owns."""

    where = "this machine (mmdebstrap --mode=unshare, no root)"

    def require_tools(self, progress: Progress) -> None:
        access = build_access()
        if access.missing:
            lines = "\n".join(f"  - {need.what}: {need.fix}" for need in access.missing)
            raise ImageBuildError(
                f"Building the stdlib image as {access.user} (not root) uses mmdebstrap in a "
                f"user namespace, and this machine lacks:\n{lines}\nDo the above, then run "
                "`pybox setup --yes` again."
            )

    @contextmanager
    def workspace(self, progress: Progress) -> Iterator[str]:
        workdir = Path(tempfile.mkdtemp(prefix="pybox-build-"))
        try:
            yield str(workdir / TAR_NAME)
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
        workdir = Path(root).parent
        workdir.chmod(0o711)  # root in the namespace must reach the hook, and only it
        hook = workdir / HOOK_NAME
        hook.write_text(hook_script(hook_python()))
        hook.chmod(0o755)
        argv = mmdebstrap_command(
            root, suite=suite, mirror=mirror, packages=packages, keyring=keyring, hook=str(hook)
        )
        marked = run_bootstrapper(
            argv,
            "mmdebstrap",
            LOCAL,
            progress,
            f"for suite {suite} from {mirror}",
            "Check the mirror (--mirror) and the suite (--suite).",
            marker=FACTS_MARKER,
        )
        if len(marked) != 1:
            raise ImageBuildError(
                f"mmdebstrap's customize hook reported {len(marked)} fact lines, not one; "
                "the tree was not prepared. Run `pybox setup --yes` again."
            )
        (workdir / FACTS_NAME).write_text(marked[0])

    def prepare(self, root: str, python_path: str, progress: Progress) -> PreparedTree:
        # Already prepared by the hook, inside the namespace; read what it found.
        facts_file = Path(root).parent / FACTS_NAME
        try:
            facts = json.loads(facts_file.read_text())
        except (OSError, ValueError) as exc:
            raise ImageBuildError(
                f"The build's facts in {facts_file} are unreadable: {exc}."
            ) from exc
        return PreparedTree(tuple(facts["packages"]), tar_has(Path(root), python_path))

    def tar(self, root: str) -> Iterator[bytes]:
        with open(root, "rb") as stream:
            while chunk := stream.read(1 << 20):
                yield chunk


def local_builder() -> RootfsBuilder:
    """debootstrap as root; mmdebstrap in a user namespace for anyone else."""
    return LocalRootfsBuilder() if os.geteuid() == 0 else UnshareRootfsBuilder()
