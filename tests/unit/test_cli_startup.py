"""The command line imports only what its command needs (not timed: which modules).

Start-up time is measured by bench/cli_startup.py (docs/performance.md); these
tests pin the import discipline that makes it small, in a fresh interpreter
each, so a module imported by an earlier test cannot hide one.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pybox._frontends import cli
from pybox._frontends.cli._common import ArgumentParser
from pybox._main import MCP_COMMANDS

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
    "pybox._frontends.cli._common",
    "pybox._frontends.cli._maintenance",
}

# Runs in a fresh interpreter: `pybox ARGV...` through the console script's
# entry point, then prints the modules imported, as JSON, on the real stdout.
PROBE = """
import io, json, sys
argv = json.loads(sys.argv[1])
before = set(sys.modules)
sys.modules.pop("json")  # imported here only to read argv; the probe must not hide it
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
import json
print(json.dumps({"code": code, "printed": printed, "modules": sorted(set(sys.modules) - before)}))
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


def test_import_pybox_imports_no_engine_and_no_orchestration(tmp_path: Path) -> None:
    found = imported_by(None, tmp_path)
    assert heavy_in(found["modules"]) == []
    assert pybox_modules(found["modules"]) == {
        "pybox",
        "pybox._version",
        "pybox._core",
        "pybox._core.errors",
        "pybox._core.lazy",
    }


@pytest.mark.parametrize("package", ["pybox", "pybox._core.repair"])
def test_every_lazily_exported_name_resolves(package: str) -> None:
    module = __import__(package, fromlist=["__all__"])
    for name in module.__all__:
        assert getattr(module, name) is not None, name
    assert set(module._LAZY) <= set(module.__all__)


def test_the_public_api_still_resolves_on_first_use() -> None:
    import pybox

    assert pybox.run_container.__module__ == "pybox._frontends.api"
    assert pybox.Receipt.__name__ == "Receipt"
    assert "Client" in dir(pybox)
    with pytest.raises(AttributeError, match="no_such_name"):
        _ = pybox.no_such_name


@pytest.mark.parametrize(
    "argv", [["version"], ["--help"], [], ["version", "--help"], ["--version"]]
)
def test_version_and_help_import_no_command_implementation(argv: list[str], tmp_path: Path) -> None:
    found = imported_by(argv, tmp_path)
    assert found["code"] in (0, 2)  # `pybox` alone prints its help and exits 2
    assert heavy_in(found["modules"]) == []
    assert pybox_modules(found["modules"]) <= LIGHT_PYBOX


def test_version_prints_the_version(tmp_path: Path) -> None:
    from pybox._version import __version__

    found = imported_by(["version"], tmp_path)
    assert found["code"] == 0
    assert found["printed"] == f"pybox {__version__}\n"


def test_exec_imports_neither_the_other_front_ends_nor_other_commands(tmp_path: Path) -> None:
    # No image and no engine: exec gets as far as its session and the run's modules.
    found = imported_by(["exec", "-"], tmp_path, stdin="print(6*7)\n")
    assert found["code"] in (2, 125), found["stderr"]
    modules = found["modules"]
    assert isinstance(modules, list)
    assert "pybox._orchestration.session" in modules
    not_for_exec = (
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
    assert [m for m in modules if m.startswith(not_for_exec)] == []


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
# The most pybox modules a cold `pybox exec` imports before it reaches the engine.
# Measured with this test's probe (exec - with a recorded image, no engine): 87 on
# main before issue 19, 81 after it (147 modules in all, from 165); 84 once box.py
# and session.py were split to stay under ~400 lines (`_boxes.oneshot`,
# `_boxes.outcome`, `session.engine`: the same code in more files); 85 once
# program.py was too (`_boxes.handshake`). Raise it only for a module the run
# really needs.
EXEC_PYBOX_MODULES_AT_MOST = 85


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
    assert heavy_in(modules, EXEC_DEFERRED) == []
    assert len(pybox_modules(modules)) <= EXEC_PYBOX_MODULES_AT_MOST, sorted(pybox_modules(modules))


def registered(group: cli.CommandGroup) -> dict[str, str | None]:
    """The commands a group's registrar really adds, with their help."""
    parser = ArgumentParser(prog="pybox")
    commands = parser.add_subparsers(parser_class=ArgumentParser)
    group.register(commands)
    return {action.dest: action.help for action in commands._choices_actions}


@pytest.mark.parametrize(
    "group",
    [*cli.COMMAND_GROUPS, MCP_COMMANDS],
    ids=lambda group: ",".join(group.commands),
)
def test_each_group_lists_exactly_the_commands_its_registrar_adds(
    group: cli.CommandGroup,
) -> None:
    """`pybox --help` is built from the lists alone: they must say what the code does."""
    assert registered(group) == group.commands


def test_a_filled_parser_has_every_command_and_its_options() -> None:
    parser = cli.build_parser([MCP_COMMANDS], fill=True)
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    listed = [name for group in (*cli.COMMAND_GROUPS, MCP_COMMANDS) for name in group.commands]
    assert list(commands.choices) == listed
    for name, child in commands.choices.items():
        assert "--config" in child._option_string_actions, name  # the global-option hint
        assert child.epilog, name  # the exit codes
        child.format_help()


def test_a_command_is_filled_in_only_when_chosen() -> None:
    loaded: list[str] = []

    def register(commands: cli.Commands) -> None:
        loaded.append("late")
        commands.add_parser("late", help="a late command").set_defaults(handler=lambda a: 7)

    group = cli.CommandGroup(register, {"late": "a late command"})
    parser = cli.build_parser([group])
    assert loaded == []
    cli.parse(parser, ["version"])
    assert loaded == []
    args = cli.parse(parser, ["late"])
    assert loaded == ["late"]
    assert args.handler(args) == 7


def test_a_group_that_does_not_add_what_it_lists_is_a_bug() -> None:
    group = cli.CommandGroup(lambda commands: None, {"ghost": "never added"})
    parser = cli.build_parser([group])
    with pytest.raises(RuntimeError, match="ghost"):
        cli.parse(parser, ["ghost"])


@pytest.mark.parametrize("columns", [None, "60", "123", "0", "-5", "wide"])
def test_the_help_width_is_the_one_shutil_would_give(
    columns: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shutil

    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    assert cli.terminal_columns() == shutil.get_terminal_size().columns
