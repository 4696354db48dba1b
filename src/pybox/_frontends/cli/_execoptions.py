"""`pybox exec`'s options, written out for the pool client from exec's own parser.

The pool client (`pybox._frontends.poolclient`) reads exec's command line
before anything else is imported, without argparse: which words are options,
which of those take a value, so which word is the program and which are files
to send. A second grammar kept by hand would drift: a new value-less flag on
`exec` missing there would be read as taking the program for its value, and
every run with it would silently lose the pool. So the client's table of
exec's options (between its BEGIN and END lines) is written by `render()`
from the parser the command line really uses; tests/unit/test_pool_wire.py
fails, naming the option, when it is stale. Rewrite it with

    python -m pybox._frontends.cli._execoptions

The table is in the client's own file, not a module of its own: every `pybox
exec`, cold or through the pool, imports the client first, and one more
module costs each about 0.1 ms and one more in exec's import budget
(tests/unit/test_cli_entry.py). This module is never imported when a command
runs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pybox._frontends.cli._argparse_private import actions_of

CLIENT = Path(__file__).resolve().parents[1] / "poolclient.py"
COMMAND = "python -m pybox._frontends.cli._execoptions"
BEGIN = "# BEGIN exec's options (generated from its parser: do not edit).\n"
END = "# END exec's options.\n"


def exec_parser() -> argparse.ArgumentParser:
    """The parser of `pybox exec`, as `pybox` builds it (global-option hints included)."""
    from pybox._frontends.cli import build_parser, parse

    parser = parse(build_parser(), ["exec", "job.py"]).pybox_parser
    assert isinstance(parser, argparse.ArgumentParser)
    return parser


def grammar(parser: argparse.ArgumentParser) -> tuple[list[str], list[str]]:
    """(the options that take no value, those that take one), each sorted.

    Anything the client could not read word by word is refused here, so that
    it is decided when the option is added, not found later as a lost pool.
    """
    valueless: list[str] = []
    one_value: list[str] = []
    positionals = []
    for action in actions_of(parser):
        if not action.option_strings:
            positionals.append(action.dest)
        elif action.nargs == 0:
            valueless.extend(action.option_strings)
        elif action.nargs is None:
            one_value.extend(action.option_strings)
        else:
            raise ValueError(
                f"`pybox exec` {'/'.join(action.option_strings)} takes nargs={action.nargs!r}: "
                "the pool client reads an option as taking no value or exactly one. Give it "
                "one, or teach `poolclient._plan` to read it and this generator to say so."
            )
    if positionals != ["program"]:
        raise ValueError(
            f"`pybox exec` takes the positionals {positionals}: the pool client reads one, "
            "the program (its arguments come after --). Teach `poolclient._plan` first."
        )
    return sorted(valueless), sorted(one_value)


def _frozenset(name: str, comment: str, items: list[str]) -> str:
    lines = "".join(f'        "{item}",\n' for item in items)
    return f"# {comment}\n{name} = frozenset(\n    {{\n{lines}    }}\n)\n"


def render(parser: argparse.ArgumentParser | None = None) -> str:
    """The client's table for `parser` (default: exec's), BEGIN and END lines included."""
    valueless, one_value = grammar(exec_parser() if parser is None else parser)
    return (
        BEGIN
        + _frozenset("VALUELESS", "Options that take no value.", valueless)
        + _frozenset(
            "ONE_VALUE", 'Options that take one value: the next word, or after "=".', one_value
        )
        + END
    )


def written(source: str) -> str:
    """The table as `source` (the client's text) has it, BEGIN and END lines included."""
    start = source.index(BEGIN)
    return source[start : source.index(END, start) + len(END)]


def main() -> int:
    source = CLIENT.read_text()
    CLIENT.write_text(source.replace(written(source), render()))
    print(f"wrote exec's options in {CLIENT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
