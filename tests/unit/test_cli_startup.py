"""The command line imports only what its command needs: the lazy commands.

`import pybox` resolves the API on first use, and a command's module is imported
only when that command is chosen (`CommandGroup`). What each command may import,
the exec import budget among them, is pinned beside the entry, in
tests/unit/test_cli_entry.py; start-up time is measured by bench/cli_startup.py
(docs/performance.md).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pybox._frontends import cli
from pybox._frontends.cli._argparse_private import help_lines, options_of, subcommand_actions
from pybox._frontends.cli._common import ArgumentParser
from pybox._main import MCP_COMMANDS
from tests.unit.test_cli_entry import heavy_in, imported_by, pybox_modules


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


def registered(group: cli.CommandGroup) -> dict[str, str | None]:
    """The commands a group's registrar really adds, with their help."""
    parser = ArgumentParser(prog="pybox")
    commands = parser.add_subparsers(parser_class=ArgumentParser)
    group.register(commands)
    return help_lines(commands)


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
    [commands] = subcommand_actions(parser)
    listed = [name for group in (*cli.COMMAND_GROUPS, MCP_COMMANDS) for name in group.commands]
    assert list(commands.choices) == listed
    for name, child in commands.choices.items():
        assert "--config" in options_of(child), name  # the global-option hint
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
