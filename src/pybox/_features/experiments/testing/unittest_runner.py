"""unittest: detected from test files, run as `python3 -m unittest discover -v`.

unittest writes its report to stderr (stdout is the tests' own prints). `-v`
adds a line per test (`test_x (mod.Class.test_x) ... ok`), which counts the
passed tests even when subtests or a failing setUpClass make `Ran N` disagree
with the failure counts. Expected failures count as skipped and unexpected
successes as failed, as unittest itself judges the run.
"""

from __future__ import annotations

import re

from pybox._features.experiments.testing.summary import (
    ReadFile,
    TestSummary,
    summarize,
    unparsed,
)

ARGV = ("python3", "-m", "unittest", "discover", "-v")

_RAN = re.compile(r"^Ran (\d+) tests? in [\d.]+s$", re.MULTILINE)
_VERDICT = re.compile(r"^(OK|FAILED|NO TESTS RAN)(?: \(([^)]*)\))?$", re.MULTILINE)
_HEADER = re.compile(r"^(?:FAIL|ERROR|UNEXPECTED SUCCESS): (.+)$", re.MULTILINE)
_VERBOSE = re.compile(
    r" \.\.\. (ok|FAIL|ERROR|skipped.*|expected failure|unexpected success)$", re.MULTILINE
)
# "test_x (pkg.mod.Class.test_x)" (3.11+) or "test_x (pkg.mod.Class)", then maybe " (i=1)".
_TEST_ID = re.compile(r"^(\S+) \(([^()\s]+)\)(.*)$")


class UnittestRunner:
    name = "unittest"

    def detect(self, paths: frozenset[str], read: ReadFile) -> tuple[str, ...] | None:
        tests = sorted(p for p in paths if _unittest_pattern(p))
        if not tests:
            return None
        if any(_importable_from_root(p, paths) for p in tests):
            return ARGV
        # Test files in a folder that is not a package (tests/ without __init__.py):
        # discover from the shallowest such folder; `-m` puts the project root on sys.path.
        folder = min((p.rsplit("/", 1)[0] for p in tests), key=lambda d: (d.count("/"), d))
        return (*ARGV, "-s", folder)

    def parse(self, stdout: str, stderr: str, exit_code: int | None) -> TestSummary:
        for text in (stderr, stdout):
            ran = list(_RAN.finditer(text))
            if ran:
                return _parse_report(text, ran[-1], exit_code)
        return unparsed(self.name, exit_code)


def _parse_report(text: str, ran: re.Match[str], exit_code: int | None) -> TestSummary:
    total = int(ran.group(1))
    verdict = _VERDICT.search(text, ran.end())
    counts: dict[str, int] = {}
    if verdict and verdict.group(2):
        for part in verdict.group(2).split(","):
            key, _, value = part.strip().partition("=")
            if value.isdigit():
                counts[key] = int(value)
    failures = counts.get("failures", 0) + counts.get("unexpected successes", 0)
    errors = counts.get("errors", 0)
    skipped = counts.get("skipped", 0) + counts.get("expected failures", 0)
    report = text[: ran.start()]
    verbose = _VERBOSE.findall(report)
    # With -v, the ok lines; without, what the counts leave (subtests make it a guess).
    passed = verbose.count("ok") if verbose else max(total - failures - errors - skipped, 0)
    names = [_test_name(m.group(1)) for m in _HEADER.finditer(report)]
    note = ""
    if total == 0:
        note = "the runner found no tests"
    elif verdict is None:
        note = "the run's verdict line (OK or FAILED) is missing; the counts may be incomplete"
    return summarize(
        UnittestRunner.name,
        passed=passed,
        failed=failures,
        skipped=skipped,
        errors=errors,
        failing=names,
        exit_code=exit_code,
        note=note,
    )


def _test_name(header: str) -> str:
    """A unittest header's test as one dotted name: pkg.mod.Class.test_x [(params)]."""
    match = _TEST_ID.match(header.strip())
    if match is None:
        return header.strip()
    method, qualified, rest = match.groups()
    if qualified.startswith("unittest."):
        # A module that failed to import: "pkg.test_mod (unittest.loader._FailedTest...)".
        name = method
    elif qualified == method or qualified.endswith("." + method):
        name = qualified
    else:
        name = f"{qualified}.{method}"
    return f"{name}{rest}" if rest.strip() else name


def _unittest_pattern(path: str) -> bool:
    base = path.rsplit("/", 1)[-1]
    return base.startswith("test") and base.endswith(".py")


def _importable_from_root(path: str, paths: frozenset[str]) -> bool:
    parts = path.split("/")[:-1]
    return all("/".join(parts[: i + 1]) + "/__init__.py" in paths for i in range(len(parts)))


UNITTEST = UnittestRunner()
