"""Building the stdlib image and checking recorded images against the engine."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from pybox._adapters.host_facts import apt_sources, base_mirror, os_codename
from pybox._adapters.state import StateStore
from pybox._core.errors import ConfigError, EngineError, ImageBuildError, PyboxError
from pybox._core.images import (
    IMAGE_REPO_PREFIX,
    LABEL_IMAGE,
    LABEL_STATE,
    ImageRecord,
    Recipe,
    state_mark,
)
from pybox._core.posture import BOX_USER, DEFAULT_PATH, WORK_DIR
from pybox._engine import Engine, JSONObject
from pybox._features.images.checks import image_problem

# The stdlib build's tools are imported by the build; a run checks its image with
# `checks` and imports none of this module.
if TYPE_CHECKING:
    from pybox._adapters.rootfs import Progress, RootfsBuilder
    from pybox._adapters.rootfs_unshare import BuildAccess

BUILDER_VERSION = 1
STDLIB_PACKAGES = ("python3",)
STDLIB_PYTHON = "/usr/bin/python3"


@dataclass(frozen=True)
class BuildPlan:
    recipe: Recipe
    keyring: str | None
    mirror_found_in: str
    reference: str
    up_to_date: bool
    recorded: ImageRecord | None


def plan_stdlib(
    engine: Engine,
    state: StateStore,
    *,
    mirror: str | None = None,
    suite: str | None = None,
    keyring: str | None = None,
    mirror_found_in: str = "--mirror",
) -> BuildPlan:
    """What building the stdlib image would do, without doing it.

    The mirror and suite default to this machine's apt sources; `keyring` is
    for an explicit mirror (the VM's copy of Debian's archive keyring on macOS).
    """
    chosen_suite = suite or os_codename()
    if not chosen_suite:
        raise ConfigError(
            "Cannot tell this machine's Debian suite; pass --suite NAME (for example bookworm)."
        )
    if mirror:
        chosen_mirror, found_in = mirror.rstrip("/"), mirror_found_in
    else:
        source = base_mirror(apt_sources(), chosen_suite)
        chosen_mirror, found_in, keyring = source.uri, source.origin, source.keyring
    recipe = Recipe(
        name="stdlib",
        base="debootstrap:minbase",
        suite=chosen_suite,
        mirror=chosen_mirror,
        packages=STDLIB_PACKAGES,
        builder_version=BUILDER_VERSION,
    )
    recorded = state.image("stdlib")
    up_to_date = (
        recorded is not None
        and recorded.recipe_hash == recipe.hash
        and (found := engine.inspect_image(recorded.image_id)) is not None
        and found.get("Id") == recorded.image_id
    )
    reference = f"{IMAGE_REPO_PREFIX}stdlib:{recipe.hash.split(':')[1][:12]}"
    return BuildPlan(recipe, keyring, found_in, reference, bool(up_to_date), recorded)


def unrecorded_stdlib(engine: Engine, state: StateStore) -> str | None:
    """`reference (id)` of a pybox stdlib image the engine holds under this machine's
    recipe but `state` does not record: another user's pybox built it. None if none."""
    try:
        plan = plan_stdlib(engine, state)
        found = engine.inspect_image(plan.reference)
    except PyboxError:
        return None
    labels = ((found or {}).get("Config") or {}).get("Labels") or {}
    if found is None or labels.get(LABEL_IMAGE) != "stdlib":
        return None
    return f"{plan.reference} ({str(found.get('Id'))[:19]})"


def other_users_image_hint(engine: Engine, state: StateStore) -> str | None:
    """What to do when the engine has a stdlib image that only another user's state records."""
    other = unrecorded_stdlib(engine, state)
    if other is None:
        return None
    return (
        f"The engine holds a pybox stdlib image, {other}, that {state.root} does not record: "
        "another user's pybox built it (each user's pybox records its own images, and "
        "`sudo pybox setup` records them in root's state). Run `pybox setup --yes` as "
        "yourself, without sudo: it builds and records your own, and needs no root."
    )


def stdlib_build_access() -> BuildAccess:
    """What building the stdlib image needs from this user here, and what is missing."""
    from pybox._adapters.rootfs_unshare import build_access

    return build_access()


