"""Node's built-in test runner: detected from package.json's `test` script or from
test files named the way `node --test` finds them, run as `node --test`.

Both of its reporters are read: TAP (the default when the output is not a
terminal, as in a box) and spec (`--test-reporter=spec`, the default on a
terminal, and from Node 23 on). Results nest (describe/it, subtests); a failing
test is named by its path, `suite > test`, and a suite counts only when it failed
by itself (results_tree). TODO tests count as skipped, as node does not fail a
run for them."""

from __future__ import annotations

import re

from pybox._features.experiments.testing.package_json import node_project
from pybox._features.experiments.testing.results_tree import (
    FAILED,
    PASSED,
    SKIPPED,
    Result,
    leaves,
    nest,
    plain,
    tally,
)
from pybox._features.experiments.testing.summary import (
    ReadFile,
    TestSummary,
    summarize,
    unparsed,
)

ARGV = ("node", "--test")
SEPARATOR = " > "

# The files `node --test` runs when given no paths (Node 18 to 22).
_TEST_FILE = re.compile(
    r"(?:^|/)(?:test/(?:[^/]+/)*[^/]+|[^/]*[.\-_]test|test-[^/]*|test)\.[cm]?js$"
)
_TAP_RESULT = re.compile(
    r"^(?P<indent> *)(?P<ok>ok|not ok) \d+(?: - (?P<name>(?:[^#\\]|\\.)*?))?"
    r"(?: # (?P<directive>\S+).*)?$"
)
_SPEC_RESULT = re.compile(
    r"^(?P<indent> *)(?P<mark>[✔✖﹣▶]) (?P<name>.+?)"
    r"(?P<duration> \([\d.]+m?s\))?(?: # (?P<directive>.*))?$"
)
_SPEC_FAILURES = re.compile(r"^✖ failing tests:$", re.MULTILINE)
_TOTALS = re.compile("^(?:#|\u2139) (tests|pass|fail|cancelled|skipped|todo) (\\d+)$", re.MULTILINE)


class NodeTestRunner:
    name = "node"

    def detect(self, paths: frozenset[str], read: ReadFile) -> tuple[str, ...] | None:
        project = node_project(paths, read)
        if project is not None:
            if project.uses("jest", paths) or project.uses("vitest", paths):
                return None
            if re.search(r"\bnode\b[^;&|]*--test\b", project.test_script):
                return ARGV
        mine = (p for p in paths if not p.startswith("node_modules/") and "/node_modules/" not in p)
        return ARGV if any(_TEST_FILE.search(p) for p in mine) else None

    def parse(self, stdout: str, stderr: str, exit_code: int | None) -> TestSummary:
        for text in (plain(stdout), plain(stderr)):
            totals = {word: int(n) for word, n in _TOTALS.findall(text)}
            if "tests" not in totals:
                continue
            results = _tap(text) or _spec(text)
            if results:
                counts, failing = tally(leaves(results, SEPARATOR))
            else:  # the totals alone: no test lines to name
                counts = {
                    PASSED: totals.get("pass", 0),
                    FAILED: totals.get("fail", 0) + totals.get("cancelled", 0),
                    SKIPPED: totals.get("skipped", 0) + totals.get("todo", 0),
                }
                failing = []
            return summarize(
                self.name,
                passed=counts[PASSED],
                failed=counts[FAILED],
                skipped=counts[SKIPPED],
                errors=counts.get("error", 0),
                failing=failing,
                exit_code=exit_code,
                note="the runner found no tests" if totals["tests"] == 0 else "",
            )
        return unparsed(self.name, exit_code)


def _tap(text: str) -> list[Result]:
    found: list[tuple[int, Result]] = []
    in_yaml = False
    for line in text.splitlines():
        stripped = line.strip()
        if in_yaml:
            in_yaml = stripped != "..."
            continue
        if stripped == "---" and found:
            in_yaml = True
            continue
        match = _TAP_RESULT.match(line)
        if match is None:
            continue
        directive = (match.group("directive") or "").upper()
        if directive in ("SKIP", "TODO"):
            outcome = SKIPPED
        else:
            outcome = PASSED if match.group("ok") == "ok" else FAILED
        name = re.sub(r"\\(.)", r"\1", match.group("name") or "")
        found.append((len(match.group("indent")), Result(name, outcome)))
    return nest(found)


def _spec(text: str) -> list[Result]:
    end = _SPEC_FAILURES.search(text)
    found: list[tuple[int, Result]] = []
    for line in text[: end.start() if end else len(text)].splitlines():
        match = _SPEC_RESULT.match(line)
        if match is None:
            continue
        mark, directive = match.group("mark"), (match.group("directive") or "").upper()
        if mark == "▶":
            if match.group("duration") is None:
                continue  # a suite starting; its result comes after its tests
            outcome = PASSED
        elif mark == "﹣" or directive.startswith(("TODO", "SKIP")):
            outcome = SKIPPED
        else:
            outcome = PASSED if mark == "✔" else FAILED
        found.append((len(match.group("indent")), Result(match.group("name"), outcome)))
    return nest(found)


NODE_TEST = NodeTestRunner()
