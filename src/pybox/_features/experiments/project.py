"""Where a project may come from, and what of it is left behind (host side).

A project path is accepted only when, after resolving symlinks (its own and the
allowed roots'), it is an existing folder equal to or under a root the operator
allowed (`--project-root DIR`), and it is none of the refused places:

- `/`, the home folder itself, and any folder that holds the home folder;
- the system trees, the folder and everything in it: `/etc /bin /sbin /lib*
  /boot /dev /proc /sys /run /usr` (and on macOS `/System /private/etc`). No
  project lives there, and they hold the machine's configuration and code;
- the top of the shared trees, the folder itself only: `/var /opt /srv /snap
  /root /home /mnt /media /tmp /Users /Volumes /private /private/var
  /private/tmp`. A project may live *inside* them (`/srv/app`, `/opt/tool`, a
  CI workspace under `/var/lib/...`) when the operator allowed a root there;
- credential folders: any path with a component named `.ssh .aws .gnupg .kube
  .azure .password-store .docker`, or `.config/gcloud`.

Build output and caches (`ProjectPolicy.skip_names`) are matched against folder
names only (a script named `build` is copied; a folder named `build` is not),
exactly, or with `fnmatch` rules when the entry holds `*`, `?` or `[`; matching
is case-sensitive. Secret-shaped names are never copied whatever the policy
(`secrets.py`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path

from pybox._core.errors import ProjectRefused
from pybox._features.experiments.secrets import CREDENTIAL_FOLDERS

MIB = 1024 * 1024

DEFAULT_SKIP_NAMES = frozenset(
    {
        "node_modules",
        "dist",
        "build",
        "target",
        "__pycache__",
        ".venv",
        "venv",
        ".tox",
        ".nox",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        ".cache",
        ".gradle",
        ".next",
        "coverage",
        "htmlcov",
        "*.egg-info",
    }
)

SYSTEM_TREES = (
    "/etc",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/boot",
    "/dev",
    "/proc",
    "/sys",
    "/run",
    "/usr",
    "/System",
    "/private/etc",
)
SHARED_TOPS = (
    "/",
    "/var",
    "/opt",
    "/srv",
    "/snap",
    "/root",
    "/home",
    "/mnt",
    "/media",
    "/tmp",
    "/Users",
    "/Volumes",
    "/private",
    "/private/var",
    "/private/tmp",
)
# Credential folders found anywhere in the path; `.docker` too (its config.json
# holds registry logins), and `gcloud` under `.config`.
CREDENTIAL_PARTS = CREDENTIAL_FOLDERS | {".docker"}
NEXT_STEP_ROOT = (
    "start the server with --project-root DIR (repeatable) naming the folder that holds it"
)


@dataclass(frozen=True)
class ProjectPolicy:
    """What the operator allows to be copied into an experiment."""

    allowed_roots: tuple[Path, ...] = ()
    skip_names: frozenset[str] = DEFAULT_SKIP_NAMES
    max_files: int = 20_000  # entries copied: files, links and folders
    max_total_bytes: int = 32 * MIB  # the files' bytes together
    max_file_bytes: int = 8 * MIB  # a larger file is skipped, with the reason
    allow_credential_env: bool = False

    def skips_folder(self, name: str) -> bool:
        """Whether a folder of that name is build output or a cache under this policy."""
        if name in self.skip_names:
            return True
        return any(
            any(c in pattern for c in "*?[") and fnmatchcase(name, pattern)
            for pattern in self.skip_names
        )


def check_project_path(project: object, policy: ProjectPolicy, home: Path) -> Path:
    """The project's folder, resolved, if it may be copied; `ProjectRefused` otherwise."""
    if isinstance(project, os.PathLike):
        project = os.fspath(project)
    if not isinstance(project, str):
        raise ProjectRefused(
            f"The project must be a path given as a string, not {type(project).__name__}."
        )
    shown = repr(project[:300])
    if not project or any(ord(c) < 32 or ord(c) == 127 for c in project):
        raise ProjectRefused(
            f"The project path {shown} is empty or holds control characters; give the "
            "absolute path of the project's folder."
        )
    if not policy.allowed_roots:
        raise ProjectRefused(
            f"No project may be copied: the operator allowed no project root. To copy "
            f"{shown}, {NEXT_STEP_ROOT}."
        )
    if project == "~" or project.startswith("~/"):
        project = str(home) + project[1:]
    if not os.path.isabs(project):
        raise ProjectRefused(
            f"The project path {shown} is relative; give the absolute path of the project's folder."
        )
    try:
        resolved = Path(project).resolve(strict=True)
    except FileNotFoundError:
        raise ProjectRefused(
            f"The project path {shown} does not exist; give an existing folder."
        ) from None
    except (OSError, RuntimeError) as exc:
        raise ProjectRefused(
            f"The project path {shown} cannot be resolved ({exc.__class__.__name__}); give "
            "an existing folder reachable without link loops."
        ) from None
    if not resolved.is_dir():
        raise ProjectRefused(
            f"The project path {shown} is not a folder; give the project's folder."
        )
    shown_resolved = shown if str(resolved) == project else f"{shown} (resolved: {str(resolved)!r})"
    problem = _refused_place(resolved, home)
    if problem:
        raise ProjectRefused(
            f"The project path {shown_resolved} is {problem}; pybox never copies it. Give the "
            "folder of one project."
        )
    roots = [_real(root) for root in policy.allowed_roots]
    if not any(resolved == root or root in resolved.parents for root in roots):
        listed = ", ".join(str(root) for root in roots)
        raise ProjectRefused(
            f"The project path {shown_resolved} is not under an allowed project root "
            f"({listed}). Give a project under one of them, or {NEXT_STEP_ROOT}."
        )
    return resolved


def _refused_place(path: Path, home: Path) -> str | None:
    for top in SHARED_TOPS:
        if path == Path(top) or path == _real(Path(top)):
            return "the top of a shared system folder" if top != "/" else "the root folder"
    for tree in SYSTEM_TREES:
        for place in {Path(tree), _real(Path(tree))}:
            if path == place or place in path.parents:
                return f"inside a system folder ({tree})"
    real_home = _real(home)
    if path == real_home:
        return "the home folder itself"
    if path in real_home.parents:
        return "a folder that holds the home folder"
    parts = path.parts
    for index, part in enumerate(parts):
        if part in CREDENTIAL_PARTS or (part == "gcloud" and parts[index - 1] == ".config"):
            return f"inside a credential folder ({part})"
    return None


def _real(path: Path) -> Path:
    return Path(os.path.realpath(path))
