"""The pool service's wire and the client's reading of a command line (pure, no engine)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from pybox._adapters.config import config_file_path
from pybox._adapters.state import default_state_dir
from pybox._core.locations import config_path, state_dir_path
from pybox._core.poolwire import (
    MAX_HEADER_BYTES,
    PREFIX,
    WIRE_VERSION,
    ExecRequest,
    WireError,
    decode_header,
    dumps,
    encode_frame,
    frame_lengths,
    identity_of,
    loads,
)
from pybox._frontends import poolclient
from pybox._frontends.cli import _execoptions
from pybox._frontends.cli._argparse_private import actions_of
from pybox._frontends.cli._common import ArgumentParser
from pybox._frontends.poolclient import COLD_OPTIONS, FILE_OPTIONS, _plan, exec_option


def _exec_header(**changes: object) -> dict[str, object]:
    header: dict[str, object] = {
        "t": "exec",
        "wire": WIRE_VERSION,
        "argv": ["exec", "job.py"],
        "cwd": "/home/u",
        "files": {"job.py": [0, 9]},
        "stdin": None,
        "identity": {"HOME": "/home/u"},
        "tty": [False, True],
        "term": "xterm",
    }
    header.update(changes)
    return header


def test_a_frame_round_trips() -> None:
    frame = encode_frame({"t": "out", "fd": 1}, b"\x00\xff bytes")
    header_len, body_len = frame_lengths(frame[: PREFIX.size], 1 << 20)
    header = decode_header(frame[PREFIX.size : PREFIX.size + header_len])
    assert header == {"t": "out", "fd": 1}
    assert frame[PREFIX.size + header_len :] == b"\x00\xff bytes" and body_len == 8


@pytest.mark.parametrize(
    ("prefix", "match"),
    [
        (PREFIX.pack(MAX_HEADER_BYTES + 1, 0), "header of"),
        (PREFIX.pack(0, 0), "header of 0"),
        (PREFIX.pack(10, 101), "body of 101 bytes; the limit is 100"),
        (b"\x00\x00", "prefix is 8 bytes"),
    ],
)
def test_frame_lengths_are_bounded_before_anything_is_read(prefix: bytes, match: str) -> None:
    with pytest.raises(WireError, match=match):
        frame_lengths(prefix, 100)


@pytest.mark.parametrize("raw", [b"\xff\xfe", b"[1, 2]", b'{"t": 1}', b"not json"])
def test_a_header_is_a_json_object_with_a_kind(raw: bytes) -> None:
    with pytest.raises(WireError):
        decode_header(raw)


def test_an_exec_request_gives_its_files_from_the_body() -> None:
    request = ExecRequest(_exec_header(stdin=[9, 3]), b"print(42)abc")
    assert request.files == {"job.py": b"print(42)"} and request.stdin == b"abc"
    assert request.argv == ["exec", "job.py"] and request.cwd == "/home/u"
    assert (request.tty_out, request.tty_err, request.term) == (False, True, "xterm")


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"wire": 2}, "Wire version 2"),
        ({"extra": 1}, "Unknown fields in an exec frame: extra"),
        ({"argv": []}, "argv must be a list"),
        ({"argv": "exec job.py"}, "argv must be a list"),
        ({"argv": ["exec", 3]}, "each argv item"),
        ({"argv": ["exec", "a\0b"]}, "each argv item"),
        ({"cwd": "relative"}, "cwd must be an absolute path"),
        ({"tty": [True]}, "tty must be"),
        ({"tty": [1, 0]}, r"tty\[0\] must be true or false"),
        ({"files": {"job.py": [0, 100]}}, "outside the body"),
        ({"files": {"job.py": [-1, 2]}}, "outside the body"),
        ({"files": {"job.py": [True, 2]}}, r"must be \[offset, length\]"),
        ({"files": ["job.py"]}, "files must be an object"),
        ({"stdin": [0]}, r"stdin must be \[offset, length\]"),
        ({"identity": {"HOME": 1}}, "an identity value"),
        ({"term": "x" * 70000}, "term must be a string"),
    ],
)
def test_an_exec_request_is_checked_field_by_field(changes: dict[str, object], match: str) -> None:
    with pytest.raises(WireError, match=match):
        ExecRequest(_exec_header(**changes), b"print(42)")


def test_every_field_a_client_sends_is_known() -> None:
    """What the client sends is exactly what the service accepts."""
    header = json.loads(json.dumps(_exec_header()))
    ExecRequest(header, b"print(42)")


def test_the_identity_is_what_decides_a_run() -> None:
    env = {"PYBOX_STATE_DIR": "/s", "DOCKER_HOST": "unix:///x", "HOME": "/h", "PATH": "/bin"}
    env |= {"PYBOX_POOL": "off", "PYBOX_DEBUG": "1", "TERM": "xterm"}
    assert identity_of(env) == {"PYBOX_STATE_DIR": "/s", "DOCKER_HOST": "unix:///x", "HOME": "/h"}


@pytest.mark.parametrize(
    "env",
    [
        {},
        {"PYBOX_STATE_DIR": "/srv/pybox"},
        {"XDG_STATE_HOME": "/x/state", "XDG_CONFIG_HOME": "/x/config"},
        {"PYBOX_CONFIG": "/etc/pybox.toml"},
    ],
)
def test_the_client_finds_state_and_config_where_the_adapters_do(env: dict[str, str]) -> None:
    home = str(Path.home())
    assert Path(state_dir_path(env, home)) == default_state_dir(env)
    assert (Path(config_path(env, home, None)[0]), config_path(env, home, None)[1]) == (
        config_file_path(env, None)
    )
    assert config_path(env, home, "given.toml") == ("given.toml", True)


def test_the_client_reads_what_a_plain_exec_names() -> None:
    plan = _plan(["exec", "--input", "a.csv", "--input=b.csv", "--timeout", "5", "job.py"])
    assert plan is not None
    assert (plan.program, plan.files, plan.stdin_file) == ("job.py", ["a.csv", "b.csv"], None)
    plan = _plan(["--config", "c.toml", "exec", "-q", "--stdin", "in.txt", "-", "--", "x", "-y"])
    assert plan is not None
    assert (plan.config, plan.program, plan.stdin_file) == ("c.toml", "-", "in.txt")
    plan = _plan(["exec", "--json", "job.py", "--", "--output", "d"])
    assert plan is not None and plan.program == "job.py"  # after --: the program's


@pytest.mark.parametrize(
    "argv",
    [
        ["exec", "--output", "d", "job.py"],  # files written in the client's process
        ["exec", "--output=d", "job.py"],
        ["exec", "--out", "d", "job.py"],  # an abbreviation of --output
        ["exec", "--help"],
        ["exec", "-h"],
        ["exec"],  # no program: the parser says so
        ["exec", "a.py", "b.py"],  # a stray word: the parser says so
        ["exec", "--timeout"],  # a value missing
        ["sandbox", "exec", "sb", "job.py"],  # not `pybox exec`
        ["--version", "exec", "job.py"],
    ],
)
def test_anything_else_runs_cold(argv: list[str]) -> None:
    assert _plan(argv) is None


def test_the_client_takes_an_abbreviation_as_argparse_does() -> None:
    plan = _plan(["exec", "--inp", "a.csv", "--js", "--tim", "5", "job.py"])
    assert plan is not None and (plan.program, plan.files) == ("job.py", ["a.csv"])
    assert exec_option("--output-l") == "--output-limit"
    assert exec_option("--out") is None  # --output or --output-limit: argparse refuses it
    assert exec_option("--nope") is None and exec_option("-x") is None
    assert _plan(["exec", "--json=yes", "job.py"]) is None  # a value for a flag: refused


# -- the client's exec grammar is written from exec's parser (cli._execoptions) --------

REGENERATE = f"Run `{_execoptions.COMMAND}` and commit src/pybox/_frontends/poolclient.py"


def test_the_clients_table_is_written_from_exec_parser() -> None:
    """The pool client's table of options is written from `pybox exec`'s real parser."""
    parser = _execoptions.exec_parser()
    valueless, one_value = _execoptions.grammar(parser)
    stale = sorted(
        (set(valueless) ^ poolclient.VALUELESS) | (set(one_value) ^ poolclient.ONE_VALUE)
    )
    assert stale == [], (
        f"The pool client's table of exec's options is stale for {stale}: the client would "
        f"misread a command line with them and run it cold. {REGENERATE}."
    )
    written = _execoptions.written(Path(poolclient.__file__).read_text())
    assert written == _execoptions.render(parser), f"The client's table was edited. {REGENERATE}."


def words_for(action: argparse.Action, option: str) -> list[str]:
    """`option` as a command line gives it: alone, or with a value it accepts."""
    if action.nargs == 0:
        return [option]
    return [option, str(next(iter(action.choices))) if action.choices else "v.txt"]


def misread_options(parser: argparse.ArgumentParser) -> list[str]:
    """Each option of `parser` the pool client does not read as the parser does: for
    every option, a command line with it (and a value if it takes one) before the
    program, parsed by both."""
    wrong = []
    for action in actions_of(parser):
        for option in action.option_strings:
            argv = ["exec", *words_for(action, option), "job.py"]
            plan = _plan(argv)
            if option in COLD_OPTIONS:
                if plan is not None:
                    wrong.append(f"{option}: served by the pool, but it runs cold (COLD_OPTIONS)")
                continue
            if plan is None or plan.program != "job.py":
                taken = "takes no value" if action.nargs == 0 else "takes one value"
                wrong.append(
                    f"{option} {taken} in exec's parser; the pool client reads "
                    f"{' '.join(argv[1:])} as program {None if plan is None else plan.program}"
                )
            elif option in FILE_OPTIONS and "v.txt" not in [*plan.files, plan.stdin_file]:
                wrong.append(f"{option}: its file is not sent to the service")
    return wrong


def test_the_client_reads_every_option_of_exec_as_its_parser_does() -> None:
    parser = _execoptions.exec_parser()
    for action in actions_of(parser):  # the parser agrees on what it parsed
        for option in action.option_strings:
            if option not in COLD_OPTIONS:
                try:
                    parsed = parser.parse_args([*words_for(action, option), "job.py"])
                except SystemExit:  # a global option after the command: refused, said
                    assert option in ("--config", "--engine"), option
                    continue
                assert parsed.program == "job.py", option
    wrong = misread_options(parser)
    assert wrong == [], (
        f"The pool client misreads options of `pybox exec`: {wrong}. A run with one would "
        f"silently lose the pool (or be refused by it). {REGENERATE}."
    )


def test_a_new_flag_on_exec_without_regenerating_is_caught() -> None:
    """What the two tests above catch: a value-less flag added to exec alone."""
    parser = _execoptions.exec_parser()
    parser.add_argument("--planted-flag", action="store_true")
    parser.add_argument("--planted-value", metavar="N")
    assert misread_options(parser) == [
        "--planted-flag takes no value in exec's parser; the pool client reads "
        "--planted-flag job.py as program None",
        "--planted-value takes one value in exec's parser; the pool client reads "
        "--planted-value v.txt job.py as program None",
    ]
    valueless, one_value = _execoptions.grammar(parser)
    assert "--planted-flag" in valueless and "--planted-value" in one_value
    assert "--planted-flag" in _execoptions.render(parser)


@pytest.mark.parametrize("nargs", ["?", "*", "+", 2])
def test_an_option_the_client_cannot_read_word_by_word_is_refused_when_added(
    nargs: str | int,
) -> None:
    parser = ArgumentParser(prog="pybox exec")
    parser.add_argument("program")
    parser.add_argument("--maybe", nargs=nargs)
    with pytest.raises(ValueError, match="--maybe takes nargs"):
        _execoptions.grammar(parser)


def test_a_second_positional_is_refused_when_added() -> None:
    parser = ArgumentParser(prog="pybox exec")
    parser.add_argument("program")
    parser.add_argument("extra")
    with pytest.raises(ValueError, match=r"positionals \['program', 'extra'\]"):
        _execoptions.grammar(parser)


def test_every_option_of_exec_that_names_a_file_is_sent_or_runs_cold() -> None:
    """A new option naming a file (FILE, DIR) must be sent by the client or run cold:
    the service reads no file of its own."""
    named = {
        option
        for action in actions_of(_execoptions.exec_parser())
        if action.metavar in ("FILE", "DIR", "PATH")
        for option in action.option_strings
    }
    assert named == FILE_OPTIONS | {"--output"}, (
        f"exec's options naming a file are {sorted(named)}: add a new one to the pool "
        "client's FILE_OPTIONS (and send it in `poolclient._plan`) or COLD_OPTIONS."
    )
    assert poolclient.VALUELESS | poolclient.ONE_VALUE >= COLD_OPTIONS


@pytest.mark.parametrize(
    "value",
    [
        {"t": "exec", "argv": ["a", "é", '\x00\n"\\', "\ud800"], "n": [0, -1, 10**20]},
        {"nested": {"x": [True, False, None, 1.5]}, "empty": {}, "list": []},
        "just a string",
    ],
)
def test_the_wire_json_is_jsons(value: object) -> None:
    text = dumps(value)
    assert text == json.dumps(value, separators=(",", ":"))
    assert loads(text) == json.loads(text)


@pytest.mark.parametrize(
    "text", ["NaN", "[Infinity]", '{"a": 1} x', " {}", "", "{'a': 1}", '{"a": 1,}', "[" * 100000]
)
def test_the_wire_json_refuses_what_is_not_json(text: str) -> None:
    with pytest.raises((ValueError, RecursionError)):
        loads(text)
    with pytest.raises(WireError):
        decode_header(text.encode())


def test_the_wire_json_writes_no_nan() -> None:
    with pytest.raises(ValueError):
        dumps({"x": float("nan")})


# -- whom the client trusts (pure decisions; the I/O is tested in test_pool_service) ----


def test_the_client_uses_only_its_own_uids_private_folder() -> None:
    from pybox._core.poolwire import folder_refusal

    folder = 0o040000
    assert folder_refusal("/s/pool", 1000, folder | 0o700, 1000) is None
    assert folder_refusal("/s/pool", 1000, folder | 0o755, 1000) is None
    assert "belongs to uid 0, not to you (uid 1000)" in str(
        folder_refusal("/s/pool", 0, folder | 0o700, 1000)
    )
    for mode in (0o770, 0o730, 0o703, 0o1777):
        assert "can be written by other users" in str(
            folder_refusal("/s/pool", 1000, folder | mode, 1000)
        )
    link = 0o120000
    assert "is not a folder" in str(folder_refusal("/s/pool", 1000, link | 0o777, 1000))


def test_the_client_sends_code_only_to_a_listener_of_its_own_uid() -> None:
    from pybox._core.poolwire import listener_refusal

    assert listener_refusal("/s/pool/cli.sock", 1000, 1000) is None
    assert "runs as uid 0, not as you (uid 1000)" in str(
        listener_refusal("/s/pool/cli.sock", 0, 1000)
    )
    assert "runs as uid 1001" in str(listener_refusal("/s/pool/cli.sock", 1001, 1000))
    assert "no SO_PEERCRED" in str(listener_refusal("/s/pool/cli.sock", None, 1000))
