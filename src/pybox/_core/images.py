"""Image records and recipes (pure values).

An image is only used when the engine's image ID equals the ID pybox recorded
when it built the image. The recipe hash names what went into the build, so a
changed recipe means a rebuild, never a silent mismatch.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

from pybox._core.errors import InvalidRequest, StateError

IMAGE_NAME_RE = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")
IMAGE_REPO_PREFIX = "pybox/"
# Written on every image pybox makes; a run checks them against its record.
LABEL_IMAGE = "io.pybox.image"
LABEL_RECIPE = "io.pybox.recipe"
LABEL_PYTHON = "io.pybox.python"
# Which state directory built the image (a hash of its path, not the path): a
# rebuild removes the image it replaced only when this state directory made it,
# since another one (another user, a copied images.json) may still record it.
LABEL_STATE = "io.pybox.state"
# Set ("true") on an environment whose recipe asks for an exec-able workspace
# (`workspace_exec = true`: compiled toolchains run what they build there).
LABEL_WORKSPACE_EXEC = "io.pybox.workspace-exec"
# The recipe's own keys (Recipe.to_dict); a record may hold more beside them
# (an environment's toolchain versions and description), outside the hash.
RECIPE_KEYS = ("name", "base", "suite", "mirror", "packages", "builder_version", "extra")


def state_mark(state_root: str) -> str:
    return "sha256:" + hashlib.sha256(state_root.encode("utf-8")).hexdigest()[:32]


def check_image_name(name: object) -> str:
    if not isinstance(name, str) or not IMAGE_NAME_RE.fullmatch(name):
        raise InvalidRequest(
            f"Image name {name!r} is not valid: use lower-case letters, digits, '-' or '_' "
            "(for example 'stdlib')."
        )
    return name


@dataclass(frozen=True)
class Recipe:
    """What an image is built from; its hash identifies the build."""

    name: str
    base: str
    suite: str
    mirror: str
    packages: tuple[str, ...]
    builder_version: int
    extra: tuple[tuple[str, str], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "base": self.base,
            "suite": self.suite,
            "mirror": self.mirror,
            "packages": list(self.packages),
            "builder_version": self.builder_version,
            "extra": [list(item) for item in self.extra],
        }

    @property
    def hash(self) -> str:
        canonical = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


@dataclass(frozen=True)
class ImageRecord:
    """An image pybox built (or pulled) and will run, pinned by its engine ID."""

    name: str
    image_id: str
    recipe_hash: str
    python_path: str
    built_at: str
    env: tuple[tuple[str, str], ...] = field(default=())
    packages: tuple[str, ...] = field(default=())
    recipe: dict[str, Any] = field(default_factory=dict)
    # Set for images pulled by digest, and for images built from a lock file.
    digest: str | None = None
    lock_path: str | None = None
    # The Python a lock-built image's packages were installed for, as the build
    # box reported it ("CPython 3.11.2 (cp311) on x86_64"); None when not known.
    python: str | None = None

    @property
    def reference(self) -> str:
        return f"{IMAGE_REPO_PREFIX}{self.name}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "image_id": self.image_id,
            "recipe_hash": self.recipe_hash,
            "python_path": self.python_path,
            "built_at": self.built_at,
            "env": [list(item) for item in self.env],
            "packages": list(self.packages),
            "recipe": self.recipe,
            "digest": self.digest,
            "lock_path": self.lock_path,
            "python": self.python,
        }

    @property
    def rebuild_command(self) -> str:
        """The command that builds this image again from what it was built from.

        A lock-built image names its lock file by the absolute path recorded at
        build time, so the command works as printed from any folder (without
        `--lock`, `pybox image build NAME` takes pybox's shipped lock of that name).
        """
        if self.lock_path and self.name != "stdlib":
            import shlex  # here: only a refusal prints this, and every run imports this module

            return f"pybox image build {self.name} --lock {shlex.quote(self.lock_path)}"
        return f"pybox image build {self.name}"

    @property
    def preload(self) -> tuple[str, ...]:
        """Modules a warm box of this image imports before its code arrives
        (from the recipe, so the recipe hash covers them; pybox._core.preload)."""
        for key, value in self.recipe.get("extra", []):
            if key == "preload":
                return tuple(str(value).split())
        return ()

    @property
    def workspace_exec(self) -> bool:
        """Whether this image's boxes get a workspace (`/pybox`) mounted without
        `noexec`: only an environment whose recipe says `workspace_exec = true`
        (from the recipe, so the recipe hash covers it; never from a client)."""
        return ["workspace_exec", "true"] in [list(item) for item in self.recipe.get("extra", [])]

    @property
    def recipe_matches_hash(self) -> bool:
        """Whether the recorded recipe is the one the recorded hash names (the
        engine's label is checked against the hash, so this ties the recipe,
        and the preload list and workspace_exec in it, to the image). Only the
        recipe's own keys count: an environment's record adds its toolchain
        versions and description beside them."""
        own = {key: self.recipe[key] for key in RECIPE_KEYS if key in self.recipe}
        canonical = json.dumps(own, sort_keys=True, separators=(",", ":"))
        return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest() == self.recipe_hash

    @property
    def lock_sha256(self) -> str | None:
        """The hash of the lock file the image was built from, if it was."""
        for key, value in self.recipe.get("extra", []):
            if key == "lock_sha256":
                return str(value)
        return None

    @classmethod
    def from_dict(cls, data: Any, where: str) -> ImageRecord:
        try:
            return cls(
                name=str(data["name"]),
                image_id=str(data["image_id"]),
                recipe_hash=str(data["recipe_hash"]),
                python_path=str(data["python_path"]),
                built_at=str(data["built_at"]),
                env=tuple((str(k), str(v)) for k, v in data.get("env", [])),
                packages=tuple(str(p) for p in data.get("packages", [])),
                recipe=dict(data.get("recipe", {})),
                digest=_optional_str(data.get("digest")),
                lock_path=_optional_str(data.get("lock_path")),
                python=_optional_str(data.get("python")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise StateError(
                f"{where} holds an unreadable image record ({exc}). Rebuild the image with "
                "`pybox image build NAME`."
            ) from exc


def _optional_str(value: object) -> str | None:
    return None if value is None else str(value)
