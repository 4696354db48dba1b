"""What pybox relies on of argparse's private API (`cli._argparse_private`), checked
against the running Python.

Each test states one behaviour the lazy commands, the exec parser or the help
rely on. When one fails after a Python upgrade, its message names what changed
in argparse and what in `src/pybox/_frontends/cli/_argparse_private.py` must
follow it; nothing else in pybox touches argparse's private names.
"""

from __future__ import annotations

import argparse
import ast
from collections.abc import Sequence
from pathlib import Path

import pytest

from pybox._frontends.cli import _argparse_private as private

SRC = Path(private.__file__).parents[2]
OWNER = Path(private.__file__)


def changed(what: str, used_by: str) -> str:
    return (
        f"argparse changed: {what}. pybox relies on it for {used_by}; adapt "
        "src/pybox/_frontends/cli/_argparse_private.py to this Python's argparse "
        "(and the list of what is relied on in its docstring)."
    )


def test_add_subparsers_gives_the_private_class_with_its_fields() -> None:
    action = argparse.ArgumentParser(prog="top").add_subparsers()
    assert isinstance(action, argparse._SubParsersAction), changed(
        f"add_subparsers() returns {type(action).__name__}, not _SubParsersAction",
        "the lazy commands (Subcommands subclasses it)",
    )
    missing = [
        name
        for name in ("_name_parser_map", "_choices_actions", "_prog_prefix", "_parser_class")
        if not hasattr(action, name)
    ]
    assert missing == [], changed(f"_SubParsersAction has no {missing}", "Subcommands")
    assert action.choices is action._name_parser_map, changed(
        "a subparsers action's `choices` is no longer its `_name_parser_map`",
        "naming a command before its parser exists (Subcommands.name_command)",
    )
    assert action._prog_prefix == "top" and action._parser_class is argparse.ArgumentParser


def test_a_named_command_is_a_choice_with_its_help_line_until_its_parser_is_put() -> None:
    parser = argparse.ArgumentParser(prog="top")
    commands = parser.add_subparsers(dest="command", action=private.Subcommands)
    assert isinstance(commands, private.Subcommands)
    stand_in = argparse.ArgumentParser(add_help=False)
    commands.name_command("late", "a late command", stand_in)
    assert "a late command" in parser.format_help(), changed(
        "a _ChoicesPseudoAction(name, aliases, help) in _choices_actions is not shown in "
        "the parent's --help",
        "the help lines of commands not imported yet (Subcommands.name_command)",
    )
    assert parser.parse_args(["late"]).command == "late"
    with pytest.raises(argparse.ArgumentError, match="conflicting subparser: late"):
        commands.name_command("late", "again", stand_in)
    real = commands.put_parser("late", help="ignored: the line is there", description="d")
    assert real.prog == "top late", changed("_prog_prefix is not the parent's prog", "put_parser")
    assert commands.parsers()["late"] is real
    assert commands.help_lines() == {"late": "a late command"}
    assert private.help_lines(commands) == {"late": "a late command"}


def test_choosing_a_command_calls_the_action_with_its_name_then_its_parser() -> None:
    seen: list[str] = []

    class Noting(private.Subcommands):
        def choosing(self, name: str) -> None:
            seen.append(name)
            child = self.put_parser(name)  # filled in only now
            child.add_argument("--flag", action="store_true")

    parser = argparse.ArgumentParser(prog="top")
    commands = parser.add_subparsers(dest="command", action=Noting)
    assert isinstance(commands, Noting)
    commands.name_command("late", "a late command", argparse.ArgumentParser(add_help=False))
    args = parser.parse_args(["late", "--flag"])
    assert seen == ["late"], changed(
        "the subparsers action is not called with the chosen command's name as values[0]",
        "filling a command in when it is chosen (Subcommands.choosing)",
    )
    assert args.flag is True, changed(
        "the chosen command's parser is looked up in _name_parser_map after the action is called",
        "filling a command in when it is chosen (Subcommands.choosing)",
    )


