"""Where boxes run is an object per place, never a string compared in six files."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from pybox._adapters.config import load_settings
from pybox._adapters.host_facts import current_owner
from pybox._core.errors import InvalidRequest
from pybox._orchestration.hosts import ColimaHost, LocalHost, open_host

SRC = Path(__file__).resolve().parents[2] / "src" / "pybox"
PLATFORM_NAMES = {"linux", "colima"}


def _host(platform: str, tmp_path: Path) -> LocalHost | ColimaHost:
    environ = {"PYBOX_PLATFORM": platform, "PYBOX_STATE_DIR": str(tmp_path), "HOME": str(tmp_path)}
    host = open_host(load_settings(environ), environ)
    assert isinstance(host, LocalHost | ColimaHost)
    return host


def test_each_platform_opens_its_own_host(tmp_path: Path) -> None:
    local = _host("linux", tmp_path)
    colima = _host("colima", tmp_path)
    assert isinstance(local, LocalHost) and not local.in_vm
    assert isinstance(colima, ColimaHost) and colima.in_vm
    assert (local.name, colima.name) == ("linux", "colima")


def test_the_local_host_marks_nothing_and_checks_nothing(tmp_path: Path) -> None:
    local = _host("linux", tmp_path)
    assert local.output_marker() is None
    local.check_before_run()  # nothing to re-read on this machine's engine
    assert local.owner_alive(current_owner()) is True


def test_the_local_host_has_no_vm_to_hand_out(tmp_path: Path) -> None:
    with pytest.raises(InvalidRequest, match="There is no pybox VM here"):
        _host("linux", tmp_path).colima()


def test_the_vm_host_marks_returned_files(tmp_path: Path) -> None:
    assert _host("colima", tmp_path).output_marker() is not None


def _compares_a_platform_name(node: ast.AST) -> bool:
    if not isinstance(node, ast.Compare) or not all(
        isinstance(op, ast.Eq | ast.NotEq) for op in node.ops
    ):
        return False
    operands = [node.left, *node.comparators]
    return any(isinstance(o, ast.Constant) and o.value in PLATFORM_NAMES for o in operands)


def test_no_code_compares_the_platform_name() -> None:
    """Variation lives in the host classes; a `== "colima"` is a branch in the wrong place."""
    offenders = []
    for path in sorted(SRC.rglob("*.py")):
        if "cases" in path.parts or path.name == "bootstrap.py":
            continue
        tree = ast.parse(path.read_text(), str(path))
        offenders += [
            f"{path.name}:{n.lineno}"
            for n in ast.walk(tree)
            if isinstance(n, ast.Compare) and _compares_a_platform_name(n)
        ]
    assert not offenders


# Engines, lanes and hosts are objects (pybox._engine.endpoint's kinds, the backends'
# classes, verify's LaneTerms, the hosts); their names are data, never a branch.
ENGINE_AND_LANE_NAMES = frozenset({"docker", "podman", "gvisor", "runsc", "colima"})


def test_no_code_compares_an_engine_or_lane_name() -> None:
    """Variation lives in the backend, lane or host object: a `== "podman"` is a branch
    in the wrong place (issue 30)."""
    offenders = []
    for path in sorted(SRC.rglob("*.py")):
        if "cases" in path.parts or path.name == "bootstrap.py":
            continue
        tree = ast.parse(path.read_text(), str(path))
        offenders += [
            f"{path.name}:{n.lineno}"
            for n in ast.walk(tree)
            if isinstance(n, ast.Compare)
            and all(isinstance(op, ast.Eq | ast.NotEq) for op in n.ops)
            and any(
                isinstance(o, ast.Constant) and o.value in ENGINE_AND_LANE_NAMES
                for o in [n.left, *n.comparators]
            )
        ]
    assert not offenders
