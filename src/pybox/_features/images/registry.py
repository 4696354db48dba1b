"""Moving recorded images through a registry, always by digest.

`pull` fetches exactly `registry/repository@sha256:...` for the pinned
platform (the engine checks the content against the digest), then checks
the digest, the platform and pybox's labels before recording the image.
`push` publishes a recorded image and returns the pin to write down.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path

from pybox._adapters.rootfs import Progress
from pybox._adapters.state import StateStore
from pybox._core.errors import ConfigError, EngineAPIError, EngineError, ImageError
from pybox._core.images import (
    IMAGE_REPO_PREFIX,
    LABEL_IMAGE,
    LABEL_PYTHON,
    LABEL_RECIPE,
    ImageRecord,
)
from pybox._core.pins import ImagePin, check_registry, parse_pins
from pybox._engine import Engine, JSONObject
from pybox._features.images.checks import verify_for_run
from pybox._features.images.lock_plans import locks_dir

PINS_FILE = "images.toml"
DEFAULT_PYTHON = "/usr/bin/python3"
# Environment a pulled image may bring; everything else in a box's environment is pybox's.
IMAGE_ENV_KEYS = frozenset({"PATH", "VIRTUAL_ENV", "MPLBACKEND", "MPLCONFIGDIR", "XDG_CACHE_HOME"})


def pins_path(environ: Mapping[str, str], explicit: str | None) -> Path:
    return Path(explicit) if explicit else locks_dir(environ) / PINS_FILE


def load_pins(path: Path) -> dict[str, ImagePin]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(
            f"Cannot read the image pins {path}: {exc.strerror or exc}. Pass --pins FILE."
        ) from exc
    return parse_pins(text, str(path))


def choose_registry(
    pin: ImagePin, flag: str | None, environ: Mapping[str, str], pins_file: Path
) -> str:
    registry = flag or environ.get("PYBOX_REGISTRY") or pin.registry
    if not registry:
        raise ConfigError(
            f"No registry for {pin.name}: pass --registry HOST[:PORT], set PYBOX_REGISTRY, or "
            f'add registry = "HOST[:PORT]" to [{pin.name}] in your own copy of {pins_file}.'
        )
    return check_registry(registry, "--registry")


def platform_of(image: JSONObject) -> str:
    parts = [str(image.get("Os") or ""), str(image.get("Architecture") or "")]
    if image.get("Variant"):
        parts.append(str(image["Variant"]))
    return "/".join(parts)


def pull(
    engine: Engine, state: StateStore, pin: ImagePin, registry: str, progress: Progress
) -> ImageRecord:
    repository = f"{registry}/{pin.repository}"
    reference = f"{repository}@{pin.digest}"
    progress(f"pulling {reference} for {pin.platform}")
    try:
        engine.pull_image(repository, pin.digest, pin.platform)
    except EngineAPIError as exc:
        raise ImageError(
            f"The registry refused {reference}: {exc.engine_message}. Nothing was recorded. "
            "Check the digest in the pins file and the registry address."
        ) from exc
    image = engine.inspect_image(reference)
    if image is None:
        raise ImageError(f"The engine reports no image {reference} after pulling it.")
    digests = [str(d) for d in image.get("RepoDigests") or []]
    if reference not in digests:
        raise ImageError(
            f"The pulled image's digests {digests} do not include {reference}; not recorded."
        )
    platform = platform_of(image)
    if platform != pin.platform and not pin.platform.startswith(platform + "/"):
        raise ImageError(
            f"{reference} is for {platform}, but the pin says {pin.platform}; not recorded."
        )
    labels = (image.get("Config") or {}).get("Labels") or {}
    if labels.get(LABEL_IMAGE) != pin.name or not labels.get(LABEL_RECIPE):
        raise ImageError(
            f"{reference} is not a pybox {pin.name} image (labels {LABEL_IMAGE}="
            f"{labels.get(LABEL_IMAGE)!r}, {LABEL_RECIPE}={labels.get(LABEL_RECIPE)!r}); "
            "not recorded."
        )
    env: list[tuple[str, str]] = []
    for item in (image.get("Config") or {}).get("Env") or []:
        key, _, value = str(item).partition("=")
        if key in IMAGE_ENV_KEYS:
            env.append((key, value))
    record = ImageRecord(
        name=pin.name,
        image_id=str(image["Id"]),
        recipe_hash=str(labels[LABEL_RECIPE]),
        python_path=str(labels.get(LABEL_PYTHON) or DEFAULT_PYTHON),
        built_at=datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
        env=tuple(env),
        recipe={"pulled": reference, "platform": pin.platform},
        digest=pin.digest,
    )
    verify_for_run(engine, record)
    state.record_image(record)
    progress(f"recorded {pin.name} as {record.image_id} (digest {pin.digest})")
    return record


def push(
    engine: Engine,
    state: StateStore,
    record: ImageRecord,
    registry: str,
    progress: Progress,
) -> ImagePin:
    """Publish a recorded image; the pin that pulls exactly it."""
    verify_for_run(engine, record)
    image = engine.inspect_image(record.image_id) or {}
    repository = f"{IMAGE_REPO_PREFIX}{record.name}"
    remote = f"{registry}/{repository}"
    tag = record.recipe_hash.split(":")[-1][:12] or "latest"
    progress(f"pushing {record.name} ({record.image_id[:19]}) as {remote}:{tag}")
    engine.tag_image(record.image_id, remote, tag)
    try:
        digest = engine.push_image(remote, tag)
    except EngineError as exc:
        raise ImageError(f"Pushing {record.name} to {registry} failed: {exc}") from exc
    finally:
        _untag_if_tagged_elsewhere(engine, record.image_id, f"{remote}:{tag}", progress)
    pin = ImagePin(record.name, repository, digest, platform_of(image))
    state.record_image(dataclasses.replace(record, digest=digest))
    progress(f"pushed {record.name}: {remote}@{digest}")
    return pin


def _untag_if_tagged_elsewhere(
    engine: Engine, image_id: str, reference: str, progress: Progress
) -> None:
    """Drop the registry tag pybox added, unless it is the image's only tag: removing
    an image's last tag would remove the image itself."""
    tags = [str(t) for t in (engine.inspect_image(image_id) or {}).get("RepoTags") or []]
    if any(tag != reference for tag in tags):
        engine.remove_image(reference)
    else:
        progress(f"kept the tag {reference}: it is the image's only tag")