def sudo_problem(environ: Mapping[str, str], state_root: str) -> str | None:
    """Why building now would record the image where the user's pybox never looks.

    `sudo pybox setup` runs as root with root's home, so the image lands in
    root's state while the user's own pybox keeps asking for one. Building as
    the user needs no root; an explicit PYBOX_STATE_DIR says the place is meant.
    """
    user = environ.get("SUDO_USER", "")
    if os.geteuid() != 0 or user in ("", "root") or environ.get("PYBOX_STATE_DIR"):
        return None
    return (
        f"pybox runs as root through sudo, so the image would be recorded in root's state "
        f"({state_root}), where {user}'s pybox never looks. Run `pybox setup --yes` as {user}, "
        "without sudo: the build needs no root (mmdebstrap in a user namespace). To build "
        "into root's state on purpose, set PYBOX_STATE_DIR."
    )


def build_stdlib(
    engine: Engine,
    state: StateStore,
    plan: BuildPlan,
    progress: Progress,
    *,
    force: bool = False,
    builder: RootfsBuilder | None = None,
) -> ImageRecord:
    """Bootstrap, strip, import and record the stdlib image.

    The tree is made by `builder`: on this machine by default (debootstrap as
    root, else mmdebstrap in a user namespace), or inside pybox's VM on macOS;
    the recipe, the preparation and the import are the same.
    """
    if plan.up_to_date and not force and plan.recorded is not None:
        progress(f"stdlib is up to date ({plan.recorded.image_id[:19]}); nothing to build")
        return plan.recorded
    from pybox._adapters.rootfs_unshare import local_builder

    builder = builder or local_builder()
    builder.require_tools(progress)
    recipe = plan.recipe
    with builder.workspace(progress) as root:
        progress(
            f"bootstrapping Debian {recipe.suite} from {recipe.mirror} "
            f"(found in {plan.mirror_found_in}) on {builder.where}"
        )
        builder.bootstrap(
            root,
            suite=recipe.suite,
            mirror=recipe.mirror,
            packages=recipe.packages,
            keyring=plan.keyring,
            progress=progress,
        )
        tree = builder.prepare(root, STDLIB_PYTHON, progress)
        if not tree.python_found:
            raise ImageBuildError(
                f"The bootstrapped tree has no {STDLIB_PYTHON}; "
                "the python3 package did not install."
            )
        repo, tag = plan.reference.split(":", 1)
        progress(f"importing into the engine as {plan.reference}")
        image_id = engine.import_image(
            builder.tar(root),
            repo=repo,
            tag=tag,
            changes=[
                f"USER {BOX_USER}",
                f"WORKDIR {WORK_DIR}",
                f"ENV PATH={DEFAULT_PATH}",
                "ENV LANG=C.UTF-8",
                'CMD ["python3"]',
                "LABEL io.pybox.image=stdlib",
                f"LABEL io.pybox.recipe={recipe.hash}",
                f"LABEL {LABEL_STATE}={state_mark(str(state.root))}",
            ],
        )
    record = ImageRecord(
        name="stdlib",
        image_id=image_id,
        recipe_hash=recipe.hash,
        python_path=STDLIB_PYTHON,
        built_at=datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
        packages=tree.packages,
        recipe=recipe.to_dict(),
    )
    state.record_image(record)
    progress(f"recorded stdlib as {image_id} in {state.images_file}")
    if plan.recorded is not None:
        replaced = remove_replaced(engine, state, plan.recorded, record)
        if replaced is not None:
            progress(replaced.describe("stdlib"))
    return record


@dataclass(frozen=True)
class ImageStatus:
    record: ImageRecord
    present: bool
    problem: str | None


def check_images(engine: Engine, state: StateStore) -> list[ImageStatus]:
    """Every recorded image, and whether the engine still has exactly it."""
    statuses: list[ImageStatus] = []
    for record in state.images().values():
        present, problem = image_problem(engine, record)
        statuses.append(ImageStatus(record, present, problem))
    return statuses


