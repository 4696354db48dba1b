"""go test: detected from go.mod, run as `go test -v ./...` (every package, a line
per test: passing ones are counted too). `go test -json` is read as well.

Subtests are named by Go as `TestTable/case`; a test counts only when no subtest
of it is listed, unless it failed while none of its subtests did. A package that
failed without a failing test (a build error, a panic in TestMain, a timeout) is
an error named by the package. Failing tests are named `package.TestName`."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from pybox._features.experiments.testing.results_tree import (
    ERROR,
    FAILED,
    PASSED,
    SKIPPED,
    Result,
    plain,
    tally,
)
from pybox._features.experiments.testing.summary import (
    ReadFile,
    TestSummary,
    summarize,
    unparsed,
)

ARGV = ("go", "test", "-v", "./...")
_OUTCOMES = {"PASS": PASSED, "FAIL": FAILED, "SKIP": SKIPPED}
_JSON_OUTCOMES = {"pass": PASSED, "fail": FAILED, "skip": SKIPPED}
_RESULT = re.compile(r"^\s*--- (?P<word>PASS|FAIL|SKIP): (?P<name>\S+) \(")
# "ok  \tpkg\t0.01s", "FAIL\tpkg [build failed]", "?   \tpkg\t[no test files]": a tab, always.
_PACKAGE = re.compile(r"^(?P<word>ok|FAIL|\?) *\t(?P<package>[^\s\[]+)(?P<rest>.*)$")


@dataclass
class _Package:
    tests: dict[str, str] = field(default_factory=dict)
    failed: str = ""  # why the package failed as a whole ("" when it did not)
    ran: bool = False


class GoTestRunner:
    name = "go"

    def detect(self, paths: frozenset[str], read: ReadFile) -> tuple[str, ...] | None:
        return ARGV if "go.mod" in paths else None

    def parse(self, stdout: str, stderr: str, exit_code: int | None) -> TestSummary:
        text = plain(stdout)
        packages = _from_json(text) or _from_text(text) or _from_text(plain(stderr))
        if not packages:
            return unparsed(self.name, exit_code)
        counts, failing = tally(_results(packages))
        note = ""
        if any("build failed" in p.failed for p in packages.values()):
            note = (
                "the build failed: the packages named did not compile, so their tests did not run"
            )
        elif not any(p.tests for p in packages.values()):
            note = "the runner found no tests"
        elif counts[PASSED] == 0 and any(p.ran and not p.failed for p in packages.values()):
            note = "without -v, go test names only failing tests: passing ones are not counted"
        return summarize(
            self.name,
            passed=counts[PASSED],
            failed=counts[FAILED],
            skipped=counts[SKIPPED],
            errors=counts[ERROR],
            failing=failing,
            exit_code=exit_code,
            note=note,
        )


def _results(packages: dict[str, _Package]) -> Iterator[Result]:
    for package, found in packages.items():
        names = list(found.tests)
        any_failed = False
        for name in names:
            outcome = found.tests[name]
            prefix = name + "/"
            children = [n for n in names if n.startswith(prefix)]
            if children and not (
                outcome == FAILED and all(found.tests[c] != FAILED for c in children)
            ):
                continue
            any_failed = any_failed or outcome == FAILED
            yield Result(f"{package}.{name}", outcome)
        if found.failed and not any_failed:
            yield Result(f"{package}{found.failed}", ERROR)


def _from_text(text: str) -> dict[str, _Package]:
    packages: dict[str, _Package] = {}
    pending: dict[str, str] = {}
    for line in text.splitlines():
        if result := _RESULT.match(line):
            pending[result.group("name")] = _OUTCOMES[result.group("word")]
            continue
        package = _PACKAGE.match(line)
        if package is None or package.group("package").startswith("-"):
            continue
        found = packages.setdefault(package.group("package"), _Package())
        found.tests.update(pending)
        pending = {}
        rest = package.group("rest").strip()
        found.ran = "[no test files]" not in rest
        if package.group("word") == "FAIL":
            found.failed = f" {rest}" if rest.startswith("[") else " (the package failed)"
    return packages


def _from_json(text: str) -> dict[str, _Package]:
    packages: dict[str, _Package] = {}
    for line in text.splitlines():
        if not line.startswith("{"):
            continue
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if not isinstance(event, dict) or not isinstance(event.get("Package"), str):
            continue
        found = packages.setdefault(event["Package"], _Package())
        outcome = _JSON_OUTCOMES.get(str(event.get("Action")))
        if outcome is None:
            continue
        test = event.get("Test")
        if isinstance(test, str):
            found.tests[test] = outcome
        elif outcome == FAILED:
            found.failed = (
                " [build failed]" if event.get("FailedBuild") else " (the package failed)"
            )
        else:
            found.ran = outcome == PASSED
    return packages


GO_TEST = GoTestRunner()
