"""Environments from Debian recipes: the recipe format, pins compared with what a
build installed, --repin, and a build on a fake engine and bootstrapper."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from pybox._adapters.rootfs import PreparedTree, Progress
from pybox._adapters.state import StateStore
from pybox._core.deb_recipes import compare_pins, parse_recipe, repinned, toolchain_versions
from pybox._core.errors import ImageBuildError, InvalidRequest
from pybox._features.images import deb_builds
from pybox._features.images.lock_plans import lock_changed, locks_dir
from pybox._features.images.operations import ImageOperations
from tests.unit.fake_engine import FakeEngine

RELEASE = "ab" * 32
RECIPE = f"""# a comment kept by --repin
name = "node18"
description = "Node.js 18"
suite = "bookworm"
install = ["nodejs", "npm"]
toolchain = ["nodejs", "npm"]
release_sha256 = "{RELEASE}"

[env]
npm_config_cache = "/pybox/work/.cache/npm"

[packages]
"nodejs" = "18.20.4+dfsg-1~deb12u1"
"npm" = "9.2.0~ds1-1"
"python3" = "3.11.2-1+b1"
"""
FOUND = ("nodejs=18.20.4+dfsg-1~deb12u1", "npm=9.2.0~ds1-1", "python3=3.11.2-1+b1")


def test_a_recipe_is_read() -> None:
    recipe = parse_recipe(RECIPE, "node18.toml", "node18")
    assert recipe.suite == "bookworm" and recipe.architecture == "amd64"
    assert recipe.bootstrap_packages == ("python3", "nodejs", "npm")
    assert recipe.env == (("npm_config_cache", "/pybox/work/.cache/npm"),)
    assert recipe.pins == FOUND
    assert toolchain_versions(recipe.toolchain, FOUND) == {
        "nodejs": "18.20.4+dfsg-1~deb12u1",
        "npm": "9.2.0~ds1-1",
    }


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (('name = "node18"', 'name = "node20"'), "not 'node18'"),
        (('suite = "bookworm"', 'suite = "Bookworm!"'), "suite"),
        (('install = ["nodejs", "npm"]', "install = []"), "install names no package"),
        (('install = ["nodejs", "npm"]', 'install = ["nodejs; rm"]'), "install must be"),
        ((f'"{RELEASE}"', '"xyz"'), "release_sha256"),
        (('npm_config_cache = "/pybox/work/.cache/npm"', 'PATH = "/evil"'), "may not set PATH"),
        (('npm_config_cache = "/pybox/work/.cache/npm"', 'X = "a b"'), "one-word"),
        (("[env]", "unknown = 1\n[env]"), "unknown keys"),
        (("[env]", "[env"), "not TOML"),
    ],
)
def test_a_bad_recipe_is_refused(change: tuple[str, str], words: str) -> None:
    with pytest.raises(InvalidRequest, match="not valid") as caught:
        parse_recipe(RECIPE.replace(*change, 1), "node18.toml", "node18")
    assert words in str(caught.value)


def test_what_moved_is_named() -> None:
    recipe = parse_recipe(RECIPE, "r", "node18")
    assert compare_pins(recipe, FOUND).same
    found = ("nodejs=18.20.5+dfsg-1~deb12u1", "npm=9.2.0~ds1-1", "libuv1=1.44.2-1")
    diff = compare_pins(recipe, found)
    assert diff.moved == (("nodejs", "18.20.4+dfsg-1~deb12u1", "18.20.5+dfsg-1~deb12u1"),)
    assert diff.added == ("libuv1=1.44.2-1",) and diff.gone == ("python3=3.11.2-1+b1",)
    assert diff.lines()[0] == "  nodejs: 18.20.4+dfsg-1~deb12u1 -> 18.20.5+dfsg-1~deb12u1"


def test_repin_keeps_the_head_and_rewrites_the_pins() -> None:
    text = repinned(RECIPE, "cd" * 32, ("zlib1g=1:1.2.13", *FOUND))
    assert text.startswith("# a comment kept by --repin\n")
    again = parse_recipe(text, "r", "node18")
    assert again.release_sha256 == "cd" * 32
    assert again.pins == (*FOUND, "zlib1g=1:1.2.13")
    # A recipe not pinned yet gets its Release line under the suite.
    bare = RECIPE.replace(f'release_sha256 = "{RELEASE}"\n', "").split("[packages]")[0]
    assert parse_recipe(repinned(bare, RELEASE, FOUND), "r", "node18").pins == FOUND


def test_the_shipped_recipes_parse_and_pin_their_toolchains() -> None:
    for name in ("node18", "node20", "go", "rust"):
        path = locks_dir({}) / f"{name}.toml"
        recipe = parse_recipe(path.read_text(), str(path), name)
        assert recipe.env and all(
            v.startswith("/pybox/work") or "/" not in v for _, v in recipe.env
        )
        if recipe.packages:  # pinned by a real build
            assert len(recipe.release_sha256) == 64
            assert set(recipe.toolchain) <= dict(recipe.packages).keys()


class FakeBuilder:
    where = "a test"

    def __init__(self, packages: tuple[str, ...]) -> None:
        self.packages = packages
        self.asked: list[tuple[str, ...]] = []

    def require_tools(self, progress: Progress) -> None:
        pass

    @contextmanager
    def workspace(self, progress: Progress) -> Iterator[str]:
        yield "/nonexistent/rootfs"

    def bootstrap(self, root: str, **kwargs: Any) -> None:
        self.asked.append(kwargs["packages"])

    def prepare(self, root: str, python_path: str, progress: Progress) -> PreparedTree:
        return PreparedTree(self.packages, True)

    def tar(self, root: str) -> Iterator[bytes]:
        yield b""


@pytest.fixture
def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[FakeEngine, StateStore, Path]:
    monkeypatch.setattr(deb_builds, "fetch_release_sha256", lambda mirror, suite: RELEASE)
    recipe = tmp_path / "node18.toml"
    recipe.write_text(RECIPE)
    return FakeEngine(), StateStore(tmp_path / "state"), recipe


def build(
    engine: FakeEngine, state: StateStore, recipe: Path, found: tuple[str, ...], **kw: Any
) -> tuple[Any, list[str], FakeBuilder]:
    lines: list[str] = []
    plan = deb_builds.plan_deb_image(
        engine, state, "node18", recipe, "http://mirror.invalid/debian"
    )
    builder = FakeBuilder(found)
    record, _ = deb_builds.build_deb_image(engine, state, plan, lines.append, builder=builder, **kw)
    return record, lines, builder


def test_a_build_that_installs_the_pins_is_recorded(setup: Any) -> None:
    engine, state, recipe = setup
    record, lines, builder = build(engine, state, recipe, FOUND)
    assert builder.asked == [("python3", "nodejs", "npm")]
    assert "all 3 installed packages are the pinned versions" in "\n".join(lines)
    assert record.recipe["toolchain"] == {"nodejs": "18.20.4+dfsg-1~deb12u1", "npm": "9.2.0~ds1-1"}
    assert record.env == (("npm_config_cache", "/pybox/work/.cache/npm"),)
    assert record.lock_path == str(recipe.resolve()) and lock_changed(record) is None
    assert state.image("node18") == record
    # A changed recipe is noticed before a run, like a changed lock.
    recipe.write_text(RECIPE + '"zlib1g" = "1"\n')
    assert "changed since the image was built" in (lock_changed(record) or "")


def test_a_build_whose_packages_moved_stops_and_records_nothing(setup: Any) -> None:
    engine, state, recipe = setup
    moved = ("nodejs=18.20.5+dfsg-1~deb12u1", *FOUND[1:])
    with pytest.raises(ImageBuildError) as caught:
        build(engine, state, recipe, moved)
    message = str(caught.value)
    assert "nodejs: 18.20.4+dfsg-1~deb12u1 -> 18.20.5+dfsg-1~deb12u1" in message
    assert "--repin" in message and "Nothing was recorded" in message
    assert state.image("node18") is None and engine.names("import_image") == []
    assert recipe.read_text() == RECIPE


def test_repin_writes_the_new_set_and_records_it(setup: Any) -> None:
    engine, state, recipe = setup
    moved = ("nodejs=18.20.5+dfsg-1~deb12u1", *FOUND[1:])
    record, _, _ = build(engine, state, recipe, moved, repin=True)
    assert '"nodejs" = "18.20.5+dfsg-1~deb12u1"' in recipe.read_text()
    assert lock_changed(record) is None  # recorded against the rewritten recipe
    assert record.recipe["packages"][0] == "nodejs=18.20.5+dfsg-1~deb12u1"


def test_a_shipped_recipe_is_chosen_before_a_lock(tmp_path: Path) -> None:
    (tmp_path / "node18.toml").write_text(RECIPE)
    (tmp_path / "data.lock").write_text("")
    ops = ImageOperations(
        FakeEngine, StateStore(tmp_path / "s"), "me", {"PYBOX_LOCKS_DIR": str(tmp_path)}
    )
    assert ops.recipe_path("node18", None) == tmp_path / "node18.toml"
    assert ops.recipe_path("data", None) is None
    assert ops.recipe_path("x", "/a/x.toml") == Path("/a/x.toml")
    assert ops.recipe_path("x", "/a/x.lock") is None


def test_the_capabilities_show_an_environment_s_toolchain() -> None:
    from pybox._frontends.mcp._resources import _toolchain

    recipe = {"suite": "trixie", "description": "Go", "toolchain": {"golang-go": "2:1.24~2"}}
    assert _toolchain(recipe) == {
        "toolchain": {"golang-go": "2:1.24~2"},
        "description": "Go",
        "debian_suite": "trixie",
    }
    assert _toolchain({"packages": ["numpy==2"]}) == {}  # a lock-built image: nothing


def test_verify_names_the_toolchain_not_a_stdlib_base(setup: Any) -> None:
    engine, state, recipe = setup
    build(engine, state, recipe, FOUND)
    checks = ImageOperations(lambda: engine, state, "me", {}).verify("node18").checks
    assert any("toolchain: nodejs 18.20.4+dfsg-1~deb12u1, npm 9.2.0~ds1-1" in c for c in checks)
    assert not any("stdlib" in c for c in checks)
