"""An environment's exec-able workspace (`workspace_exec = true` in its recipe):
only the /pybox tmpfs loses noexec, only for that image, read back before start,
said by the receipt, tied to the image by its recipe hash, never asked by a request."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from pybox._adapters.state import StateStore
from pybox._core.deb_recipes import parse_recipe
from pybox._core.errors import InvalidRequest
from pybox._core.images import LABEL_WORKSPACE_EXEC, ImageRecord, Recipe
from pybox._core.limits import LimitRequest, Policy
from pybox._core.posture import PYBOX_ROOT, TMP_DIR
from pybox._core.request import RunRequest
from pybox._features.images.checks import image_problem
from pybox._features.images.deb_builds import plan_deb_image
from pybox._orchestration.session import Session
from tests.unit.conftest import make_session
from tests.unit.fake_engine import FakeEngine

DOCS = Path(__file__).resolve().parents[2] / "docs"
LOCKS = Path(__file__).resolve().parents[2] / "src" / "pybox" / "_locks"
GO_ID = "sha256:" + "56" * 32
RECIPE_HEAD = 'name = "go"\nsuite = "trixie"\ninstall = ["golang-go"]\n'


def _go_recipe(workspace_exec: bool) -> Recipe:
    extra: tuple[tuple[str, str], ...] = (("lock_sha256", "sha256:" + "0" * 64),)
    if workspace_exec:
        extra += (("workspace_exec", "true"),)
    return Recipe("go", "debootstrap:minbase", "trixie", "http://mirror.invalid", (), 1, extra)


def _record(workspace_exec: bool, *, recipe_hash: str | None = None) -> ImageRecord:
    recipe = _go_recipe(workspace_exec)
    return ImageRecord(
        name="go",
        image_id=GO_ID,
        recipe_hash=recipe_hash or recipe.hash,
        python_path="/usr/bin/python3",
        built_at="2026-01-01T00:00:00Z",
        # An environment's record keeps its toolchain beside the recipe's own keys.
        recipe=recipe.to_dict() | {"toolchain": {"golang-go": "2:1.24~2"}, "description": "Go"},
    )


def _engine_image(record: ImageRecord, label: str | None) -> dict[str, Any]:
    labels = {"io.pybox.image": record.name, "io.pybox.recipe": record.recipe_hash}
    if label is not None:
        labels[LABEL_WORKSPACE_EXEC] = label
    return {"Id": record.image_id, "Config": {"Labels": labels}}


def _session_with_go(engine: FakeEngine, state: StateStore, workspace_exec: bool) -> Session:
    record = _record(workspace_exec)
    state.record_image(record)
    engine.images[GO_ID] = _engine_image(record, "true" if workspace_exec else None)
    return make_session(engine, state)


def test_the_recipe_flag_is_a_boolean_and_off_unless_written() -> None:
    assert parse_recipe(RECIPE_HEAD, "go.toml", "go").workspace_exec is False
    assert parse_recipe(RECIPE_HEAD + "workspace_exec = true\n", "go.toml", "go").workspace_exec
    with pytest.raises(InvalidRequest, match="workspace_exec must be true or false"):
        parse_recipe(RECIPE_HEAD + 'workspace_exec = "yes"\n', "go.toml", "go")


@pytest.mark.parametrize(("name", "wanted"), [("go", True), ("rust", True), ("node20", False)])
def test_the_shipped_recipes_ask_for_it_only_for_compiled_toolchains(
    name: str, wanted: bool
) -> None:
    text = (LOCKS / f"{name}.toml").read_text()
    assert parse_recipe(text, f"{name}.toml", name).workspace_exec is wanted


def test_the_plan_carries_it_in_the_hashed_recipe_only_when_asked(tmp_path: Path) -> None:
    engine, state = FakeEngine(), StateStore(tmp_path / "state")
    plain, flagged = tmp_path / "plain.toml", tmp_path / "flagged.toml"
    plain.write_text(RECIPE_HEAD)
    flagged.write_text(RECIPE_HEAD + "workspace_exec = true\n")
    mirror = "http://mirror.invalid/debian"
    off = plan_deb_image(engine, state, "go", plain, mirror).recipe
    on = plan_deb_image(engine, state, "go", flagged, mirror).recipe
    assert "workspace_exec" not in dict(off.extra)  # other recipes' hashes are unchanged
    assert dict(on.extra)["workspace_exec"] == "true"


def test_only_the_workspace_tmpfs_loses_noexec(engine: FakeEngine, state: StateStore) -> None:
    session = _session_with_go(engine, state, workspace_exec=True)
    seen: list[dict[str, Any]] = []
    engine.tamper = lambda inspected: seen.append(copy.deepcopy(inspected))
    outcome = session.run(RunRequest(code=b"print(1)", image="go"))
    assert outcome.receipt.observed_by_engine.posture_verified
    body = seen[0]  # what the engine made, as the read-back saw it
    tmpfs = body["HostConfig"]["Tmpfs"]
    workspace, tmp = tmpfs[PYBOX_ROOT].split(","), tmpfs[TMP_DIR].split(",")
    assert {"exec", "nosuid", "nodev", "rw"} <= set(workspace) and "noexec" not in workspace
    assert {"noexec", "nosuid", "nodev"} <= set(tmp)
    assert body["HostConfig"]["ReadonlyRootfs"] is True
    assert body["HostConfig"]["NetworkMode"] == "none"
    receipt = outcome.receipt.to_dict()
    assert receipt["configured"]["executable_paths"] == [PYBOX_ROOT]
    schema = json.loads((DOCS / "receipt.schema.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(receipt)
    assert any(line.startswith("  exec:   /pybox") for line in outcome.receipt.summary_lines())


def test_every_other_image_keeps_a_noexec_workspace(engine: FakeEngine, state: StateStore) -> None:
    session = _session_with_go(engine, state, workspace_exec=False)
    seen: list[dict[str, Any]] = []
    engine.tamper = lambda inspected: seen.append(copy.deepcopy(inspected))
    for image in ("stdlib", "go"):
        outcome = session.run(RunRequest(code=b"print(1)", image=image))
        assert outcome.receipt.configured.executable_paths == ()
        assert not any(line.startswith("  exec:") for line in outcome.receipt.summary_lines())
    assert len(seen) == 2
    for inspected in seen:
        assert "noexec" in inspected["HostConfig"]["Tmpfs"][PYBOX_ROOT].split(",")


@pytest.mark.parametrize("workspace_exec", [True, False])
def test_a_box_whose_workspace_options_differ_is_refused_before_start(
    engine: FakeEngine, state: StateStore, workspace_exec: bool
) -> None:
    session = _session_with_go(engine, state, workspace_exec=workspace_exec)
    swap = ("exec", "noexec") if workspace_exec else ("noexec", "exec")

    def flip(inspected: dict[str, Any]) -> None:
        tmpfs = inspected["HostConfig"]["Tmpfs"]
        options = tmpfs[PYBOX_ROOT].split(",")
        tmpfs[PYBOX_ROOT] = ",".join(swap[1] if o == swap[0] else o for o in options)

    engine.tamper = flip
    outcome = session.run(RunRequest(code=b"print(1)", image="go"))
    assert outcome.receipt.status.value == "sandbox_error"
    fields = [m.field for m in outcome.receipt.observed_by_engine.posture_mismatches]
    assert fields == ["HostConfig.Tmpfs"], fields
    assert not [call for call in engine.calls if call[0] == "start"]


def test_the_record_ties_the_flag_to_the_image() -> None:
    engine = FakeEngine()
    good = _record(True)
    engine.images[GO_ID] = _engine_image(good, "true")
    assert good.workspace_exec and good.recipe_matches_hash
    assert image_problem(engine, good) == (True, None)
    # A record edited to ask for it: the recipe no longer matches the image's hash.
    forged = dataclasses.replace(good, recipe_hash=_record(False).recipe_hash)
    engine.images[GO_ID] = _engine_image(forged, None)
    problem = image_problem(engine, forged)[1]
    assert problem is not None and "exec-able workspace" in problem
    # The engine's label says otherwise than the record.
    engine.images[GO_ID] = _engine_image(good, None)
    problem = image_problem(engine, good)[1]
    assert problem is not None and LABEL_WORKSPACE_EXEC in problem
    plain = _record(False)
    engine.images[GO_ID] = _engine_image(plain, "true")
    assert image_problem(engine, plain)[1] is not None


def test_no_request_can_ask_for_it() -> None:
    from pybox import Client
    from pybox._frontends.mcp import _experimentdecl, _sandboxdecl

    assert "workspace_exec" not in {f.name for f in dataclasses.fields(RunRequest)}
    assert "workspace_exec" not in {f.name for f in dataclasses.fields(LimitRequest)}
    assert "workspace_exec" not in {f.name for f in dataclasses.fields(Policy)}
    for name, member in inspect.getmembers(Client, inspect.isfunction):
        assert "workspace_exec" not in inspect.signature(member).parameters, name
    for module in (_experimentdecl, _sandboxdecl):
        assert "workspace_exec" not in inspect.getsource(module)
