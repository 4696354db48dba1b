"""Building the stdlib image and checking recorded images against the engine."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from pybox._adapters.host import apt_sources, base_mirror, os_codename
from pybox._adapters.rootfs import LocalRootfsBuilder, Progress, RootfsBuilder
from pybox._adapters.state import StateStore
from pybox._core.errors import ConfigError, ImageBuildError, ImageError
from pybox._core.images import (
    IMAGE_REPO_PREFIX,
    LABEL_IMAGE,
    LABEL_RECIPE,
    ImageRecord,
    Recipe,
)
from pybox._core.posture import BOX_USER, DEFAULT_PATH, WORK_DIR
from pybox._engine import Engine

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

    The tree is made by `builder`: on this machine by default, or inside
    pybox's VM on macOS; the recipe, the preparation and the import are the same.
    """
    if plan.up_to_date and not force and plan.recorded is not None:
        progress(f"stdlib is up to date ({plan.recorded.image_id[:19]}); nothing to build")
        return plan.recorded
    builder = builder or LocalRootfsBuilder()
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
    return record


@dataclass(frozen=True)
class ImageStatus:
    record: ImageRecord
    present: bool
    problem: str | None


def image_problem(engine: Engine, record: ImageRecord) -> tuple[bool, str | None]:
    """(present, problem): whether the engine holds exactly the recorded image.

    The image must exist under the recorded ID and carry pybox's labels for the
    recorded name and recipe hash, so a record pointed at another image (or an
    image rebuilt outside pybox) is never used.
    """
    found = engine.inspect_image(record.image_id)
    if found is None:
        return False, f"missing from the engine; rebuild it with `pybox image build {record.name}`"
    if found.get("Id") != record.image_id:
        return True, f"the engine has {found.get('Id')} under the recorded ID {record.image_id}"
    labels = (found.get("Config") or {}).get("Labels") or {}
    if labels.get(LABEL_IMAGE) != record.name or labels.get(LABEL_RECIPE) != record.recipe_hash:
        return True, (
            f"the engine's image {record.image_id[:19]} is labelled "
            f"{labels.get(LABEL_IMAGE)!r} with recipe {labels.get(LABEL_RECIPE)!r}, but the "
            f"record says {record.name!r} with recipe {record.recipe_hash!r}; rebuild it with "
            f"`pybox image build {record.name}`"
        )
    return True, None


def verify_for_run(engine: Engine, record: ImageRecord) -> None:
    """Refuse an image that is not exactly the recorded one."""
    _, problem = image_problem(engine, record)
    if problem is not None:
        raise ImageError(f"Refusing to run image {record.name}: {problem}.")


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
