"""The Node, jest, vitest, go and cargo runners: detection from a project's files, and
parsing on outputs captured from the real tools (tests/unit/data/test_output/index.json,
`toolchains_captured_with`, says which versions).

The projects behind the captures: node* ran test/math.test.js (a pass, a failure, a
skip, a todo, describe/it with a nested describe holding a failure, a test whose
subtest fails) and test/other.test.js (a pass); jest*/vitest* a math file (describe
with a pass, a failure, a nested failure and a skipped test, a todo, a top-level
pass), another passing file and a file that cannot load; go* a module with a
failing package (a pass, a failure, a table of three subtests of which two fail, a
skip), a passing package and one without tests, then a package that does not
compile; cargo* a crate with unit tests (a pass, a failure, an ignored test, a
should_panic, a failure in a nested module), an integration test file (a pass, a
failure) and a doc test, then a crate that does not compile."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pybox._features.experiments.testing import registry
from pybox._features.experiments.testing.cargo_runner import CARGO_TEST
from pybox._features.experiments.testing.go_runner import GO_TEST
from pybox._features.experiments.testing.jest_runner import JEST
from pybox._features.experiments.testing.node_runner import NODE_TEST
from pybox._features.experiments.testing.summary import ReadFile
from pybox._features.experiments.testing.vitest_runner import VITEST

DATA = Path(__file__).parent / "data" / "test_output"
INDEX: dict[str, Any] = json.loads((DATA / "index.json").read_text())["cases"]
EXAMPLES = Path(__file__).parents[2] / "examples"

NODE_FAILING = (
    "subtracts wrongly",
    "strings > concat fails",
    "strings > nested > deep failure",
    "parent with subtests > child bad",
)
SEP = " \u203a "  # jest's separator
JEST_MATH = ("math.test.js", "math", "subtracts wrongly")
NODE_MIXED = ("node", 5, 4, 2, 0, NODE_FAILING, "")
JEST_FAILING = (SEP.join(JEST_MATH), SEP.join(("math.test.js", "math", "nested", "deep failure")))
VITEST_FAILING = (
    "math.test.js > math > subtracts wrongly",
    "math.test.js > math > nested > deep failure",
)
GO_FAILING = (
    "example.com/gomix/calc.TestSub",
    "example.com/gomix/calc.TestTable/wrong_sum",
    "example.com/gomix/calc.TestTable/also_wrong",
)
GO_BUILD = ("go", 0, 0, 0, 1, ("example.com/gobuild [build failed]",), "build failed")
CARGO_UNIT_FAILING = ("tests::inner::deep_failure", "tests::subtracts")

# case: (runner, passed, failed, skipped, errors, failing names, a word of the note)
EXPECTED: dict[str, tuple[str, int, int, int, int, tuple[str, ...], str]] = {
    "node20_tap": NODE_MIXED,
    "node20_spec": NODE_MIXED,
    "node18_tap": NODE_MIXED,
    "node18_spec": NODE_MIXED,
    "node20_none": ("node", 0, 0, 0, 0, (), "no tests"),
    "jest_mixed": ("jest", 3, 2, 2, 1, (*JEST_FAILING, "broken.test.js"), ""),
    "jest_verbose": ("jest", 2, 2, 2, 0, JEST_FAILING, ""),
    "jest_pass": ("jest", 3, 0, 0, 0, (), ""),
    "vitest_mixed": ("vitest", 3, 2, 2, 1, (*VITEST_FAILING, "broken.test.js"), ""),
    "vitest_pass": ("vitest", 1, 0, 0, 0, (), ""),
    "go_verbose_mixed": ("go", 4, 3, 1, 0, GO_FAILING, ""),
    "go_json_mixed": ("go", 4, 3, 1, 0, GO_FAILING, ""),
    "go_plain_mixed": ("go", 0, 3, 0, 0, GO_FAILING, "without -v"),
    "go_build": GO_BUILD,
    "go_json_build": GO_BUILD,
    "go_none": ("go", 0, 0, 0, 0, (), "no tests"),
    "cargo_mixed": ("cargo", 2, 2, 1, 0, CARGO_UNIT_FAILING, ""),
    "cargo_no_fail_fast": ("cargo", 4, 3, 1, 0, (*CARGO_UNIT_FAILING, "it_fails"), ""),
    "cargo_build": ("cargo", 0, 0, 0, 2, ("rbuild (lib)", "rbuild (lib test)"), "build failed"),
    "cargo_none": ("cargo", 0, 0, 0, 0, (), "no tests"),
    "go_example": ("go", 2, 1, 0, 0, ("example.com/gofailing/roman.TestToRomanFour",), ""),
    "cargo_example": ("cargo", 2, 1, 0, 0, ("tests::median_of_an_even_count",), ""),
}


def captured(case: str) -> tuple[list[str], str, str, int]:
    meta = INDEX[case]
    stdout = (DATA / f"{case}.stdout").read_text()
    return meta["argv"], stdout, (DATA / f"{case}.stderr").read_text(), meta["exit_code"]


def test_every_toolchain_capture_is_pinned() -> None:
    assert set(EXPECTED) == {c for c in INDEX if not c.startswith(("pytest", "unittest"))}


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_captured_output_parses(case: str) -> None:
    argv, stdout, stderr, exit_code = captured(case)
    runner, passed, failed, skipped, errors, failing, note = EXPECTED[case]
    result = registry.parse_output(argv, stdout, stderr, exit_code)
    assert result.parsed, result.note
    counts = (result.runner, result.passed, result.failed, result.skipped, result.errors)
    assert counts == (runner, passed, failed, skipped, errors)
    assert result.failing == failing
    assert result.exit_code == exit_code and note in result.note
    # Read without its argv, the output still finds its own parser, and no other.
    assert registry.parse_output(["make", "check"], stdout, stderr, exit_code) == result


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_no_other_parser_claims_the_output(case: str) -> None:
    _, stdout, stderr, code = captured(case)
    claimed = [r.name for r in registry.RUNNERS if r.parse(stdout, stderr, code).parsed]
    assert claimed == [EXPECTED[case][0]]


def test_python_outputs_are_not_claimed_by_the_new_parsers() -> None:
    for case in (c for c in INDEX if c.startswith(("pytest", "unittest"))):
        _, stdout, stderr, code = captured(case)
        for runner in (NODE_TEST, JEST, VITEST, GO_TEST, CARGO_TEST):
            assert not runner.parse(stdout, stderr, code).parsed, (case, runner.name)


def test_colour_codes_are_ignored() -> None:
    argv, stdout, stderr, code = captured("vitest_mixed")
    cross = "\u00d7"
    coloured = stdout.replace(f" {cross} ", f" \x1b[31m{cross}\x1b[39m ")
    coloured = coloured.replace("Tests", "\x1b[2mTests\x1b[22m")
    assert registry.parse_output(argv, coloured, stderr, code).failed == 2
    tap = captured("node20_tap")[1].replace("not ok", "\x1b[31mnot ok\x1b[0m")
    assert NODE_TEST.parse(tap, "", 1).failing == NODE_FAILING


def test_a_cut_short_run_falls_back_to_the_exit_code() -> None:
    # The output of a tool that died before any totals: nothing to read.
    for runner in (NODE_TEST, JEST, VITEST, CARGO_TEST):
        result = runner.parse("TAP version 13\n# Subtest: a\n", "Segmentation fault\n", 139)
        assert not result.parsed and "139" in result.note, runner.name
    assert not GO_TEST.parse("", "go: cannot find main module\n", 1).parsed


def test_node_tap_escapes_and_an_erroring_parent() -> None:
    tap = (
        "TAP version 13\n"
        "# Subtest: has \\# hash\n"
        "not ok 1 - has \\# hash\n"
        "  ---\n  error: 'ok 2 - not a result'\n  ...\n"
        "# Subtest: parent\n"
        "    ok 1 - child\n"
        "    1..1\n"
        "not ok 2 - parent\n"
        "1..2\n# tests 3\n# pass 1\n# fail 2\n"
    )
    result = NODE_TEST.parse(tap, "", 1)
    # The parent failed by itself (its only child passed): it is named.
    assert result.failing == ("has # hash", "parent") and result.passed == 1


def test_go_test_json_with_a_panicking_package() -> None:
    events = [
        {"Action": "run", "Package": "m/p", "Test": "TestA"},
        {"Action": "output", "Package": "m/p", "Output": "panic: boom\n"},
        {"Action": "fail", "Package": "m/p", "Elapsed": 0.1},
        {"Action": "pass", "Package": "m/q", "Test": "TestB"},
        {"Action": "pass", "Package": "m/q"},
    ]
    text = "".join(json.dumps(e) + "\n" for e in events)
    result = GO_TEST.parse(text, "", 1)
    assert (result.passed, result.errors) == (1, 1)
    assert result.failing == ("m/p (the package failed)",)


def files(tree: dict[str, bytes]) -> tuple[frozenset[str], ReadFile]:
    return frozenset(tree), tree.get


def package(**fields: Any) -> bytes:
    return json.dumps({"name": "p", **fields}).encode()


@pytest.mark.parametrize(
    ("tree", "runner"),
    [
        ({"package.json": package(devDependencies={"jest": "^29"}), "a.test.js": b""}, "jest"),
        ({"package.json": package(scripts={"test": "jest --coverage"})}, "jest"),
        ({"package.json": package(jest={"testEnvironment": "node"})}, "jest"),
        ({"package.json": package(), "jest.config.mjs": b""}, "jest"),
        ({"package.json": package(devDependencies={"vitest": "^2"}), "a.test.ts": b""}, "vitest"),
        ({"package.json": package(scripts={"test": "vitest run"})}, "vitest"),
        ({"package.json": package(), "vitest.config.ts": b""}, "vitest"),
        ({"package.json": package(scripts={"test": "node --test test/"})}, "node"),
        ({"package.json": package(scripts={"test": "node --experimental-x --test"})}, "node"),
        ({"package.json": package(), "test/util.mjs": b""}, "node"),
        ({"package.json": package(), "lib/a.test.cjs": b""}, "node"),
        ({"lib/a_test.js": b""}, "node"),
        ({"go.mod": b"module m\n", "a_test.go": b""}, "go"),
        ({"Cargo.toml": b"[package]\n", "src/lib.rs": b""}, "cargo"),
        # pytest's own configuration still wins over a package.json beside it.
        ({"pytest.ini": b"", "package.json": package(devDependencies={"jest": "1"})}, "pytest"),
        # Not a node test: a package's own node_modules, a README, bad JSON.
        ({"package.json": package(), "node_modules/x/test/a.js": b""}, None),
        ({"package.json": b"{not json", "README.md": b"jest"}, None),
        ({"package.json": package(scripts={"test": "echo no tests"})}, None),
    ],
)
def test_detection(tree: dict[str, bytes], runner: str | None) -> None:
    found = registry.detect_runner(*files(tree))
    assert (found[0].name if found else None) == runner


def test_the_argv_each_runner_detects() -> None:
    trees = {
        ("go", "test", "-v", "./..."): {"go.mod": b""},
        ("cargo", "test", "--no-fail-fast"): {"Cargo.toml": b""},
        ("node", "node_modules/jest/bin/jest.js", "--ci"): {
            "package.json": package(devDependencies={"jest": "1"})
        },
        ("node", "node_modules/vitest/vitest.mjs", "run"): {
            "package.json": package(devDependencies={"vitest": "1"})
        },
        ("node", "--test"): {"package.json": package(scripts={"test": "node --test"})},
    }
    for argv, tree in trees.items():
        found = registry.detect_runner(*files(tree))
        assert found is not None and found[1] == argv


@pytest.mark.parametrize(
    ("argv", "name"),
    [
        (["node", "--test"], "node"),
        (["node_modules/.bin/jest", "--ci"], "jest"),
        (["node", "node_modules/jest/bin/jest.js", "--ci"], "jest"),
        (["node", "node_modules/vitest/vitest.mjs", "run"], "vitest"),
        (["/usr/bin/node", "--test", "test/"], "node"),
        (["npx", "vitest", "run"], "vitest"),
        (["/usr/lib/go/bin/go", "test", "-json", "./..."], "go"),
        (["cargo", "test"], "cargo"),
    ],
)
def test_the_parser_is_picked_from_the_argv(argv: list[str], name: str) -> None:
    runner = registry.runner_for_argv(argv)
    assert runner is not None and runner.name == name


@pytest.mark.parametrize(("example", "runner"), [("go-failing", "go"), ("rust-failing", "cargo")])
def test_the_examples_are_detected(example: str, runner: str) -> None:
    root = EXAMPLES / example
    tree = {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}
    found = registry.detect_runner(*files(tree))
    assert found is not None and found[0].name == runner
