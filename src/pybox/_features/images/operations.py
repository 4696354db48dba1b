"""What an operator does with images: build from a lock, verify, remove, pull, push.

Front ends reach these through `Session.images()`; agents never do (they may
only run images the operator allowed).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from pybox._adapters.piptool import host_pip_settings
from pybox._adapters.rootfs import Progress
from pybox._adapters.state import StateStore
from pybox._core.deb_recipes import RECIPE_SUFFIX
from pybox._core.errors import ImageError, InvalidRequest
from pybox._core.images import ImageRecord, check_image_name
from pybox._core.pins import ImagePin, check_registry
from pybox._engine import Engine
from pybox._features.images import registry
from pybox._features.images.builds import BuildResult, build_lock_image
from pybox._features.images.checks import image_problem
from pybox._features.images.deb_builds import DebBuildPlan, build_deb_image, plan_deb_image
from pybox._features.images.lock_plans import (
    LockBuildPlan,
    lock_changed,
    locks_dir,
    plan_lock_image,
    read_lock,
    shipped_lock,
)
from pybox._features.images.records import remove_recorded, remove_replaced
from pybox._version import __version__


@dataclass(frozen=True)
class Verification:
    record: ImageRecord
    problems: tuple[str, ...]
    checks: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.problems


class ImageOperations:
    def __init__(
        self,
        engine: Callable[[], Engine],
        state: StateStore,
        owner: str,
        environ: Mapping[str, str],
    ) -> None:
        # Connected on first use, so a bad lock file is refused even without an engine.
        self._engine = engine
        self.state = state
        self.owner = owner
        self.environ = environ

    @property
    def engine(self) -> Engine:
        return self._engine()

    def _record(self, name: str) -> ImageRecord:
        check_image_name(name)
        record = self.state.image(name)
        if record is None:
            known = ", ".join(sorted(self.state.images())) or "none"
            raise ImageError(
                f"No image named {name!r} is recorded in {self.state.root} (recorded: {known})."
            )
        return record

    def recipe_path(self, name: str, lock: str | None) -> Path | None:
        """The Debian recipe `name` is built from (`--lock FILE.toml`, or the shipped
        locks/NAME.toml), or None for a pip lock."""
        if lock:
            return Path(lock) if lock.endswith(RECIPE_SUFFIX) else None
        shipped = locks_dir(self.environ) / f"{name}{RECIPE_SUFFIX}"
        return shipped if shipped.is_file() else None

    def plan_build(
        self, name: str, lock: str | None, mirror: str | None = None
    ) -> LockBuildPlan | DebBuildPlan:
        check_image_name(name)
        recipe = self.recipe_path(name, lock) if name != "stdlib" else None
        if recipe is not None:
            return plan_deb_image(self.engine, self.state, name, recipe, mirror)
        if mirror:
            raise InvalidRequest(
                "--mirror applies to stdlib and to images built from a Debian recipe "
                "(locks/NAME.toml); a pip-locked image takes its base from the recorded stdlib."
            )
        lock_path = Path(lock) if lock else shipped_lock(name, self.environ)
        if name != "stdlib":
            read_lock(lock_path)  # a bad lock is refused before the engine is asked
        return plan_lock_image(self.engine, self.state, name, lock_path, self.environ)

    def build(
        self,
        plan: LockBuildPlan | DebBuildPlan,
        progress: Progress,
        *,
        force: bool = False,
        repin: bool = False,
    ) -> BuildResult:
        """Build and record the image; then remove the image the build replaced
        (or say why it stays), so rebuilds do not pile up images."""
        if isinstance(plan, DebBuildPlan):
            record, built = build_deb_image(
                self.engine, self.state, plan, progress, force=force, repin=repin
            )
            result = BuildResult(record, built)
        elif repin:
            raise InvalidRequest("--repin applies to images built from a Debian recipe only.")
        else:
            result = self._build(plan, progress, force=force)
        if not result.built or plan.recorded is None:
            return result
        replaced = remove_replaced(self.engine, self.state, plan.recorded, result.record)
        if replaced is None:
            return result
        progress(replaced.describe(plan.name))
        return dataclasses.replace(result, replaced=replaced)

    def _build(self, plan: LockBuildPlan, progress: Progress, *, force: bool) -> BuildResult:
        return build_lock_image(
            self.engine,
            self.state,
            plan,
            host_pip_settings(self.environ),
            progress,
            owner=self.owner,
            pybox_version=__version__,
            environ=self.environ,
            force=force,
        )

    def verify(self, name: str) -> Verification:
        """Everything pybox can check about a recorded image without running it."""
        record = self._record(name)
        problems: list[str] = []
        checks: list[str] = []
        _, problem = image_problem(self.engine, record)
        if problem is not None:
            problems.append(problem)
        else:
            checks.append(
                f"the engine holds {record.image_id}, labelled {name} with recipe "
                f"{record.recipe_hash}"
            )
        changed = lock_changed(record)
        if changed is not None:
            problems.append(f"{changed}; rebuild it with `{record.rebuild_command}`")
        elif record.lock_path:
            if Path(record.lock_path).is_file():
                checks.append(f"the lock file {record.lock_path} is unchanged")
            else:
                checks.append(f"the lock file {record.lock_path} is gone (not compared)")
        toolchain = record.recipe.get("toolchain")
        if isinstance(toolchain, dict) and toolchain:  # built from a Debian recipe
            versions = ", ".join(f"{k} {v}" for k, v in toolchain.items())
            checks.append(
                f"built from Debian {record.recipe.get('suite')} with every package pinned; "
                f"toolchain: {versions}"
            )
        elif record.lock_path and str(record.recipe.get("base", "")).startswith("sha256:"):
            base = self.state.image("stdlib")
            if base is None or base.image_id != record.recipe["base"]:
                checks.append(
                    f"built on an earlier stdlib image; `{record.rebuild_command}` would "
                    "rebuild it on the current one"
                )
        if record.python:
            checks.append(f"its packages were installed for {record.python}")
        if record.digest:
            checks.append(f"pinned by digest {record.digest}")
        return Verification(record, tuple(problems), tuple(checks))

    def remove(self, name: str) -> list[str]:
        return remove_recorded(self.engine, self.state, self._record(name))

    def pull(
        self, name: str, registry_flag: str | None, pins_file: str | None, progress: Progress
    ) -> ImageRecord:
        check_image_name(name)
        path = registry.pins_path(self.environ, pins_file)
        pins = registry.load_pins(path)
        if name not in pins:
            raise ImageError(
                f"{path} pins no image named {name!r} (pinned: "
                f"{', '.join(sorted(pins)) or 'none'}). Add a [{name}] table with repository, "
                "digest and platform."
            )
        pin = pins[name]
        chosen = registry.choose_registry(pin, registry_flag, self.environ, path)
        return registry.pull(self.engine, self.state, pin, chosen, progress)

    def push(self, name: str, registry_flag: str, progress: Progress) -> ImagePin:
        chosen = check_registry(registry_flag, "--registry")
        record = self._record(name)
        return registry.push(self.engine, self.state, record, chosen, progress)
