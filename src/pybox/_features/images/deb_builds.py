"""Environments from Debian recipes (locks/NAME.toml, pybox._core.deb_recipes): the
suite's Release file checked against its pin, the packages bootstrapped by
mmdebstrap in a user namespace (as a non-root stdlib build is), what was installed compared with
every pinned version, then imported and recorded like any pybox image.

Nothing comes from a container registry: the mirror is this machine's apt source
for the suite (or, for a suite the machine does not list, the archive of its own
suite: one Debian mirror serves every suite), or `--mirror`."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from pybox._adapters.host_facts import apt_sources, base_mirror, os_codename
from pybox._adapters.rootfs import Progress, RootfsBuilder
from pybox._adapters.state import StateStore
from pybox._core.deb_recipes import (
    DebRecipe,
    compare_pins,
    parse_recipe,
    repinned,
    toolchain_versions,
)
from pybox._core.errors import ConfigError, ImageBuildError, InvalidRequest
from pybox._core.images import (
    IMAGE_REPO_PREFIX,
    LABEL_STATE,
    LABEL_WORKSPACE_EXEC,
    ImageRecord,
    Recipe,
    check_image_name,
    state_mark,
)
from pybox._core.posture import BOX_USER, DEFAULT_PATH, WORK_DIR
from pybox._engine import Engine
from pybox._features.images.records import STDLIB_PYTHON

DEB_BUILDER_VERSION = 1
RELEASE_MAX_BYTES = 4 * 1024 * 1024
RELEASE_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class DebBuildPlan:
    name: str
    recipe_file: DebRecipe
    recipe_path: Path
    recipe_sha256: str  # "sha256:..." of the file's text, as lock_changed compares it
    recipe: Recipe
    keyring: str | None
    mirror_found_in: str
    reference: str
    up_to_date: bool
    recorded: ImageRecord | None


def read_recipe(path: Path, name: str) -> tuple[DebRecipe, str]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidRequest(f"Cannot read the recipe {path}: {exc}.") from exc
    return parse_recipe(text, str(path), name), text


def _text_sha256(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def choose_mirror(suite: str, mirror: str | None) -> tuple[str, str, str | None]:
    """(mirror, where it was found, keyring) for `suite`."""
    if mirror:
        return mirror.rstrip("/"), "--mirror", None
    sources = apt_sources()
    try:
        source = base_mirror(sources, suite)
        return source.uri, source.origin, source.keyring
    except ConfigError:
        own = os_codename()
        if not own or own == suite:
            raise
        source = base_mirror(sources, own)
        return (
            source.uri,
            f"{source.origin} (the {own} archive, which serves {suite} too)",
            (source.keyring),
        )


def plan_deb_image(
    engine: Engine, state: StateStore, name: str, path: Path, mirror: str | None = None
) -> DebBuildPlan:
    check_image_name(name)
    recipe_file, text = read_recipe(path, name)
    chosen, found_in, keyring = choose_mirror(recipe_file.suite, mirror)
    sha = _text_sha256(text)
    recipe = Recipe(
        name=name,
        base="debootstrap:minbase",
        suite=recipe_file.suite,
        mirror=chosen,
        packages=recipe_file.pins,
        builder_version=DEB_BUILDER_VERSION,
        extra=(
            ("lock_sha256", sha),
            ("release_sha256", recipe_file.release_sha256),
            ("install", " ".join(recipe_file.bootstrap_packages)),
            ("env", json.dumps(recipe_file.env)),
            # Only when asked: the other recipes' hashes stay what they were.
            *((("workspace_exec", "true"),) if recipe_file.workspace_exec else ()),
        ),
    )
    recorded = state.image(name)
    up_to_date = (
        recorded is not None
        and recorded.recipe_hash == recipe.hash
        and (found := engine.inspect_image(recorded.image_id)) is not None
        and found.get("Id") == recorded.image_id
    )
    reference = f"{IMAGE_REPO_PREFIX}{name}:{recipe.hash.split(':')[1][:12]}"
    return DebBuildPlan(
        name, recipe_file, path, sha, recipe, keyring, found_in, reference, bool(up_to_date),
        recorded,
    )  # fmt: skip


def fetch_release_sha256(mirror: str, suite: str) -> str:
    """sha256 of the suite's Release file as the mirror serves it now."""
    import urllib.request

    url = f"{mirror}/dists/{suite}/Release"
    if not url.startswith(("http://", "https://")):
        raise ImageBuildError(f"The mirror {mirror} is not an http(s) URL; pass --mirror URL.")
    try:
        with urllib.request.urlopen(url, timeout=RELEASE_TIMEOUT_S) as answer:  # noqa: S310
            data = answer.read(RELEASE_MAX_BYTES + 1)
    except OSError as exc:
        raise ImageBuildError(
            f"Cannot fetch {url}: {exc}. Check the mirror (--mirror URL) and the network."
        ) from exc
    if len(data) > RELEASE_MAX_BYTES:
        raise ImageBuildError(
            f"{url} is larger than {RELEASE_MAX_BYTES} bytes; not a Release file."
        )
    return hashlib.sha256(data).hexdigest()


