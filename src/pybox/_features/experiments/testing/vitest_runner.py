"""vitest: detected when package.json depends on it, names it in its `test` script or
has a vitest.config.*, run as `node node_modules/vitest/vitest.mjs run` (once, not
watching; the project's own vitest: `npm install` first). vitest starts esbuild, a
native program in node_modules: in a box whose workspace is noexec it cannot run.

vitest prints a line per file and its failing tests (a cross, then `suite > test`) and the
totals (`Tests  2 failed | 3 passed | 1 skipped | 1 todo (7)`) on stdout, and
each failure again on stderr (` FAIL  file > suite > test`). A file that could
not load is ` FAIL  file [ file ]` under "Failed Suites": it counts as an error.
Failing tests are named `file > suite > test`; todo counts as skipped."""

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

ARGV = ("node", "node_modules/vitest/vitest.mjs", "run")
SEPARATOR = " > "

_TESTS = re.compile(r"^\s*Tests\s{2,}(?P<body>.+?) \((?P<total>\d+)\)\s*$", re.MULTILINE)
_FAIL = re.compile(r"^ FAIL\s+(?P<rest>.+?)\s*$", re.MULTILINE)
_BROKEN = re.compile(r"^(?P<file>\S+) \[ .* \]$")
_FILE = re.compile("^ [\u276f\u2713\u00d7\u2193] (?P<file>\\S+) \\(\\d+ tests?")
_CROSS = re.compile("^   \u00d7 (?P<name>.+?)(?: \\d+m?s)?\\s*$")
_NONE_FOUND = re.compile(r"^No test files found", re.MULTILINE)


class VitestRunner:
    name = "vitest"

    def detect(self, paths: frozenset[str], read: ReadFile) -> tuple[str, ...] | None:
        project = node_project(paths, read)
        return ARGV if project is not None and project.uses("vitest", paths) else None

    def parse(self, stdout: str, stderr: str, exit_code: int | None) -> TestSummary:
        out, err = plain(stdout), plain(stderr)
        for text in (out, err):
            totals = list(_TESTS.finditer(text))
            if totals:
                return _report(out, err, totals[-1], exit_code)
        if _NONE_FOUND.search(out) or _NONE_FOUND.search(err):
            return summarize(
                self.name, passed=0, failed=0, skipped=0, errors=0, failing=(),
                exit_code=exit_code, note="the runner found no tests",
            )  # fmt: skip
        return unparsed(self.name, exit_code)


def _report(out: str, err: str, totals: re.Match[str], exit_code: int | None) -> TestSummary:
    counts: dict[str, int] = {}
    for number, word in re.findall(r"(\d+) (\w+)", totals.group("body")):
        counts[word] = counts.get(word, 0) + int(number)
    failing: list[str] = []
    broken: list[str] = []
    for match in _FAIL.finditer(f"{err}\n{out}"):
        rest = match.group("rest")
        whole_file = _BROKEN.match(rest)
        if whole_file:
            broken.append(whole_file.group("file"))
        else:
            failing.append(rest)
    if not failing:  # no failure details: the per-file lines on stdout
        current = ""
        for line in out.splitlines():
            if file_line := _FILE.match(line):
                current = file_line.group("file")
            elif cross := _CROSS.match(line):
                failing.append(f"{current}{SEPARATOR}{cross.group('name')}")
    return summarize(
        VitestRunner.name,
        passed=counts.get("passed", 0),
        failed=counts.get("failed", 0),
        skipped=counts.get("skipped", 0) + counts.get("todo", 0),
        errors=len(dict.fromkeys(broken)),
        failing=[*failing, *broken],
        exit_code=exit_code,
        note="the runner found no tests" if int(totals.group("total")) == 0 else "",
    )


VITEST = VitestRunner()
