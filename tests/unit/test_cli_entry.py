"""The import budgets of the command line's entry (`pybox._main.main` -> `cli.main`).

What `pybox version`, `pybox --help` and a cold `pybox exec` may import, each
run in a fresh interpreter (a module an earlier test imported cannot hide
one). These are the walls that keep the command line's start-up small
(docs/performance.md, "Command-line start-up" and "What a command imports");
bench/cli_startup.py times it. Each failure says what was imported, by whom,
and what to do about it. The pool client's own budget is in
tests/unit/test_pool_service.py (`test_the_client_imports_almost_nothing`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# Modules that no light command may import: the engine, adapters, orchestration,
# the other front ends, and the heavy parts of the standard library.
HEAVY = (
    "pybox._engine",
    "pybox._adapters",
    "pybox._boxes",
    "pybox._features",
    "pybox._inbox",
    "pybox._orchestration",
    "pybox._frontends.mcp",
    "pybox._frontends.api",
    "pybox._core.receipt",
    "pybox._core.receipt_summary",
    "pybox._core.repair",
    "pybox._core.limits",
    "pybox._core.posture",
    "pybox._core.seccomp",
    "dataclasses",
    "typing",
    "json",
    "pathlib",
    "http",
    "email",
    "ssl",
    "socket",
    "asyncio",
    "subprocess",
    "threading",
    "tomllib",
    "importlib.resources",
    "shutil",  # with bz2 and lzma; argparse imports it for the terminal width
)
# All that `pybox version` and `pybox --help` may import of pybox.
LIGHT_PYBOX = {
    "pybox",
    "pybox._version",
    "pybox._core",
    "pybox._core.errors",
    "pybox._core.lazy",
    "pybox._core.display",
    "pybox._main",
    "pybox._frontends",
    "pybox._frontends.cli",
    "pybox._frontends.cli._argparse_private",
    "pybox._frontends.cli._common",
    "pybox._frontends.cli._maintenance",
}

# Runs in a fresh interpreter: `pybox ARGV...` through the console script's
# entry point, then prints, as JSON on the real stdout, the modules imported and
# for each the modules whose code imported it (innermost first).
PROBE = """
import io, json, sys
argv = json.loads(sys.argv[1])
before = set(sys.modules)
sys.modules.pop("json")  # imported here only to read argv; the probe must not hide it
importers = {}

class Who:  # finds nothing: notes who asked, and lets the real finders find it
    @staticmethod
    def find_spec(name, path=None, target=None):
        chain, frame = [], sys._getframe(1)
        while frame is not None:
            module = frame.f_globals.get("__name__", "")
            if not module.startswith(("importlib", "_frozen_importlib", "__main__")):
                if not chain or chain[-1] != module:
                    chain.append(module)
            frame = frame.f_back
        importers.setdefault(name, chain)
        return None

sys.meta_path.insert(0, Who)
out, sys.stdout = sys.stdout, io.StringIO()
code = None
try:
    if argv is None:
        import pybox
    else:
        from pybox._main import main
        code = main(argv)
except SystemExit as exc:
    code = exc.code
finally:
    printed, sys.stdout = sys.stdout.getvalue(), out
    sys.meta_path.remove(Who)
