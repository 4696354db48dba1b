"""Lock-built images before any box: the shipped and given lock files, what a build
would do (its recipe, whether the recorded image is up to date), and whether a
recorded image's lock has changed since."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pybox._adapters.state import StateStore
from pybox._core.errors import ConfigError, ImageError, InvalidRequest
from pybox._core.images import IMAGE_REPO_PREFIX, ImageRecord, Recipe, check_image_name
from pybox._core.posture import DEFAULT_PATH
from pybox._engine import Engine

# The lock parser is imported by what reads a lock: a run only compares a record's
# lock digest (`lock_changed`) and does not pay for it.
if TYPE_CHECKING:
    from pybox._core.locks import Lock

LOCK_BUILDER_VERSION = 1
VENV_DIR = "/opt/venv"
VENV_PYTHON = f"{VENV_DIR}/bin/python3"
INSTALL_OPTIONS = ("--require-hashes", "--only-binary=:all:", "--no-cache-dir")
PIP_LOCK_NAME = "pip.lock"

# The committed image's environment. Caches point at the box's tmpfs; thread
# counts follow each run's CPU limit and are set per run (see BoxSpec).
IMAGE_ENV: tuple[tuple[str, str], ...] = (
    ("PATH", f"{VENV_DIR}/bin:{DEFAULT_PATH}"),
    ("VIRTUAL_ENV", VENV_DIR),
    ("MPLBACKEND", "Agg"),
    ("MPLCONFIGDIR", "/tmp/matplotlib"),
    ("XDG_CACHE_HOME", "/tmp/.cache"),
)


def locks_dir(environ: Mapping[str, str]) -> Path:
    """Where pybox's shipped lock files are: PYBOX_LOCKS_DIR, else inside the package.

    They live in `pybox/_locks` (the repository's `locks/` points there), so an
    installed pybox has them as well as a checkout.
    """
    explicit = environ.get("PYBOX_LOCKS_DIR")
    if explicit:
        return Path(explicit)
    # This file is pybox/_features/images/lock_plans.py.
    return Path(__file__).resolve().parents[2] / "_locks"


def read_lock(path: Path) -> Lock:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidRequest(
            f"Cannot read the lock file {path}: {exc.strerror or exc}. Give a lock file made "
            "with `pip-compile --generate-hashes` or `uv pip compile --generate-hashes`."
        ) from exc
    except UnicodeDecodeError as exc:
        raise InvalidRequest(f"The lock file {path} is not UTF-8 text.") from exc
    from pybox._core.locks import parse_lock

    return parse_lock(text, str(path))


def read_pip_lock(environ: Mapping[str, str]) -> Lock:
    """pybox's lock of pip itself: the pip a build box (or an install box) runs."""
    pip_lock = read_lock(locks_dir(environ) / PIP_LOCK_NAME)
    if len(pip_lock.requirements) != 1 or pip_lock.requirements[0].key != "pip":
        raise ConfigError(f"{pip_lock.source} must lock exactly one package: pip.")
    return pip_lock


def shipped_lock(name: str, environ: Mapping[str, str]) -> Path:
    path = locks_dir(environ) / f"{name}.lock"
    if not path.is_file():
        raise ConfigError(
            f"No shipped lock file for {name!r} at {path}. Pass --lock FILE, or set "
            "PYBOX_LOCKS_DIR to the folder holding pybox's locks/."
        )
    return path


@dataclass(frozen=True)
class LockBuildPlan:
    name: str
    lock: Lock
    lock_path: Path
    pip_lock: Lock
    base: ImageRecord
    recipe: Recipe
    reference: str
    up_to_date: bool
    recorded: ImageRecord | None


def plan_lock_image(
    engine: Engine,
    state: StateStore,
    name: str,
    lock_path: Path,
    environ: Mapping[str, str],
) -> LockBuildPlan:
    """What building `name` from `lock_path` would do, without doing it."""
    check_image_name(name)
    if name == "stdlib":
        raise InvalidRequest(
            "stdlib is the base image, built with debootstrap; it takes no lock file. "
            "Choose another name for a lock-built image."
        )
    lock = read_lock(lock_path)
    pip_lock = read_pip_lock(environ)
    base = state.image("stdlib")
    if base is None:
        raise ImageError(
            f"A {name} image is built on the stdlib image, which is not recorded in "
            f"{state.root}. Run `pybox setup --yes` first."
        )
    found = engine.inspect_image(base.image_id)
    if found is None or found.get("Id") != base.image_id:
        raise ImageError(
            f"The recorded stdlib image {base.image_id} is not in the engine. Rebuild it with "
            "`pybox image build stdlib`."
        )
    recipe = Recipe(
        name=name,
        base=base.image_id,
        suite="",
        mirror="",
        packages=lock.pins,
        builder_version=LOCK_BUILDER_VERSION,
        extra=(
            ("lock_sha256", lock.sha256),
            ("pip", pip_lock.requirements[0].line()),
            ("install_options", " ".join(INSTALL_OPTIONS)),
            ("venv", VENV_DIR),
            ("env", json.dumps(IMAGE_ENV)),
            # Only for an image that declares modules: other recipes keep their hash.
            *((("preload", " ".join(lock.preload)),) if lock.preload else ()),
        ),
    )
    recorded = state.image(name)
    up_to_date = (
        recorded is not None
        and recorded.recipe_hash == recipe.hash
        and (image := engine.inspect_image(recorded.image_id)) is not None
        and image.get("Id") == recorded.image_id
    )
    reference = f"{IMAGE_REPO_PREFIX}{name}:{recipe.hash.split(':')[1][:12]}"
    return LockBuildPlan(
        name, lock, lock_path, pip_lock, base, recipe, reference, bool(up_to_date), recorded
    )


def lock_changed(record: ImageRecord) -> str | None:
    """Why the lock a record was built from no longer matches, or None.

    A lock file that is gone cannot be compared; the image is still pinned by ID
    and recipe label, so that alone does not stop a run.
    """
    if not record.lock_path or not record.lock_sha256:
        return None
    try:
        text = Path(record.lock_path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    now = "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()
    if now != record.lock_sha256:
        return (
            f"its lock file {record.lock_path} changed since the image was built "
            f"({record.lock_sha256[:19]} then, {now[:19]} now)"
        )
    return None
