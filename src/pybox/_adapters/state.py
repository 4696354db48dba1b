"""pybox's state directory: recorded images and in-flight run attempts.

Writes are atomic (write a temporary file, then rename), so a crash never
leaves a half-written record.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pybox._core.errors import StateError
from pybox._core.images import ImageRecord
from pybox._core.locations import state_dir_path

_NEW_PRIVATE_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def default_state_dir(environ: Mapping[str, str]) -> Path:
    if environ.get("PYBOX_STATE_DIR"):
        return Path(environ["PYBOX_STATE_DIR"])
    return Path(state_dir_path(environ, str(Path.home())))


class StateStore:
    def __init__(self, root: Path) -> None:
        self.root = root

    @property
    def images_file(self) -> Path:
        return self.root / "images.json"

    @property
    def attempts_dir(self) -> Path:
        return self.root / "attempts"

    def _ensure(self, path: Path) -> None:
        try:
            path.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as exc:
            raise StateError(
                f"Cannot create pybox's state directory {path}: {exc.strerror}. Set "
                "PYBOX_STATE_DIR to a writable directory."
            ) from exc

    def _write_json(self, path: Path, data: Any) -> None:
        self._ensure(path.parent)
        try:
            # What tempfile.mkstemp does, without importing tempfile (and shutil, bz2
            # and lzma with it) on every run: a new private file, never an old one.
            temporary = path.parent / f".{path.name}.{os.urandom(6).hex()}"
            fd = os.open(temporary, _NEW_PRIVATE_FILE, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump(data, handle, indent=2, sort_keys=True)
                handle.write("\n")
            os.replace(temporary, path)
        except OSError as exc:
            raise StateError(f"Cannot write {path}: {exc.strerror or exc}.") from exc

    def _read_json(self, path: Path) -> Any:
        try:
            with path.open(encoding="utf-8") as handle:
                return json.load(handle)
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise StateError(
                f"Cannot read {path}: {exc}. Move it aside and run `pybox setup --yes` again."
            ) from exc

    # -- images -----------------------------------------------------------------

    def images(self) -> dict[str, ImageRecord]:
        data = self._read_json(self.images_file)
        if data is None:
            return {}
        if not isinstance(data, dict) or not isinstance(data.get("images"), dict):
            raise StateError(
                f"{self.images_file} is not a pybox image list. Move it aside and rebuild "
                "with `pybox image build stdlib`."
            )
        return {
            name: ImageRecord.from_dict(record, str(self.images_file))
            for name, record in data["images"].items()
        }

    def image(self, name: str) -> ImageRecord | None:
        return self.images().get(name)

    def record_image(self, record: ImageRecord) -> None:
        images = self.images()
        images[record.name] = record
        self._write_json(
            self.images_file,
            {"version": 1, "images": {name: r.to_dict() for name, r in sorted(images.items())}},
        )

    def forget_image(self, name: str) -> bool:
        images = self.images()
        if images.pop(name, None) is None:
            return False
        self._write_json(
            self.images_file,
            {"version": 1, "images": {n: r.to_dict() for n, r in sorted(images.items())}},
        )
        return True

    # -- attempts ---------------------------------------------------------------

    def _attempt_path(self, run_id: str) -> Path:
        return self.attempts_dir / f"{run_id}.json"

    def record_attempt(self, run_id: str, record: Mapping[str, Any]) -> None:
        """Written before the box is created, so a crash leaves a trace to sweep."""
        self._write_json(self._attempt_path(run_id), dict(record))

    def finish_attempt(self, run_id: str) -> None:
        try:
            self._attempt_path(run_id).unlink()
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise StateError(f"Cannot remove the attempt record for run {run_id}: {exc}.") from exc

    def attempts(self) -> dict[str, dict[str, Any]]:
        found: dict[str, dict[str, Any]] = {}
        try:
            entries = sorted(self.attempts_dir.glob("*.json"))
        except OSError:
            return found
        for entry in entries:
            try:
                data = self._read_json(entry)
            except StateError:
                data = None
            found[entry.stem] = data if isinstance(data, dict) else {}
        return found