def remove_recorded(engine: Engine, state: StateStore, record: ImageRecord) -> list[str]:
    """Remove a recorded image's references from the engine, then forget it.

    Only references of exactly the recorded image ID are removed; untagged
    parents are kept (they may be another image's base).
    """
    found = engine.inspect_image(record.image_id)
    removed: list[str] = []
    if found is not None and found.get("Id") == record.image_id:
        references = [str(r) for r in (found.get("RepoTags") or []) if r != "<none>:<none>"]
        references += [str(r) for r in (found.get("RepoDigests") or [])]
        for reference in references:
            if engine.remove_image(reference):
                removed.append(reference)
        if engine.inspect_image(record.image_id) is not None and engine.remove_image(
            record.image_id
        ):
            removed.append(record.image_id)
    state.forget_image(record.name)
    return removed


@dataclass(frozen=True)
class Replaced:
    """The image a rebuild replaced: what of it was removed, or why it was kept."""

    image_id: str
    removed: tuple[str, ...]
    kept_because: str | None = None

    def describe(self, name: str) -> str:
        if self.kept_because is not None:
            return f"kept the replaced {name} image {self.image_id[:19]}: {self.kept_because}"
        if not self.removed:
            return f"the replaced {name} image {self.image_id[:19]} was no longer in the engine"
        return f"removed the replaced {name} image {self.image_id[:19]} ({', '.join(self.removed)})"


def remove_replaced(
    engine: Engine, state: StateStore, old: ImageRecord, new: ImageRecord
) -> Replaced | None:
    """Remove the image a rebuild of `new.name` replaced, when it is surely pybox's.

    Only the image the replaced record pointed at, only when no record of this
    state directory uses it or is built on it, only when the engine still labels
    it as pybox's image of that name and recipe, built with this state directory
    (another one, or a copy of images.json, may record it too), and only pybox's
    own references to it (pybox/NAME:...): a tag someone else added keeps the
    image in the engine. A container that still uses it (a warm box, say) makes
    the engine refuse; it is then kept and listed. None when nothing was replaced.
    """
    if old.image_id == new.image_id:
        return None
    records = state.images().values()
    users = sorted(r.name for r in records if r.image_id == old.image_id)
    if users:
        return Replaced(old.image_id, (), f"still recorded as {', '.join(users)}")
    built_on = sorted(r.name for r in records if r.recipe.get("base") == old.image_id)
    if built_on:
        return Replaced(old.image_id, (), f"{', '.join(built_on)} is built on it")
    present, problem = image_problem(engine, old)
    if not present:
        return Replaced(old.image_id, (), None)
    if problem is not None:
        return Replaced(old.image_id, (), "the engine's image is not the one pybox recorded")
    found = engine.inspect_image(old.image_id) or {}
    labels = (found.get("Config") or {}).get("Labels") or {}
    if labels.get(LABEL_STATE) != state_mark(str(state.root)):
        return Replaced(
            old.image_id,
            (),
            f"it was not built with this state directory ({state.root}), which may not be the "
            "only one that records it; `docker image rm` removes it when nothing uses it",
        )
    removed: list[str] = []
    try:
        for reference in _own_references(found, old.name):
            if engine.remove_image(reference):
                removed.append(reference)
        after = engine.inspect_image(old.image_id)
        # Only pybox's references were on it: what is left is an unnamed image of pybox's.
        untagged = after is not None and not _references(after)
        if untagged and engine.remove_image(old.image_id):
            removed.append(old.image_id)
    except EngineError as exc:
        return Replaced(old.image_id, tuple(removed), f"the engine refused to remove it: {exc}")
    if engine.inspect_image(old.image_id) is not None:
        return Replaced(
            old.image_id,
            tuple(removed),
            "it has other references than pybox's; remove them yourself",
        )
    return Replaced(old.image_id, tuple(removed))


def _references(image: JSONObject) -> list[str]:
    tags = [str(r) for r in image.get("RepoTags") or [] if r != "<none>:<none>"]
    return tags + [str(r) for r in image.get("RepoDigests") or []]


def _own_references(image: JSONObject, name: str) -> list[str]:
    """pybox's tags (pybox/NAME:...) and pull digests (HOST/pybox/NAME@...) of an image."""
    repository = f"{IMAGE_REPO_PREFIX}{name}"
    own: list[str] = []
    for reference in _references(image):
        repo = reference.split("@", 1)[0] if "@" in reference else reference.rsplit(":", 1)[0]
        if repo == repository or repo.endswith("/" + repository):
            own.append(reference)
    return own
