"""Rebuilding a lock-built image: the command pybox suggests works as printed,
and the image a rebuild replaced is removed (only when it is surely pybox's)."""

from __future__ import annotations

import dataclasses
import json
import shlex
from pathlib import Path

import pytest

from pybox._adapters.piptool import PipSettings
from pybox._adapters.state import StateStore
from pybox._core.errors import ImageError
from pybox._core.images import state_mark
from pybox._features.images import builds
from pybox._features.images import operations as image_operations
from pybox._features.images.operations import ImageOperations
from pybox._features.images.records import remove_replaced
from pybox._frontends.cli import build_parser
from tests.unit.conftest import make_session
from tests.unit.fake_engine import FakeEngine

REPO = Path(__file__).resolve().parents[2]
LOCK_TEXT = "six==1.17.0 --hash=sha256:" + "a" * 64 + "\n"


@pytest.fixture(autouse=True)
def no_host_pip(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(builds, "download_pip_wheel", lambda lock, env: ("pip-1-py3.whl", b"w"))
    monkeypatch.setattr(image_operations, "host_pip_settings", lambda environ: PipSettings())


def installed_ok(argv: list[str]) -> tuple[int, bytes]:
    if "-c" in argv and "importlib.metadata" in argv[-1]:
        report = {"interfaces": ["lo"], "packages": ["six==1.17.0"]}
        return 0, json.dumps(report).encode() + b"\n"
    return 0, b""


def operations(engine: FakeEngine, state: StateStore) -> ImageOperations:
    engine.exec_script = installed_ok
    return ImageOperations(
        lambda: engine, state, "testhost:1:1", {"PYBOX_LOCKS_DIR": str(REPO / "locks")}
    )


def build(ops: ImageOperations, lock: str) -> builds.BuildResult:
    return ops.build(ops.plan_build("tools", lock), lambda message: None)


def test_the_suggested_rebuild_works_from_any_folder(
    engine: FakeEngine, state: StateStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "my project"
    folder.mkdir()
    (folder / "tools.lock").write_text(LOCK_TEXT)
    monkeypatch.chdir(folder)
    ops = operations(engine, state)
    first = build(ops, "tools.lock")  # a relative path, as people type it
    (folder / "tools.lock").write_text(LOCK_TEXT + "# edited\n")

    problems = ops.verify("tools").problems
    with pytest.raises(ImageError) as refused:
        make_session(engine, state).verified_image("tools")
    expected = f"pybox image build tools --lock '{folder / 'tools.lock'}'"
    assert any(expected in problem for problem in problems), problems
    assert expected in str(refused.value)

    # Run as printed, from another folder: it names the same lock and rebuilds.
    monkeypatch.chdir(tmp_path)
    args = build_parser().parse_args(shlex.split(expected)[1:])
    again = ops.build(ops.plan_build(args.name, args.lock), lambda message: None)
    assert again.built and again.record.image_id != first.record.image_id
    assert again.record.lock_path == str(folder / "tools.lock")
    assert ops.verify("tools").ok


def test_a_rebuild_removes_the_image_it_replaced(
    engine: FakeEngine, state: StateStore, tmp_path: Path
) -> None:
    lock = tmp_path / "tools.lock"
    lock.write_text(LOCK_TEXT)
    ops = operations(engine, state)
    old = build(ops, str(lock)).record
    old_tags = list(engine.images[old.image_id]["RepoTags"])
    lock.write_text(LOCK_TEXT + "# edited\n")
    messages: list[str] = []
    result = ops.build(ops.plan_build("tools", str(lock)), messages.append)
    assert result.built and result.replaced is not None
    assert result.replaced.kept_because is None
    assert result.replaced.removed == tuple(old_tags)
    assert engine.inspect_image(old.image_id) is None
    assert engine.inspect_image(result.record.image_id) is not None
    assert f"removed the replaced tools image {old.image_id[:19]} ({old_tags[0]})" in messages
    # The base image was never touched.
    stdlib = state.image("stdlib")
    assert stdlib is not None and engine.inspect_image(stdlib.image_id) is not None


def test_a_replaced_image_another_record_uses_is_kept(
    engine: FakeEngine, state: StateStore, tmp_path: Path
) -> None:
    lock = tmp_path / "tools.lock"
    lock.write_text(LOCK_TEXT)
    ops = operations(engine, state)
    old = build(ops, str(lock)).record
    state.record_image(dataclasses.replace(old, name="copy"))
    lock.write_text(LOCK_TEXT + "# edited\n")
    messages: list[str] = []
    result = ops.build(ops.plan_build("tools", str(lock)), messages.append)
    assert result.replaced is not None and result.replaced.removed == ()
    assert result.replaced.kept_because == "still recorded as copy"
    assert engine.inspect_image(old.image_id) is not None
    assert any("kept the replaced tools image" in m for m in messages)


def test_a_replaced_image_with_someone_elses_tag_keeps_it(
    engine: FakeEngine, state: StateStore, tmp_path: Path
) -> None:
    lock = tmp_path / "tools.lock"
    lock.write_text(LOCK_TEXT)
    ops = operations(engine, state)
    old = build(ops, str(lock)).record
    engine.tag_image(old.image_id, "myorg/tools", "v1")
    lock.write_text(LOCK_TEXT + "# edited\n")
    result = ops.build(ops.plan_build("tools", str(lock)), lambda message: None)
    assert result.replaced is not None
    assert "myorg/tools:v1" not in result.replaced.removed
    assert engine.inspect_image("myorg/tools:v1") is not None
    assert engine.inspect_image(old.image_id) is not None
    assert result.replaced.kept_because is not None
    assert "other references" in result.replaced.kept_because


def test_a_record_that_points_at_another_image_is_never_removed(
    engine: FakeEngine, state: StateStore, tmp_path: Path
) -> None:
    lock = tmp_path / "tools.lock"
    lock.write_text(LOCK_TEXT)
    ops = operations(engine, state)
    old = build(ops, str(lock)).record
    engine.images[old.image_id]["Config"]["Labels"]["io.pybox.image"] = "someone-else"
    lock.write_text(LOCK_TEXT + "# edited\n")
    result = ops.build(ops.plan_build("tools", str(lock)), lambda message: None)
    assert result.replaced is not None and result.replaced.removed == ()
    assert engine.inspect_image(old.image_id) is not None
    assert engine.names("remove_image") == []


def test_an_image_another_state_directory_built_is_kept(
    engine: FakeEngine, state: StateStore, tmp_path: Path
) -> None:
    """A copied images.json (or another user's state) may record it too."""
    lock = tmp_path / "tools.lock"
    lock.write_text(LOCK_TEXT)
    ops = operations(engine, state)
    old = build(ops, str(lock)).record
    labels = engine.images[old.image_id]["Config"]["Labels"]
    assert labels["io.pybox.state"] == state_mark(str(state.root))
    labels["io.pybox.state"] = state_mark("/some/other/state")
    lock.write_text(LOCK_TEXT + "# edited\n")
    result = ops.build(ops.plan_build("tools", str(lock)), lambda message: None)
    assert result.replaced is not None and result.replaced.removed == ()
    assert result.replaced.kept_because is not None
    assert "not built with this state directory" in result.replaced.kept_because
    assert engine.inspect_image(old.image_id) is not None
    assert engine.names("remove_image") == []


def test_a_replaced_base_image_is_kept_while_an_image_is_built_on_it(
    engine: FakeEngine, state: StateStore, tmp_path: Path
) -> None:
    lock = tmp_path / "tools.lock"
    lock.write_text(LOCK_TEXT)
    build(operations(engine, state), str(lock))
    stdlib = state.image("stdlib")
    assert stdlib is not None
    rebuilt = dataclasses.replace(stdlib, image_id="sha256:" + "9" * 64)
    state.record_image(rebuilt)
    replaced = remove_replaced(engine, state, stdlib, rebuilt)
    assert replaced is not None and replaced.kept_because == "tools is built on it"
    assert engine.inspect_image(stdlib.image_id) is not None
    assert engine.names("remove_image") == []


def test_a_replaced_image_already_gone_is_said_so(
    engine: FakeEngine, state: StateStore, tmp_path: Path
) -> None:
    lock = tmp_path / "tools.lock"
    lock.write_text(LOCK_TEXT)
    ops = operations(engine, state)
    old = build(ops, str(lock)).record
    for reference in list(engine.images[old.image_id]["RepoTags"]):
        engine.remove_image(reference)
    assert engine.inspect_image(old.image_id) is None
    lock.write_text(LOCK_TEXT + "# edited\n")
    messages: list[str] = []
    result = ops.build(ops.plan_build("tools", str(lock)), messages.append)
    assert result.replaced is not None and result.replaced.removed == ()
    assert f"the replaced tools image {old.image_id[:19]} was no longer in the engine" in messages
