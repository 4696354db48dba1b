"""pytest: detected from its configuration or from tests that import it, run as
`python3 -m pytest -rfE -p no:cacheprovider`.

`-rfE` asks for the short summary's `FAILED node - message` and `ERROR node`
lines (the names of failing tests); `-p no:cacheprovider` keeps pytest from
writing `.pytest_cache/` into the project, which would show as a change.
pytest writes its report to stdout. xfailed tests count as skipped, xpassed as
passed (pytest's own verdict); a strict xpass is reported by pytest as FAILED.
"""

from __future__ import annotations

import re

from pybox._features.experiments.testing.summary import (
    ReadFile,
    TestSummary,
    is_test_file,
    summarize,
    unparsed,
)

ARGV = ("python3", "-m", "pytest", "-rfE", "-p", "no:cacheprovider")
# How many test files are read to look for `import pytest`, and how much of each.
MAX_FILES_READ = 200
MAX_READ_BYTES = 64 * 1024

_INI_SECTIONS = {
    "pyproject.toml": re.compile(rb"^\s*\[tool\.pytest(?:\.ini_options)?\]", re.MULTILINE),
    "setup.cfg": re.compile(rb"^\s*\[tool:pytest\]", re.MULTILINE),
    "tox.ini": re.compile(rb"^\s*\[pytest\]", re.MULTILINE),
}
_IMPORTS_PYTEST = re.compile(rb"^\s*(?:import|from)\s+_?pytest\b", re.MULTILINE)

# "==== 3 failed, 11 passed, 1 skipped in 0.12s ====", "3 failed, 11 passed in 0.05s" (-q),
# "==== no tests ran in 0.01s ====", "... in 65.20s (0:01:05) ...".
_SUMMARY = re.compile(
    r"^=*\s*(?P<body>(?:\d+ \w+(?:, )?)+|no tests ran) in [\d.]+s(?: \([\d:]+\))?\s*=*$",
    re.MULTILINE,
)
_COUNT = re.compile(r"(\d+) (\w+)")
_SHORT = re.compile(r"^(?P<kind>FAILED|ERROR|SUBFAILED(?P<sub>\([^)]*\))?) (?P<rest>.+)$", re.M)
_MEANINGS = {
    2: "pytest was interrupted",
    3: "pytest had an internal error",
    4: "pytest was given a wrong option or path",
    5: "pytest collected no tests",
}


class PytestRunner:
    name = "pytest"

    def detect(self, paths: frozenset[str], read: ReadFile) -> tuple[str, ...] | None:
        if "pytest.ini" in paths or ".pytest.ini" in paths:
            return ARGV
        if any(p == "conftest.py" or p.endswith("/conftest.py") for p in paths):
            return ARGV
        for config, section in _INI_SECTIONS.items():
            if config in paths and section.search(read(config) or b""):
                return ARGV
        tests = sorted(p for p in paths if is_test_file(p))[:MAX_FILES_READ]
        for path in tests:
            data = read(path)
            if data and _IMPORTS_PYTEST.search(data[:MAX_READ_BYTES]):
                return ARGV
        return None

    def parse(self, stdout: str, stderr: str, exit_code: int | None) -> TestSummary:
        for text in (stdout, stderr):
            found = list(_SUMMARY.finditer(text))
            if found:
                return _parse_report(text, found[-1], exit_code)
        return unparsed(self.name, exit_code, _MEANINGS.get(exit_code or 0, ""))


def _parse_report(text: str, summary: re.Match[str], exit_code: int | None) -> TestSummary:
    counts: dict[str, int] = {}
    for number, word in _COUNT.findall(summary.group("body")):
        counts[word] = counts.get(word, 0) + int(number)
    names = []
    for line in _SHORT.finditer(text[: summary.start()]):
        node = _node_id(line.group("rest"))
        names.append(f"{node} {line.group('sub')}" if line.group("sub") else node)
    note = ""
    if "Interrupted:" in text and exit_code == 2:
        note = "pytest was interrupted (often an error while collecting tests); no test ran"
    elif summary.group("body") == "no tests ran":
        note = "the runner found no tests"
    return summarize(
        PytestRunner.name,
        passed=counts.get("passed", 0) + counts.get("xpassed", 0),
        failed=counts.get("failed", 0),
        skipped=counts.get("skipped", 0) + counts.get("xfailed", 0),
        errors=counts.get("error", 0) + counts.get("errors", 0),
        failing=names,
        exit_code=exit_code,
        note=note,
    )


def _node_id(rest: str) -> str:
    """The node id at the start of a short-summary line: up to " - message", where a
    " - " inside a parametrisation's brackets (test_x[a - b]) is part of the id."""
    depth = 0
    for index, char in enumerate(rest):
        if char == "[":
            depth += 1
        elif char == "]":
            depth = max(depth - 1, 0)
        elif depth == 0 and rest.startswith(" - ", index):
            return rest[:index]
    return rest.strip()


PYTEST = PytestRunner()
