"""Every use pybox makes of argparse's private API, in one place, and why.

argparse has no public way to name a command before its parser exists, to
list a parser's options, or to change how an option's help is written; pybox
needs all three (commands are imported only when chosen, so that `pybox
version` and `pybox exec` start fast: docs/performance.md, "Command-line
start-up"). Python does not promise these names, so nothing else in pybox
touches them: the rest of the command line (and its tests) call the functions
and the class here.

What is relied on, each checked against the running Python by
tests/unit/test_argparse_private.py (when it fails after a Python upgrade, its
message names what changed and what here must follow it):

- `add_subparsers()` returns an `argparse._SubParsersAction`. Its `choices` is
  its `_name_parser_map` (name -> parser, one dict); its help lines are
  `_choices_actions`, each a `_ChoicesPseudoAction(name, aliases, help)`;
  `add_parser` makes `_parser_class(**kwargs)`, with prog
  `f"{_prog_prefix} {name}"` (`Subcommands`).
- Parsing calls the action with `values[0]`, the chosen command's name, and
  the action calls that command's parser's `parse_known_args(rest, None)`: a
  command is filled in there (`Subcommands.choosing`), and `pybox exec` takes
  what follows `--` there (`intercept_parse`).
- `parser._actions` lists a parser's actions, and
  `parser._option_string_actions` maps each option string to its action
  (`actions_of`, `options_of`).
- `HelpFormatter._get_help_string(action)` is the help text shown for an
  action, as `argparse.ArgumentDefaultsHelpFormatter` uses it
  (`HelpFormatter` here).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence

# Not typing's TYPE_CHECKING: importing typing costs every command.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    _Base = argparse._SubParsersAction[argparse.ArgumentParser]
    # What `add_argument_group()` returns (annotations only).
    ArgumentGroup = argparse._ArgumentGroup
    # Annotations only (a subscripted Callable costs every command at import).
    ParseKnown = Callable[
        [Sequence[str] | None, argparse.Namespace | None], tuple[argparse.Namespace, list[str]]
    ]
    # (argparse's own parse_known_args, the args, the namespace) -> what it returns
    Interceptor = Callable[
        [ParseKnown, Sequence[str] | None, argparse.Namespace | None],
        tuple[argparse.Namespace, list[str]],
    ]
else:
    _Base = argparse._SubParsersAction


def actions_of(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """Every action of `parser`, in the order added (positionals and options)."""
    return list(parser._actions)


def options_of(parser: argparse.ArgumentParser) -> Mapping[str, argparse.Action]:
    """`parser`'s option strings (`-q`, `--quiet`), each with its action."""
    return parser._option_string_actions


def subcommand_actions(parser: argparse.ArgumentParser) -> list[_Base]:
    """`parser`'s subcommand actions (what `add_subparsers()` returned)."""
    return [action for action in parser._actions if isinstance(action, argparse._SubParsersAction)]


def intercept_parse(parser: argparse.ArgumentParser, interceptor: Interceptor) -> None:
    """`interceptor(parse, args, namespace)` parses for `parser` from now on, whether
    it is parsed itself or chosen as a command of another parser."""
    parse: ParseKnown = parser.parse_known_args  # type: ignore[assignment]

    def parse_known_args(
        args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        return interceptor(parse, args, namespace)

    parser.parse_known_args = parse_known_args  # type: ignore[method-assign,assignment]


class Subcommands(_Base):
    """`add_subparsers(action=...)` for commands named before their parsers exist.

    The primitives a lazy command table needs, and nothing more:
    `name_command` lists a command (its choice and help line) with a stand-in
    parser, `put_parser` makes its real parser in the stand-in's place, and
    `choosing(name)` runs when the command is chosen, before its parser parses.
    """

    def name_command(self, name: str, help_text: str, stand_in: argparse.ArgumentParser) -> None:
        if name in self._name_parser_map:
            raise argparse.ArgumentError(self, f"conflicting subparser: {name}")
        self._choices_actions.append(self._ChoicesPseudoAction(name, (), help_text))
        self._name_parser_map[name] = stand_in

    def put_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        """A new parser for the listed command `name` (its help line is kept)."""
        kwargs.pop("help", None)
        kwargs.setdefault("prog", f"{self._prog_prefix} {name}")
        parser: argparse.ArgumentParser = self._parser_class(**kwargs)
        self._name_parser_map[name] = parser
        return parser

    def parsers(self) -> dict[str, argparse.ArgumentParser]:
        """Each command's parser (or its stand-in), by name: the live table."""
        return self._name_parser_map

    def help_lines(self) -> dict[str, str | None]:
        """Each listed command's help line, by name, in the order shown."""
        return {action.dest: action.help for action in self._choices_actions}

    def choosing(self, name: str) -> None:
        """Called with the chosen command's name before its parser parses."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        self.choosing(values[0])
        super().__call__(parser, namespace, values, option_string)


def help_lines(action: object) -> dict[str, str | None]:
    """The help line of each command of any subcommand action (ours or argparse's)."""
    return {choice.dest: choice.help for choice in action._choices_actions}  # type: ignore[attr-defined]


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the exit-code epilog as written and shows each option's default.

    Unlike ArgumentDefaultsHelpFormatter it says nothing for options without a
    default (None, False) and leaves help that already names its default alone.
    """

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (
            not action.option_strings
            or default in (None, False, argparse.SUPPRESS)
            or "default" in text
        ):
            return action.help
        return f"{text} (default: %(default)s)"
