"""jest: detected when package.json depends on it, names it in its `test` script or
has a jest.config.* (or a "jest" key), run as `node node_modules/jest/bin/jest.js --ci`
(the project's own jest: `npm install` first; `--ci` writes no new snapshots; by
node, not node_modules/.bin/jest, since a box's writable places are noexec).

jest reports on stderr: a `PASS file`/`FAIL file` line per test file, a `● title`
header per failing test (`describe`, an angle quote, `test`), and the totals
(`Tests: 2 failed, 1 skipped, 1 todo, 3 passed, 7 total`). A file that could not
run (a syntax or import error) is `● Test suite failed to run`: it counts as an
error, named by the file. Failing tests are named by the file and jest's title,
joined by SEPARATOR; todo counts as skipped."""

from __future__ import annotations

import re

from pybox._features.experiments.testing.package_json import node_project
from pybox._features.experiments.testing.results_tree import plain
from pybox._features.experiments.testing.summary import (
    ReadFile,
    TestSummary,
    summarize,
    unparsed,
)

ARGV = ("node", "node_modules/jest/bin/jest.js", "--ci")
SEPARATOR = " \u203a "  # a single right-pointing angle quotation mark
SUITE_FAILED = "Test suite failed to run"

_TESTS = re.compile(r"^Tests:\s+(?P<body>.*?)(?P<total>\d+) total$", re.MULTILINE)
_FILE = re.compile(r"^(?:FAIL|PASS) (?P<file>\S+)", re.MULTILINE)
_HEADER = re.compile(r"^  ● (?P<title>.+?)\s*$", re.MULTILINE)
_NOT_A_TEST = frozenset({"Console"})
_NONE_FOUND = re.compile(r"^No tests found", re.MULTILINE)


class JestRunner:
    name = "jest"

    def detect(self, paths: frozenset[str], read: ReadFile) -> tuple[str, ...] | None:
        project = node_project(paths, read)
        if project is None:
            return None
        if project.uses("jest", paths) or "jest" in project.top_level:
            return ARGV
        return None

    def parse(self, stdout: str, stderr: str, exit_code: int | None) -> TestSummary:
        for text in (plain(stderr), plain(stdout)):
            totals = list(_TESTS.finditer(text))
            if totals:
                return _report(text, totals[-1], exit_code)
            if _NONE_FOUND.search(text):
                return summarize(
                    self.name, passed=0, failed=0, skipped=0, errors=0, failing=(),
                    exit_code=exit_code, note="the runner found no tests",
                )  # fmt: skip
        return unparsed(self.name, exit_code)


def _report(text: str, totals: re.Match[str], exit_code: int | None) -> TestSummary:
    counts: dict[str, int] = {}
    for number, word in re.findall(r"(\d+) (\w+)", totals.group("body")):
        counts[word] = counts.get(word, 0) + int(number)
    failing: list[str] = []
    broken: list[str] = []
    marks = sorted(
        [(m.start(), "file", m.group("file")) for m in _FILE.finditer(text, 0, totals.start())]
        + [(m.start(), "test", m.group("title")) for m in _HEADER.finditer(text, 0, totals.start())]
    )
    current = ""
    for _, kind, value in marks:
        if kind == "file":
            current = value.removeprefix("./")
        elif value == SUITE_FAILED:
            broken.append(current or value)
        elif value not in _NOT_A_TEST:
            failing.append(f"{current}{SEPARATOR}{value}" if current else value)
    return summarize(
        JestRunner.name,
        passed=counts.get("passed", 0),
        failed=counts.get("failed", 0),
        skipped=counts.get("skipped", 0) + counts.get("todo", 0) + counts.get("pending", 0),
        errors=len(dict.fromkeys(broken)),
        failing=[*failing, *broken],
        exit_code=exit_code,
        note="the runner found no tests" if int(totals.group("total")) == 0 else "",
    )


JEST = JestRunner()
