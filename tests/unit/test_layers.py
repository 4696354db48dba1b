"""Layers point downward only, and front ends never touch the engine.

core (values, no I/O) <- adapters (engine client, cgroups, state, config, host)
<- orchestration (boxes, features, session, images) <- front ends (CLI, API,
MCP). Within orchestration, `pybox._boxes` (a box and its programs) sits below
the rest: it imports nothing from `_features`, `_orchestration` or `_frontends`.
`pybox`, `pybox.__main__` and `pybox._main` are the composition roots: the only
modules that may put several front ends together.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "pybox"

COMPOSITION_ROOTS = ("pybox", "pybox.__main__", "pybox._main")
LAYERS = {"core": 0, "adapters": 1, "orchestration": 2, "frontends": 3}
NO_IO_IN_CORE = {
    "os",
    "io",
    "socket",
    "select",
    "subprocess",
    "http",
    "urllib",
    "tempfile",
    "shutil",
    "pathlib",
    "threading",
    "time",
    "sys",
}


def module_name(path: Path) -> str:
    relative = path.relative_to(SRC.parent).with_suffix("")
    parts = list(relative.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def layer_of(module: str) -> str:
    if module in COMPOSITION_ROOTS or module.startswith("pybox._frontends"):
        return "frontends"
    if module.startswith(("pybox._orchestration", "pybox._boxes", "pybox._features")):
        return "orchestration"
    if module.startswith(("pybox._adapters", "pybox._engine", "pybox._inbox")):
        return "adapters"
    if module.startswith("pybox._core") or module == "pybox._version":
        return "core"
    raise AssertionError(f"{module} belongs to no layer; add it to the layer map")


def front_end(module: str) -> str:
    """`pybox._frontends.cli._exec` -> `cli`: modules of one front end may share code."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 else ""


def imports(path: Path) -> list[str]:
    """Every module `path` imports, relative imports resolved to absolute names."""
    tree = ast.parse(path.read_text(), str(path))
    package = module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                found.append(node.module or "")
                continue
            base = package[: len(package) - (node.level - 1)]
            if node.module:
                found.append(".".join([*base, node.module]))
            else:  # `from . import x`: each name may be a module of the package
                found.extend(".".join([*base, alias.name]) for alias in node.names)
    return found


# The bootstrap runs in the box; verify's hostile programs are data, never imported.
MODULES = sorted(
    p for p in SRC.rglob("*.py") if p.name != "bootstrap.py" and "_verify_cases" not in p.parts
)


@pytest.mark.parametrize("path", MODULES, ids=module_name)
def test_imports_point_downward(path: Path) -> None:
    source = module_name(path)
    source_layer = layer_of(source)
    for target in imports(path):
        if not target.startswith("pybox"):
            if source_layer == "core":
                assert target.split(".")[0] not in NO_IO_IN_CORE, (
                    f"{source} (core) imports {target}"
                )
            continue
        target_layer = layer_of(target)
        assert LAYERS[target_layer] <= LAYERS[source_layer], (
            f"{source} ({source_layer}) imports {target} ({target_layer})"
        )
        if source_layer == "frontends" and source not in COMPOSITION_ROOTS:
            assert target_layer != "adapters", f"front end {source} touches adapter {target}"
            assert target_layer != "frontends" or front_end(target) == front_end(source), (
                f"front end {source} imports front end {target}"
            )


@pytest.mark.parametrize(
    "path", [p for p in MODULES if module_name(p).startswith("pybox._boxes")], ids=module_name
)
def test_boxes_import_nothing_above_them(path: Path) -> None:
    above = ("pybox._features", "pybox._orchestration", "pybox._frontends")
    reached = [target for target in imports(path) if target.startswith(above)]
    assert not reached, f"{module_name(path)} imports {reached}"


@pytest.mark.parametrize(
    "path",
    [p for p in MODULES if layer_of(module_name(p)) == "frontends"],
    ids=module_name,
)
def test_front_ends_never_reach_for_the_engine(path: Path) -> None:
    tree = ast.parse(path.read_text(), str(path))
    touched = [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and node.attr in ("engine", "_engine")
    ]
    assert not touched, f"{module_name(path)} reaches for the engine on lines {touched}"


def test_relative_imports_are_resolved(tmp_path: Path) -> None:
    """A relative import cannot hide a layer violation from the check above."""
    front = SRC / "_frontends" / "cli" / "_exec.py"
    sample = front.with_name("_sample_for_layer_test.py")
    tree_text = "from ..._engine import client\nfrom .. import api\nfrom ._common import say\n"
    try:
        sample.write_text(tree_text)
        found = imports(sample)
    finally:
        sample.unlink()
    assert found == [
        "pybox._engine",
        "pybox._frontends.api",
        "pybox._frontends.cli._common",
    ]


def test_the_bootstrap_imports_nothing_from_pybox() -> None:
    bootstrap = SRC / "_inbox" / "bootstrap.py"
    assert not [name for name in imports(bootstrap) if name.startswith("pybox")]


def test_public_surface_is_listed() -> None:
    import pybox

    assert sorted(pybox.__all__) == sorted(set(pybox.__all__))
    for name in pybox.__all__:
        assert hasattr(pybox, name), name
    assert (SRC / "py.typed").exists()


def test_no_shell_anywhere() -> None:
    for path in SRC.rglob("*.py"):
        text = path.read_text()
        for banned in ("shell=True", "os.system(", "os.popen("):
            assert banned not in text, f"{path} uses {banned}"
