"""A recorded image checked against the engine before a run: exactly that image, or refused.

Apart from `records` (building and listing images), so a run imports only this.
"""

from __future__ import annotations

from pybox._core.errors import ImageError
from pybox._core.images import LABEL_IMAGE, LABEL_RECIPE, LABEL_WORKSPACE_EXEC, ImageRecord
from pybox._engine import Engine


def image_problem(engine: Engine, record: ImageRecord) -> tuple[bool, str | None]:
    """(present, problem): whether the engine holds exactly the recorded image.

    The image must exist under the recorded ID and carry pybox's labels for the
    recorded name and recipe hash, so a record pointed at another image (or an
    image rebuilt outside pybox) is never used.
    """
    found = engine.inspect_image(record.image_id)
    if found is None:
        return False, f"missing from the engine; rebuild it with `{record.rebuild_command}`"
    if found.get("Id") != record.image_id:
        return True, f"the engine has {found.get('Id')} under the recorded ID {record.image_id}"
    labels = (found.get("Config") or {}).get("Labels") or {}
    if labels.get(LABEL_IMAGE) != record.name or labels.get(LABEL_RECIPE) != record.recipe_hash:
        return True, (
            f"the engine's image {record.image_id[:19]} is labelled "
            f"{labels.get(LABEL_IMAGE)!r} with recipe {labels.get(LABEL_RECIPE)!r}, but the "
            f"record says {record.name!r} with recipe {record.recipe_hash!r}; rebuild it with "
            f"`{record.rebuild_command}`"
        )
    if record.preload and not record.recipe_matches_hash:
        return True, (
            f"the record's recipe (which names the modules to preload, {' '.join(record.preload)}) "
            f"is not the one its hash {record.recipe_hash[:19]} names; rebuild it with "
            f"`{record.rebuild_command}`"
        )
    if record.workspace_exec and not record.recipe_matches_hash:
        return True, (
            f"the record's recipe (which asks for an exec-able workspace) is not the one its "
            f"hash {record.recipe_hash[:19]} names; rebuild it with `{record.rebuild_command}`"
        )
    if record.workspace_exec != (labels.get(LABEL_WORKSPACE_EXEC) == "true"):
        return True, (
            f"the record says the workspace is {'' if record.workspace_exec else 'not '}"
            f"exec-able but the engine's image is labelled {LABEL_WORKSPACE_EXEC}="
            f"{labels.get(LABEL_WORKSPACE_EXEC)!r}; rebuild it with `{record.rebuild_command}`"
        )
    return True, None


def verify_for_run(engine: Engine, record: ImageRecord) -> None:
    """Refuse an image that is not exactly the recorded one."""
    _, problem = image_problem(engine, record)
    if problem is not None:
        raise ImageError(f"Refusing to run image {record.name}: {problem}.")
