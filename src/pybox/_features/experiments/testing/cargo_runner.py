"""cargo test: detected from Cargo.toml, run as `cargo test --no-fail-fast` (every
test target, even after one fails: unit tests, integration tests, doc tests).

The libtest harness writes `test name ... ok|FAILED|ignored` per test and
`test result: FAILED. 2 passed; 2 failed; 1 ignored; ...` per target on stdout;
cargo writes what it compiles, and why a target did not build, on stderr. A
target that did not compile is an error named `crate (target)`; ignored tests
count as skipped. Failing tests are named as libtest names them (`tests::adds`,
`src/lib.rs - f (line 6)` for a doc test)."""

from __future__ import annotations

import re

from pybox._features.experiments.testing.results_tree import plain
from pybox._features.experiments.testing.summary import (
    ReadFile,
    TestSummary,
    summarize,
    unparsed,
)

ARGV = ("cargo", "test", "--no-fail-fast")

_TEST = re.compile(r"^test (?P<name>.+?)(?: - should panic)? \.\.\. (?P<word>FAILED|ok|ignored)")
_RESULT = re.compile(
    r"^test result: \w+\. (?P<passed>\d+) passed; (?P<failed>\d+) failed; "
    r"(?P<ignored>\d+) ignored;",
    re.MULTILINE,
)
_NO_BUILD = re.compile(
    r"^error: could not compile `(?P<crate>[^`]+)`(?: \((?P<target>[^)]+)\))?", re.M
)
_FAILURES = re.compile(r"^failures:\n((?:    \S.*\n)+)", re.MULTILINE)


class CargoTestRunner:
    name = "cargo"

    def detect(self, paths: frozenset[str], read: ReadFile) -> tuple[str, ...] | None:
        return ARGV if "Cargo.toml" in paths else None

    def parse(self, stdout: str, stderr: str, exit_code: int | None) -> TestSummary:
        out, err = plain(stdout), plain(stderr)
        results = list(_RESULT.finditer(out)) or list(_RESULT.finditer(err))
        broken = [
            f"{m.group('crate')} ({m.group('target') or 'build'})" for m in _NO_BUILD.finditer(err)
        ]
        if not results and not broken:
            return unparsed(self.name, exit_code)
        text = out if _RESULT.search(out) else err
        failing = [
            m.group("name")
            for line in text.splitlines()
            if (m := _TEST.match(line)) and m.group("word") == "FAILED"
        ]
        for block in _FAILURES.finditer(text):
            failing.extend(line.strip() for line in block.group(1).splitlines())
        note = ""
        if broken:
            note = "the build failed: the targets named did not compile, so their tests did not run"
        elif sum(int(m.group("passed")) + int(m.group("failed")) for m in results) == 0:
            note = "the runner found no tests"
        return summarize(
            self.name,
            passed=sum(int(m.group("passed")) for m in results),
            failed=sum(int(m.group("failed")) for m in results),
            skipped=sum(int(m.group("ignored")) for m in results),
            errors=len(dict.fromkeys(broken)),
            failing=[*failing, *broken],
            exit_code=exit_code,
            note=note,
        )


CARGO_TEST = CargoTestRunner()
