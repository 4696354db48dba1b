"""Layers point downward only, and front ends never touch the engine.

core (values, no I/O) <- adapters (engine client, cgroups, state, config, host
facts, colima) <- orchestration (`_boxes`, `_features`, `_orchestration`) <- front
ends (CLI, API, MCP). Within orchestration, `pybox._boxes` (a box and its programs)
sits below the rest: it imports nothing from `_features`, `_orchestration` or
`_frontends`. `pybox`, `pybox.__main__` and `pybox._main` are the composition
roots: the only modules that may put several front ends together.
"""

from __future__ import annotations

import ast
import typing
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
    if module.startswith(("pybox._orchestration", "pybox._features", "pybox._boxes")):
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


def imports(path: Path, module: str | None = None) -> list[str]:
    """Every module `path` imports, relative imports resolved to absolute names.

    `module` is the file's dotted name (default: from its place under src/).
    """
    tree = ast.parse(path.read_text(), str(path))
    package = (module or module_name(path)).split(".")
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
            # Python refuses a relative import that climbs out of pybox; so does this check.
            assert node.level <= len(package), f"{path}:{node.lineno} climbs above {package[0]}"
            base = package[: len(package) - (node.level - 1)]
            if node.module:
                found.append(".".join([*base, node.module]))
            else:  # `from . import x`: each name may be a module of the package
                found.extend(".".join([*base, alias.name]) for alias in node.names)
    return found


def violations(path: Path, source: str) -> list[str]:
    """What is wrong with the imports of the module `source` (whose file is `path`)."""
    found: list[str] = []
    source_layer = layer_of(source)
    for target in imports(path, source):
        if not target.startswith("pybox"):
            if source_layer == "core" and target.split(".")[0] in NO_IO_IN_CORE:
                found.append(f"{source} (core) imports {target}")
            continue
        target_layer = layer_of(target)
        if LAYERS[target_layer] > LAYERS[source_layer]:
            found.append(f"{source} ({source_layer}) imports {target} ({target_layer})")
        if source_layer == "frontends" and source not in COMPOSITION_ROOTS:
            if target_layer == "adapters":
                found.append(f"front end {source} touches adapter {target}")
            if target_layer == "frontends" and front_end(target) != front_end(source):
                found.append(f"front end {source} imports front end {target}")
    return found


# The bootstrap runs in the box; verify's hostile programs are data, never imported.
VERIFY_CASES = SRC / "_features" / "verify" / "cases"
MODULES = sorted(
    p for p in SRC.rglob("*.py") if p.name != "bootstrap.py" and not p.is_relative_to(VERIFY_CASES)
)
FRONT_ENDS = [p for p in MODULES if layer_of(module_name(p)) == "frontends"]


@pytest.mark.parametrize("path", MODULES, ids=module_name)
def test_imports_point_downward(path: Path) -> None:
    assert not violations(path, module_name(path))


@pytest.mark.parametrize(
    "path", [p for p in MODULES if module_name(p).startswith("pybox._boxes")], ids=module_name
)
def test_boxes_import_nothing_above_them(path: Path) -> None:
    above = ("pybox._features", "pybox._orchestration", "pybox._frontends")
    reached = [target for target in imports(path) if target.startswith(above)]
    assert not reached, f"{module_name(path)} imports {reached}"


@pytest.mark.parametrize("path", FRONT_ENDS, ids=module_name)
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
    sample = tmp_path / "_sample.py"
    sample.write_text(
        "from ..._engine import client\nfrom .. import api\nfrom ._common import say\n"
    )
    assert imports(sample, "pybox._frontends.cli._sample") == [
        "pybox._engine",
        "pybox._frontends.api",
        "pybox._frontends.cli._common",
    ]


@pytest.mark.parametrize(
    ("module", "text", "expected"),
    [
        # a CLI module reaching an adapter two packages up
        (
            "pybox._frontends.cli._planted",
            "from ..._adapters import state\n",
            "front end pybox._frontends.cli._planted touches adapter pybox._adapters",
        ),
        # one front end importing another through `from .. import`
        (
            "pybox._frontends.cli._planted",
            "from .. import mcp\n",
            "front end pybox._frontends.cli._planted imports front end pybox._frontends.mcp",
        ),
        # a feature importing a front end upward
        (
            "pybox._features.images._planted",
            "from ..._frontends.cli import _common\n",
            "pybox._features.images._planted (orchestration) imports "
            "pybox._frontends.cli (frontends)",
        ),
        # core reaching up into a box
        (
            "pybox._core._planted",
            "from .._boxes import box\n",
            "pybox._core._planted (core) imports pybox._boxes (orchestration)",
        ),
    ],
)
def test_a_planted_relative_import_across_layers_is_caught(
    tmp_path: Path, module: str, text: str, expected: str
) -> None:
    planted = tmp_path / f"{module.rsplit('.', 1)[1]}.py"
    planted.write_text(text)
    assert violations(planted, module) == [expected]


def test_a_relative_import_above_pybox_is_refused(tmp_path: Path) -> None:
    planted = tmp_path / "_planted.py"
    planted.write_text("from .... import anything\n")
    with pytest.raises(AssertionError, match="climbs above"):
        imports(planted, "pybox._frontends.cli._planted")


# `Session.engine` and `Session.state` are the session's handles for orchestration
# code (verify drives the engine itself); front ends are kept off them by
# `test_front_ends_reach_no_adapter_through_the_session` below.
ORCHESTRATION_HANDLES = frozenset({"engine", "state"})