import json
modules = sorted(set(sys.modules) - before)
print(json.dumps({
    "code": code,
    "printed": printed,
    "modules": modules,
    "importers": {m: importers.get(m, []) for m in modules},
}))
"""


def imported_by(argv: list[str] | None, tmp_path: Path, stdin: str = "") -> dict[str, object]:
    env = {
        **os.environ,
        "PYBOX_STATE_DIR": str(tmp_path / "state"),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
        "DOCKER_HOST": f"unix://{tmp_path / 'no-engine.sock'}",
        "PYBOX_PLATFORM": "linux",
    }
    env.pop("PYBOX_CONFIG", None)
    result = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(argv)],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=60,
    )
    found: dict[str, object] = json.loads(result.stdout.splitlines()[-1])
    found["stderr"] = result.stderr
    return found


def heavy_in(modules: object, heavy: tuple[str, ...] = HEAVY) -> list[str]:
    """The modules that are one of `heavy`, or inside one of those packages."""
    assert isinstance(modules, list)
    return [m for m in modules if any(m == h or m.startswith(h + ".") for h in heavy)]


def pybox_modules(modules: object) -> set[str]:
    assert isinstance(modules, list)
    return {m for m in modules if m.split(".")[0] == "pybox"}


def who_imported(found: dict[str, object], modules: object) -> str:
    """`modules`, one a line, each with the chain of modules that imported it."""
    importers = found.get("importers")
    assert isinstance(importers, dict) and isinstance(modules, (list, set, tuple))
    lines = []
    for module in sorted(modules):
        chain = [m for m in importers.get(module, []) if m.split(".")[0] == "pybox"]
        lines.append(f"  {module}" + (f"  <- {' <- '.join(chain[:4])}" if chain else ""))
    return "\n".join(lines)


WHAT_TO_DO = (
    "Every run of the command pays for each module it imports (docs/performance.md, "
    '"Command-line start-up" and "What a command imports"). Import what only some '
    "runs need inside the function that needs it (the way _exec.py opens the audit "
    "store after the run), or under `if TYPE_CHECKING:` when only an annotation needs "
    "it (typing's own TYPE_CHECKING is itself an import: use `TYPE_CHECKING = False`)."
)


@pytest.mark.parametrize(
    "argv", [["version"], ["--help"], [], ["version", "--help"], ["--version"]]
)
def test_version_and_help_import_no_command_implementation(argv: list[str], tmp_path: Path) -> None:
    found = imported_by(argv, tmp_path)
    assert found["code"] in (0, 2)  # `pybox` alone prints its help and exits 2
    heavy = heavy_in(found["modules"])
    assert heavy == [], (
        f"`pybox {' '.join(argv)}` imports what only other commands need:\n"
        f"{who_imported(found, heavy)}\n{WHAT_TO_DO}"
    )
    extra = pybox_modules(found["modules"]) - LIGHT_PYBOX
    assert not extra, (
        f"`pybox {' '.join(argv)}` imports pybox modules beyond LIGHT_PYBOX:\n"
        f"{who_imported(found, extra)}\n{WHAT_TO_DO} Add a module to LIGHT_PYBOX "
        "(tests/unit/test_cli_entry.py) only when every command needs it."
    )


def test_version_prints_the_version(tmp_path: Path) -> None:
    from pybox._version import __version__

    found = imported_by(["version"], tmp_path)
    assert found["code"] == 0
    assert found["printed"] == f"pybox {__version__}\n"


NOT_FOR_EXEC = (
    "pybox._frontends.mcp",
    "pybox._frontends.api",
    "pybox._frontends.cli._images",
    "pybox._frontends.cli._repair",
    "pybox._frontends.cli._verify",
    "pybox._frontends.cli._vm",
    "pybox._features.repair",
    "pybox._features.verify",
    "pybox._features.vm",
    "pybox._features.images.operations",
    "pybox._features.images.builds",
    "pybox._boxes.pool",
    "pybox._orchestration.doctor",
    "pybox._adapters.model_providers",
    "pybox._adapters.colima",
    "pybox._adapters.rootfs_unshare",
    "tarfile",
    "pybox._core.repair.report",
    "pybox._core.repair.prompt",
    "pybox._core.repair.proposal",
    "http",
    "email",
    "ssl",
    "asyncio",
    "urllib.request",
    "tomllib",
    "importlib.resources",
)


def test_exec_imports_neither_the_other_front_ends_nor_other_commands(tmp_path: Path) -> None:
    # No image and no engine: exec gets as far as its session and the run's modules.
    found = imported_by(["exec", "-"], tmp_path, stdin="print(6*7)\n")
    assert found["code"] in (2, 125), found["stderr"]
    modules = found["modules"]
    assert isinstance(modules, list)
    assert "pybox._orchestration.session" in modules
    wrong = [m for m in modules if m.startswith(NOT_FOR_EXEC)]
    assert wrong == [], (
        "`pybox exec` imports what only other commands or front ends need:\n"
        f"{who_imported(found, wrong)}\n{WHAT_TO_DO}"
    )


# What a cold `pybox exec` must not import before it reaches the engine: the audit
# store (sqlite3) is opened after the run, to record it; the rest serves other paths
# (egress `packages` boxes, Podman, lock-built images, returned files, macOS).
EXEC_DEFERRED = (
    "sqlite3",
    "pybox._features.store",
    "configparser",
    "pybox._adapters.egress_config",
    "pybox._engine.podman",
    "pybox._engine.specgen",
    "pybox._engine.podman_seal",
    "pybox._core.locks",
    "pybox._features.images.lock_plans",
    "pybox._features.images.records",
    "pybox._adapters.quarantine",
    "tempfile",
    "shutil",
    "bz2",
    "lzma",
    "subprocess",
    "shlex",
    "http",
    "email",
    "tomllib",
)
# The exec import budget: the most pybox modules a cold `pybox exec` imports before
# it reaches the engine. Measured with this test's probe (exec - with a recorded
# image, no engine): 87 on main before issue 19, 81 after it (147 modules in all,
# from 165); 84 once box.py and session.py were split to stay under ~400 lines
# (`_boxes.oneshot`, `_boxes.outcome`, `session.engine`: the same code in more
# files); 85 once program.py was too (`_boxes.handshake`); 86 once argparse's
# private API moved out of `cli/__init__.py`, `_common.py` and `_exec.py` into
# `cli._argparse_private` (issue 30: the same code in one more file). Raise it only
# for a module every run really needs, and add its line here.
EXEC_PYBOX_MODULES_AT_MOST = 86


def test_exec_imports_only_what_a_run_needs_before_the_engine(tmp_path: Path) -> None:
    from pybox._adapters.state import StateStore
    from pybox._core.images import ImageRecord

    StateStore(tmp_path / "state").record_image(
        ImageRecord(
            name="stdlib",
            image_id="sha256:" + "a" * 64,
            recipe_hash="sha256:" + "b" * 64,
            python_path="/usr/bin/python3",
            built_at="2026-01-01T00:00:00Z",
        )
    )
    found = imported_by(["exec", "-"], tmp_path, stdin="print(6*7)\n")
    assert found["code"] == 125, found["stderr"]
    assert "Cannot reach the container engine" in str(found["stderr"])  # as far as it goes
    modules = found["modules"]
    assert isinstance(modules, list)
    assert "pybox._boxes.box" in modules  # the run's own modules are there
    deferred = heavy_in(modules, EXEC_DEFERRED)
    assert deferred == [], (
        "A cold `pybox exec` imports, before it reaches the engine, what only some "
        f"runs need (EXEC_DEFERRED):\n{who_imported(found, deferred)}\n{WHAT_TO_DO}"
    )
    ours = pybox_modules(modules)
    assert len(ours) <= EXEC_PYBOX_MODULES_AT_MOST, (
        f"A cold `pybox exec` imports {len(ours)} pybox modules before it reaches the "
        f"engine; its budget is {EXEC_PYBOX_MODULES_AT_MOST} (EXEC_PYBOX_MODULES_AT_MOST "
        f"in tests/unit/test_cli_entry.py). {WHAT_TO_DO} Raise the budget only for a "
        "module every run needs, with a line saying which and why. What it imports, and "
        f"who imported each:\n{who_imported(found, ours)}"
    )


def test_an_import_over_the_budget_is_named_with_who_imported_it(tmp_path: Path) -> None:
    """The probe says who imported each module: the message points at the line to change."""
    found = imported_by(["exec", "-"], tmp_path, stdin="print(6*7)\n")
    shown = who_imported(found, ["pybox._frontends.cli._exec"])
    assert "pybox._frontends.cli._exec  <- pybox._frontends.cli" in shown, shown
