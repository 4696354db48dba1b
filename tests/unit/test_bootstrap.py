"""The in-box bootstrap's pure helpers: its JSON writer and its header reader."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from pybox._core import wire
from pybox._inbox import bootstrap_source

NAMESPACE: dict[str, Any] = {"__name__": "pybox_bootstrap_under_test"}
exec(compile(bootstrap_source(), "bootstrap.py", "exec"), NAMESPACE)
dumps: Callable[[object], str] = NAMESPACE["dumps"]
parse_header: Callable[[bytes], dict[str, Any]] = NAMESPACE["parse_header"]


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        False,
        0,
        -9,
        2**40,
        1.5,
        "",
        'quote " and backslash \\',
        "tab\tnewline\ncr\rbell\x07del\x7f",
        "unicode é 中文 🐍",
        "lone surrogate \udcff from a non-UTF-8 file name",
        [],
        {"path": "a/b", "reason": "symbolic link", "nested": [1, {"x": None}]},
    ],
)
def test_dumps_is_json(value: object) -> None:
    text = dumps(value)
    assert text.isascii()
    assert json.loads(text) == value


def test_dumps_refuses_unknown_types() -> None:
    with pytest.raises(TypeError):
        dumps(object())


def test_header_round_trip() -> None:
    chunks = list(
        wire.encode_payload(
            argv=["/usr/bin/python3", "job.py"],
            code_name="job.py",
            code=b"print(1)",
            inputs=(wire.PayloadFile("sales data.csv", b"abc"), wire.PayloadFile("é", b"")),
            backstop_s=32.0,
            collect_outputs=True,
            max_files=7,
            max_file_bytes=1024,
            args=("a b", "tab\there", "new\nline", ""),
            env=(("GREETING", "hi\tthere\n"), ("EMPTY", "")),
            stdin=b"line 1\n",
        )
    )
    first = chunks[0]
    assert first[:4] == wire.MAGIC
    size = int.from_bytes(first[4:8], "big")
    header = parse_header(first[8 : 8 + size])
    assert header == {
        "version": wire.VERSION,
        "argv": ["/usr/bin/python3", "job.py"],
        "code_name": "job.py",
        "code_size": 8,
        "inputs": [{"name": "sales data.csv", "size": 3}, {"name": "é", "size": 0}],
        "backstop_s": 32.0,
        "collect_outputs": True,
        "max_files": 7,
        "max_file_bytes": 1024,
        "args": ["a b", "tab\there", "new\nline", ""],
        "env": [("GREETING", "hi\tthere\n"), ("EMPTY", "")],
        "stdin_size": 7,
    }
    assert chunks[1:] == [b"print(1)", b"abc", b"", b"line 1\n"]


def test_header_fields_cannot_smuggle_lines() -> None:
    with pytest.raises(ValueError, match="tab or newline"):
        list(
            wire.encode_payload(
                argv=["/usr/bin/python3", "main.py"],
                code_name="main.py",
                code=b"",
                inputs=(wire.PayloadFile("x\nmax_files\t0", b""),),
                backstop_s=1.0,
                collect_outputs=False,
                max_files=1,
                max_file_bytes=1,
            )
        )


def test_bootstrap_does_not_import_json() -> None:
    # json (with re and enum) costs about 10 ms of start-up inside the box.
    import ast

    tree = ast.parse(bootstrap_source())
    imported = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    assert "json" not in imported
    assert "re" not in imported