def build_deb_image(
    engine: Engine,
    state: StateStore,
    plan: DebBuildPlan,
    progress: Progress,
    *,
    force: bool = False,
    repin: bool = False,
    builder: RootfsBuilder | None = None,
) -> tuple[ImageRecord, bool]:
    """Build and record the image (and whether it was built: False when up to date).

    With `repin`, a moved Release file or package set is written into the recipe
    file instead of stopping the build."""
    if plan.up_to_date and not force and not repin and plan.recorded is not None:
        progress(f"{plan.name} is up to date ({plan.recorded.image_id[:19]}); nothing to build")
        return plan.recorded, False
    from pybox._adapters.rootfs_unshare import UnshareRootfsBuilder

    wanted = plan.recipe_file
    release = fetch_release_sha256(plan.recipe.mirror, wanted.suite)
    release_moved = release != wanted.release_sha256
    if release_moved:
        progress(
            f"the {wanted.suite} Release file is sha256:{release[:16]}..., the recipe pins "
            f"{'nothing yet' if not wanted.release_sha256 else wanted.release_sha256[:16] + '...'}"
            ": the suite moved since the recipe was written; comparing every package"
        )
    else:
        progress(f"the {wanted.suite} Release file matches the recipe (sha256:{release[:16]}...)")
    # mmdebstrap for every user, root included: apt resolves what debootstrap's own
    # resolver cannot (npm, rustc), and one tool gives the same set for everyone.
    builder = builder or UnshareRootfsBuilder()
    builder.require_tools(progress)
    with builder.workspace(progress) as root:
        progress(
            f"bootstrapping Debian {wanted.suite} with {', '.join(wanted.bootstrap_packages)} "
            f"from {plan.recipe.mirror} (found in {plan.mirror_found_in}) on {builder.where}"
        )
        builder.bootstrap(
            root,
            suite=wanted.suite,
            mirror=plan.recipe.mirror,
            packages=wanted.bootstrap_packages,
            keyring=plan.keyring,
            progress=progress,
        )
        tree = builder.prepare(root, STDLIB_PYTHON, progress)
        if not tree.python_found:
            raise ImageBuildError(f"The bootstrapped tree has no {STDLIB_PYTHON}.")
        plan = _checked(plan, tree.packages, release, progress, repin=repin)
        repo, tag = plan.reference.split(":", 1)
        versions = toolchain_versions(wanted.toolchain, tree.packages)
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
                *(f"ENV {key}={value}" for key, value in wanted.env),
                'CMD ["python3"]',
                f"LABEL io.pybox.image={plan.name}",
                f"LABEL io.pybox.recipe={plan.recipe.hash}",
                f"LABEL io.pybox.toolchain={','.join(f'{k}={v}' for k, v in versions.items())}",
                f"LABEL {LABEL_STATE}={state_mark(str(state.root))}",
                *([f"LABEL {LABEL_WORKSPACE_EXEC}=true"] if wanted.workspace_exec else []),
            ],
        )
    record = ImageRecord(
        name=plan.name,
        image_id=image_id,
        recipe_hash=plan.recipe.hash,
        python_path=STDLIB_PYTHON,
        built_at=datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
        env=wanted.env,
        packages=tree.packages,
        recipe=plan.recipe.to_dict() | {"toolchain": versions, "description": wanted.description},
        lock_path=str(plan.recipe_path.resolve()),
    )
    state.record_image(record)
    progress(f"recorded {plan.name} as {image_id} in {state.images_file}")
    return record, True


def _checked(
    plan: DebBuildPlan, found: tuple[str, ...], release: str, progress: Progress, *, repin: bool
) -> DebBuildPlan:
    """The plan to record: the same when the pins hold; with `repin`, the plan of the
    rewritten recipe; otherwise the build stops, naming what moved."""
    wanted = plan.recipe_file
    diff = compare_pins(wanted, found)
    if diff.same and release == wanted.release_sha256:
        progress(f"all {len(found)} installed packages are the pinned versions")
        return plan
    if diff.same:
        progress(
            f"all {len(found)} installed packages are the pinned versions although the "
            "Release file moved"
        )
        if not repin:
            return plan
    if not repin:
        raise ImageBuildError(
            f"Building {plan.name} installed a different set of packages than {wanted.source} "
            f"pins ({len(diff.moved)} moved, {len(diff.added)} new, {len(diff.gone)} gone):\n"
            + "\n".join(diff.lines())
            + f"\nThe {wanted.suite} suite moved since the recipe was written. Nothing was "
            f"recorded. To accept the new set, run `pybox image build {plan.name} --repin` "
            "(it rewrites the recipe's pins), and review the change."
        )
    for line in diff.lines():
        progress(f"moved since the recipe was pinned:{line}")
    text = plan.recipe_path.read_text(encoding="utf-8")
    updated = repinned(text, release, found)
    plan.recipe_path.write_text(updated, encoding="utf-8")
    progress(
        f"repinned {plan.recipe_path}: {len(found)} packages, Release sha256:{release[:16]}..."
    )
    new_recipe_file = parse_recipe(updated, str(plan.recipe_path), plan.name)
    refreshed = plan_from(plan, new_recipe_file, updated)
    return refreshed


def plan_from(plan: DebBuildPlan, recipe_file: DebRecipe, text: str) -> DebBuildPlan:
    sha = _text_sha256(text)
    extra = dict(plan.recipe.extra) | {
        "lock_sha256": sha,
        "release_sha256": recipe_file.release_sha256,
    }
    recipe = Recipe(
        name=plan.name,
        base=plan.recipe.base,
        suite=plan.recipe.suite,
        mirror=plan.recipe.mirror,
        packages=recipe_file.pins,
        builder_version=plan.recipe.builder_version,
        extra=tuple(extra.items()),
    )
    reference = f"{IMAGE_REPO_PREFIX}{plan.name}:{recipe.hash.split(':')[1][:12]}"
    return DebBuildPlan(
        plan.name, recipe_file, plan.recipe_path, sha, recipe, plan.keyring,
        plan.mirror_found_in, reference, False, plan.recorded,
    )  # fmt: skip
