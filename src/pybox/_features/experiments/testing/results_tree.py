"""Results that nest (a suite holds tests, a test holds subtests), read from indented
lines and judged leaf by leaf: what the node, go and cargo parsers share.

A test with children is a container: it counts only when it failed and none of the
tests under it did (a hook or the parent itself failed), so a failing subtest is
named once, by its full path, and not again as its parents."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from pybox._features.experiments.testing.summary import ReadFile

PASSED, FAILED, SKIPPED, ERROR = "passed", "failed", "skipped", "error"
# At most this much of a project's manifest (package.json, go.mod, Cargo.toml) is read.
MAX_MANIFEST_BYTES = 1024 * 1024

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def plain(text: str) -> str:
    """The text without terminal colour codes (a runner that thinks it has a terminal)."""
    return _ANSI.sub("", text)


@dataclass
class Result:
    """One test's result as a parser builds the tree (mutable while parsing only)."""

    name: str
    outcome: str
    children: list[Result] = field(default_factory=list)


def nest(lines: Iterable[tuple[int, Result]]) -> list[Result]:
    """The trees of results printed children first: each (indent, result) adopts the
    deeper results printed since the last one at its own depth (TAP, node's spec)."""
    pending: list[tuple[int, Result]] = []
    for indent, result in lines:
        while pending and pending[-1][0] > indent:
            result.children.insert(0, pending.pop()[1])
        pending.append((indent, result))
    return [result for _, result in pending]


def leaves(roots: Iterable[Result], separator: str, prefix: str = "") -> Iterator[Result]:
    """Each test that counts, named by its path from the root (see the module's doc)."""
    for result in roots:
        name = f"{prefix}{separator}{result.name}" if prefix else result.name
        if not result.children:
            yield Result(name, result.outcome)
            continue
        below = list(leaves(result.children, separator, name))
        yield from below
        if result.outcome in (FAILED, ERROR) and not any(
            r.outcome in (FAILED, ERROR) for r in below
        ):
            yield Result(name, result.outcome)


def tally(results: Iterable[Result]) -> tuple[dict[str, int], list[str]]:
    """Counts by outcome, and the failing names in order."""
    counts = dict.fromkeys((PASSED, FAILED, SKIPPED, ERROR), 0)
    failing = []
    for result in results:
        counts[result.outcome] += 1
        if result.outcome in (FAILED, ERROR):
            failing.append(result.name)
    return counts, failing


def read_json(read: ReadFile, path: str) -> dict[str, Any] | None:
    """A project's JSON manifest as an object, or None (missing, too big, not an object)."""
    data = read(path)
    if data is None or len(data) > MAX_MANIFEST_BYTES:
        return None
    try:
        value = json.loads(data.decode("utf-8-sig"))
    except (UnicodeDecodeError, ValueError):
        return None
    return value if isinstance(value, dict) else None
