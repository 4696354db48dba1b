"""A session's images: the recorded ones, checked before a run, and building,
verifying and removing them (part of `Session`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from pybox._adapters.state import StateStore
from pybox._core.errors import ImageError, PyboxError
from pybox._core.images import ImageRecord
from pybox._engine import Engine
from pybox._features.images.checks import verify_for_run

# Building and listing images (`records`) is imported by the methods that do it: a
# run only checks its image (`checks`) and does not pay for the rest.
if TYPE_CHECKING:
    from pybox._adapters.rootfs import Progress
    from pybox._features.images.operations import ImageOperations
    from pybox._features.images.records import BuildPlan, ImageStatus
    from pybox._orchestration.hosts import Host


class SessionImages:
    """The image half of `Session`, which sets these attributes."""

    state: StateStore
    owner: str
    host: Host | None
    _environ: Mapping[str, str]
    _verified_images: set[tuple[str, str, str]]

    @property
    def engine(self) -> Engine:
        raise NotImplementedError

    def image(self, name: str) -> ImageRecord:
        record = self.state.image(name)
        if record is None:
            known = ", ".join(sorted(self.state.images())) or "none"
            hint = (
                "Build it with `pybox setup --yes` (or `pybox image build stdlib`)."
                if name == "stdlib"
                else f"Build it with `pybox image build {name}`."
            )
            if name == "stdlib":
                # Not the same advice again: the loop after `sudo pybox setup` ends here.
                hint = self._other_users_image_hint() or hint
            raise ImageError(
                f"No image named {name!r} is recorded in {self.state.root} (recorded: {known}). "
                + hint
            )
        return record

    def _other_users_image_hint(self) -> str | None:
        try:
            engine = self.engine
        except PyboxError:
            return None  # the run itself reports the unreachable engine
        from pybox._features.images.records import other_users_image_hint

        return other_users_image_hint(engine, self.state)

    def verified_image(self, name: str) -> ImageRecord:
        """The recorded image, checked against the engine (ID, name and recipe labels)
        and against its lock file. Anything else is refused, never used."""
        record = self.image(name)
        if record.lock_path:  # the stdlib image has no lock: its runs skip the lock module
            from pybox._features.images.lock_plans import lock_changed

            changed = lock_changed(record)
            if changed is not None:
                raise ImageError(
                    f"Refusing to run image {name}: {changed}. Rebuild it with "
                    f"`{record.rebuild_command}`."
                )
        key = (record.name, record.image_id, record.recipe_hash)
        if key not in self._verified_images:
            verify_for_run(self.engine, record)
            self._verified_images.add(key)
        return record

    def plan_stdlib(self, *, mirror: str | None = None, suite: str | None = None) -> BuildPlan:
        from pybox._features.images.records import plan_stdlib

        if self.host is not None and self.host.in_vm:
            from pybox._adapters.colima.rootfs_build import VM_DEBIAN_KEYRING
            from pybox._features.vm.setup import vm_build_source

            # Checked before the VM is touched: a Mac has no apt sources to default to.
            source = vm_build_source(self.host, mirror, suite)
            mirror, suite = source.checked()
            return plan_stdlib(
                self.engine,
                self.state,
                mirror=mirror,
                suite=suite,
                keyring=VM_DEBIAN_KEYRING,
                mirror_found_in=source.found_in,
            )
        return plan_stdlib(self.engine, self.state, mirror=mirror, suite=suite)

    def build_stdlib(
        self, plan: BuildPlan, progress: Progress, *, force: bool = False
    ) -> ImageRecord:
        from pybox._features.images.records import build_stdlib

        builder = None
        if self.host is not None and self.host.in_vm:
            from pybox._adapters.colima.rootfs_build import VMRootfsBuilder

            builder = VMRootfsBuilder(self.host.colima())
        return build_stdlib(self.engine, self.state, plan, progress, force=force, builder=builder)

    def check_images(self) -> list[ImageStatus]:
        from pybox._features.images.records import check_images

        return check_images(self.engine, self.state)

    def images(self) -> ImageOperations:
        """Building from locks, verifying, removing, pulling and pushing images."""
        from pybox._features.images.operations import ImageOperations

        return ImageOperations(lambda: self.engine, self.state, self.owner, self._environ)
