"""A reader for the plain YAML that Colima and Lima write (standard library only).

It understands block mappings and sequences, plain and quoted scalars, empty
or one-line flow collections, block scalars (kept as text) and comments. Anything
else raises `ValueError`, so a caller checking a VM's settings fails closed
instead of guessing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class _Line:
    number: int
    indent: int
    text: str


def _strip_comment(line: str) -> str:
    quote: str | None = None
    for index, char in enumerate(line):
        if quote:
            if char == quote:
                quote = None
        elif char in "'\"":
            quote = char
        elif char == "#" and (index == 0 or line[index - 1] in " \t"):
            return line[:index].rstrip()
    return line.rstrip()


def _lines(text: str) -> list[_Line]:
    found: list[_Line] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        if raw.strip() in ("---", "..."):
            continue
        stripped = _strip_comment(raw)
        if not stripped.strip():
            continue
        body = stripped.lstrip(" ")
        if body.startswith("\t"):
            raise ValueError(f"line {number}: tab indentation")
        found.append(_Line(number, len(stripped) - len(body), body))
    return found


def _split_key(text: str, number: int) -> tuple[str, str] | None:
    """`key: rest` -> (key, rest); None when the text is not a mapping entry."""
    quote: str | None = None
    for index, char in enumerate(text):
        if quote:
            if char == quote:
                quote = None
        elif char in "'\"" and index == 0:
            quote = char
        elif char == ":" and (index + 1 == len(text) or text[index + 1] == " "):
            key = text[:index].strip()
            if not key:
                raise ValueError(f"line {number}: empty key")
            return str(_scalar(key, number)), text[index + 1 :].strip()
    return None


def _scalar(text: str, number: int) -> Any:
    text = text.strip()
    if text in ("", "~", "null", "Null", "NULL"):
        return None
    if text in ("true", "True", "TRUE"):
        return True
    if text in ("false", "False", "FALSE"):
        return False
    if text[0] == '"':
        try:
            return json.loads(text)
        except ValueError as exc:
            raise ValueError(f"line {number}: unreadable quoted string {text!r}") from exc
    if text[0] == "'":
        if len(text) < 2 or text[-1] != "'":
            raise ValueError(f"line {number}: unterminated quoted string {text!r}")
        return text[1:-1].replace("''", "'")
    if text[0] == "{":
        if text.replace(" ", "") == "{}":
            return {}
        raise ValueError(f"line {number}: flow mappings are not supported: {text!r}")
    if text[0] == "[":
        if text[-1] != "]":
            raise ValueError(f"line {number}: unterminated flow sequence {text!r}")
        inner = text[1:-1].strip()
        if not inner:
            return []
        if any(c in inner for c in "[]{}\"'"):
            raise ValueError(f"line {number}: nested flow sequences are not supported")
        return [_scalar(part, number) for part in inner.split(",")]
    if text[0] in "&*!|>%@`":
        raise ValueError(f"line {number}: unsupported YAML {text!r}")
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


class _Parser:
    def __init__(self, lines: list[_Line]) -> None:
        self.lines = lines
        self.index = 0

    def peek(self) -> _Line | None:
        return self.lines[self.index] if self.index < len(self.lines) else None

    def block(self, indent: int) -> Any:
        line = self.peek()
        if line is None or line.indent < indent:
            return None
        if _is_item(line.text):
            return self.sequence(line.indent)
        return self.mapping(line.indent)

    def _child(self, parent_indent: int) -> Any:
        line = self.peek()
        if line is None:
            return None
        if line.indent > parent_indent:
            return self.block(line.indent)
        if line.indent == parent_indent and _is_item(line.text):
            return self.sequence(line.indent)  # a sequence not indented under its key
        return None

    def _block_scalar(self, parent_indent: int) -> str:
        parts: list[str] = []
        while (line := self.peek()) is not None and line.indent > parent_indent:
            parts.append(line.text)
            self.index += 1
        return "\n".join(parts)

    def mapping(self, indent: int) -> dict[str, Any]:
        result: dict[str, Any] = {}
        while (line := self.peek()) is not None and line.indent == indent:
            if _is_item(line.text):
                break
            entry = _split_key(line.text, line.number)
            if entry is None:
                raise ValueError(f"line {line.number}: expected `key: value`, got {line.text!r}")
            key, rest = entry
            if key in result:
                raise ValueError(f"line {line.number}: duplicate key {key!r}")
            self.index += 1
            if rest == "":
                result[key] = self._child(indent)
            elif rest[0] in "|>":
                result[key] = self._block_scalar(indent)
            else:
                result[key] = _scalar(rest, line.number)
        line = self.peek()
        if line is not None and line.indent > indent:
            raise ValueError(f"line {line.number}: unexpected indentation")
        return result

    def sequence(self, indent: int) -> list[Any]:
        result: list[Any] = []
        while (line := self.peek()) is not None and line.indent == indent:
            if not _is_item(line.text):
                break
            rest = line.text[1:].lstrip(" ")
            if rest == "":
                self.index += 1
                result.append(self._child(indent))
                continue
            inner_indent = indent + len(line.text) - len(rest)
            if _split_key(rest, line.number) is not None:
                # `- key: value` opens a mapping whose keys line up after the dash.
                self.lines[self.index] = _Line(line.number, inner_indent, rest)
                result.append(self.mapping(inner_indent))
            else:
                self.index += 1
                result.append(_scalar(rest, line.number))
        return result


def _is_item(text: str) -> bool:
    return text == "-" or text.startswith("- ")


def load(text: str) -> Any:
    """The document as dicts, lists and scalars; ValueError for what it cannot read."""
    parser = _Parser(_lines(text))
    if parser.peek() is None:
        return None
    first = parser.peek()
    assert first is not None
    value = parser.block(first.indent)
    leftover = parser.peek()
    if leftover is not None:
        raise ValueError(f"line {leftover.number}: unexpected content {leftover.text!r}")
    return value