def test_a_chosen_commands_parse_known_args_is_the_one_its_instance_has() -> None:
    def split(
        parse: private.ParseKnown,
        args: Sequence[str] | None,
        namespace: argparse.Namespace | None,
    ) -> tuple[argparse.Namespace, list[str]]:
        given = list(args or [])
        at = given.index("--") if "--" in given else len(given)
        parsed, extras = parse(given[:at], namespace)
        parsed.rest = given[at + 1 :]
        return parsed, extras

    parser = argparse.ArgumentParser(prog="top")
    child = parser.add_subparsers(dest="command").add_parser("run")
    child.add_argument("program")
    private.intercept_parse(child, split)
    args, extras = parser.parse_known_args(["run", "job.py", "--", "-x", "y"])
    assert (args.program, args.rest, extras) == ("job.py", ["-x", "y"], []), changed(
        "the subparsers action no longer calls the chosen parser's own parse_known_args",
        "`pybox exec job.py -- ARG...` (intercept_parse: what follows -- is the program's)",
    )
    assert child.parse_known_args(["a.py", "--", "b"])[0].rest == ["b"]


def test_a_parsers_actions_and_option_strings() -> None:
    parser = argparse.ArgumentParser(prog="top")
    quiet = parser.add_argument("--quiet", "-q", action="store_true")
    program = parser.add_argument("program")
    parser.add_subparsers()
    assert private.options_of(parser)["-q"] is quiet, changed(
        "_option_string_actions does not map each option string to its action",
        "the exec grammar of the pool client, the hint for a misplaced global option, "
        "and `did you mean` (options_of)",
    )
    assert quiet in private.actions_of(parser) and program in private.actions_of(parser), changed(
        "_actions does not list every action", "actions_of"
    )
    assert [type(a) for a in private.subcommand_actions(parser)] == [argparse._SubParsersAction]


def test_the_help_formatter_shows_defaults_through_get_help_string() -> None:
    parser = argparse.ArgumentParser(prog="top", formatter_class=private.HelpFormatter)
    parser.add_argument("--image", default="stdlib", help="a recorded image")
    parser.add_argument("--json", action="store_true", help="print JSON")
    shown = " ".join(parser.format_help().split())
    assert "a recorded image (default: stdlib)" in shown, changed(
        "HelpFormatter._get_help_string is no longer what --help shows for an option",
        "the defaults in every command's --help (HelpFormatter)",
    )
    assert "print JSON (default" not in shown


def test_nothing_else_in_pybox_touches_argparses_private_names() -> None:
    """The one place: any other `argparse._x` or `._actions`-like use is named here."""
    private_attrs = {
        "_actions",
        "_option_string_actions",
        "_name_parser_map",
        "_choices_actions",
        "_prog_prefix",
        "_parser_class",
        "_ChoicesPseudoAction",
        "_get_help_string",
    }
    found = []
    for path in sorted(SRC.rglob("*.py")):
        if path == OWNER or "verify/cases" in path.as_posix():
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Attribute) and (
                node.attr in private_attrs
                or (
                    isinstance(node.value, ast.Name)
                    and node.value.id == "argparse"
                    and node.attr.startswith("_")
                )
            ):
                found.append(f"{path.relative_to(SRC)}:{node.lineno} .{node.attr}")
            elif isinstance(node, ast.FunctionDef) and node.name in private_attrs:
                found.append(f"{path.relative_to(SRC)}:{node.lineno} def {node.name}")
            elif isinstance(node, ast.Assign) and any(
                isinstance(target, ast.Attribute) and target.attr == "parse_known_args"
                for target in node.targets
            ):  # a parser's parsing replaced: rests on how argparse calls it
                found.append(f"{path.relative_to(SRC)}:{node.lineno} .parse_known_args =")
    assert found == [], (
        "argparse's private API is used outside src/pybox/_frontends/cli/_argparse_private.py: "
        f"{found}. Add what you need there (with a test in this file), and call it."
    )