def _adapter_types_in(annotation: object) -> list[str]:
    """Adapter or engine classes named anywhere in a resolved annotation."""
    found: list[str] = []
    module = getattr(annotation, "__module__", "") or ""
    if isinstance(annotation, type) and layer_of_or_none(module) == "adapters":
        found.append(f"{module}.{annotation.__qualname__}")
    for argument in typing.get_args(annotation):
        found.extend(_adapter_types_in(argument))
    return found


def layer_of_or_none(module: str) -> str | None:
    return layer_of(module) if module.startswith("pybox") else None


def _type_checking_names(path: str) -> dict[str, object]:
    """What a module imports under `if TYPE_CHECKING:` (for its annotations only, so
    that running it does not import them), imported here so its hints resolve."""
    names: dict[str, object] = {}
    for node in ast.walk(ast.parse(Path(path).read_text(), path)):
        if isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING"):
            body = ast.Module(body=node.body, type_ignores=[])
            exec(compile(body, path, "exec"), names)  # imports only
    return names


def test_the_session_hands_out_no_adapter_object() -> None:
    """Front ends talk to a Session; nothing public on it returns an adapter or the engine.

    Its methods come from its parts too (`pybox._orchestration.session.*`): each
    class of the MRO is read with its own module's names."""
    import sys

    from pybox._orchestration.session import Session

    leaks: list[str] = []
    seen: set[str] = set()
    for cls in Session.__mro__:
        if not cls.__module__.startswith("pybox"):
            continue
        module = sys.modules[cls.__module__]
        assert module.__file__ is not None
        namespace = {**vars(module), **_type_checking_names(module.__file__)}
        leaks.extend(_adapter_returns(cls, namespace, seen))
    assert not leaks, leaks


def _adapter_returns(cls: type, namespace: dict[str, object], seen: set[str]) -> list[str]:
    """The public members of `cls` (not overridden before it in the MRO) returning an adapter."""
    leaks: list[str] = []
    for name, member in vars(cls).items():
        if name.startswith("_") or name in ORCHESTRATION_HANDLES or name in seen:
            continue
        seen.add(name)
        function = member.fget if isinstance(member, property) else member
        if isinstance(function, (classmethod, staticmethod)):
            function = function.__func__
        if not callable(function):
            continue
        hints = typing.get_type_hints(function, globalns=namespace)
        leaks.extend(f"Session.{name}: {t}" for t in _adapter_types_in(hints.get("return")))
    return leaks


def test_the_session_keeps_no_other_public_adapter_attribute(tmp_path: Path) -> None:
    from pybox._adapters.state import StateStore
    from tests.unit.conftest import make_session
    from tests.unit.fake_engine import FakeEngine

    session = make_session(FakeEngine(), StateStore(tmp_path))
    leaks = [
        f"Session.{name}: {type(value).__module__}.{type(value).__qualname__}"
        for name, value in vars(session).items()
        if not name.startswith("_")
        and name not in ORCHESTRATION_HANDLES
        and layer_of_or_none(type(value).__module__) == "adapters"
    ]
    assert not leaks, leaks


def _session_names(tree: ast.AST) -> set[str]:
    """Names of arguments annotated as a Session (`session: Session`)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.arg)
            and node.annotation is not None
            and "Session" in ast.unparse(node.annotation)
        ):
            names.add(node.arg)
    return names


def session_misuses(tree: ast.AST) -> list[str]:
    """`x.state`, `x.engine` or `x._anything` where x is a session object (a name or
    attribute holding `session`, or an argument annotated as a Session)."""
    annotated = _session_names(tree)
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        holder = node.value
        held = holder.id if isinstance(holder, ast.Name) else getattr(holder, "attr", "")
        if not ("session" in held.lower() or held in annotated):
            continue
        if node.attr in ORCHESTRATION_HANDLES or node.attr.startswith("_"):
            found.append((node.lineno, f"line {node.lineno}: {ast.unparse(node)}"))
    return [text for _, text in sorted(found)]


@pytest.mark.parametrize("path", FRONT_ENDS, ids=module_name)
def test_front_ends_reach_no_adapter_through_the_session(path: Path) -> None:
    misuses = session_misuses(ast.parse(path.read_text(), str(path)))
    assert not misuses, f"{module_name(path)} reaches into the session: {misuses}"


def test_a_front_end_reaching_into_the_session_is_caught() -> None:
    planted = (
        "def show(session, box: Session, self=None):\n"
        "    session.state.images()\n"
        "    self.session.engine.info()\n"
        "    box._context()\n"
        "    session.recorded_images()\n"
    )
    assert session_misuses(ast.parse(planted)) == [
        "line 2: session.state",
        "line 3: self.session.engine",
        "line 4: box._context",
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


BENCH = SRC.parents[1] / "bench"


@pytest.mark.parametrize("path", sorted(BENCH.glob("*.py")), ids=lambda p: p.name)
def test_bench_imports_nothing_from_the_tests(path: Path) -> None:
    """The benchmarks run against an installed pybox; the tests are not shipped with it."""
    found = imports(path, f"bench.{path.stem}")
    assert not [name for name in found if name.split(".")[0] == "tests"], found


def test_bench_has_one_percentile_and_one_mcp_client() -> None:
    """bench/_stats.py and bench/_mcp_client.py are the only copies."""
    homes: dict[str, list[str]] = {"percentile": [], "McpClient": []}
    for path in sorted(BENCH.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.ClassDef):
                if node.name in homes:
                    homes[node.name].append(path.name)
                elif isinstance(node, ast.ClassDef) and "mcp" in node.name.lower():
                    homes["McpClient"].append(f"{path.name}:{node.name}")
    assert homes == {"percentile": ["_stats.py"], "McpClient": ["_mcp_client.py"]}
