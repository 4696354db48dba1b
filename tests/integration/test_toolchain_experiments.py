"""Go and Rust experiments on the real engine: examples/go-failing and
examples/rust-failing are copied into boxes of the `go` and `rust` environments
(built from locks/go.toml and locks/rust.toml; no network), `run_tests` detects
the runner and names the one failing test (the compiled test programs run: the
recipes' `workspace_exec` mounts the workspace, and only it, without noexec), a
fix makes it pass, and the caches the toolchains wrote stay out of the changes. Skipped when the environment is not
recorded (`pybox image build go`, `pybox image build rust`), unless CI requires it."""

from __future__ import annotations

import io
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from pybox._adapters.state import StateStore
from pybox._core.experiment_settings import ExperimentSettings
from pybox._core.limits import MIB, LimitRequest
from pybox._features.experiments.service import Experiments
from pybox._orchestration.session import Session

REPO = Path(__file__).resolve().parents[2]
# Compiling needs more than a Python test: memory, processes, and room for the caches.
LIMITS = LimitRequest(timeout_s=300, memory_bytes=1024 * MIB, pids=256, writable_bytes=512 * MIB)
REQUIRE = os.environ.get("PYBOX_REQUIRE_TOOLCHAINS") == "1"

CASES = {
    "go": (
        "go-failing",
        "example.com/gofailing/roman.TestToRomanFour",
        ("go", "test", "-v", "./..."),
        "roman/roman.go",
        ('{5, "V"}, {1, "I"},', '{5, "V"}, {4, "IV"}, {1, "I"},'),
    ),
    "rust": (
        "rust-failing",
        "tests::median_of_an_even_count",
        ("cargo", "test", "--no-fail-fast"),
        "src/lib.rs",
        (
            "Some(f64::from(sorted[sorted.len() / 2]))",
            "let mid = sorted.len() / 2;\n    if sorted.len() % 2 == 0 {\n"
            "        return Some((f64::from(sorted[mid - 1]) + f64::from(sorted[mid])) / 2.0);\n"
            "    }\n    Some(f64::from(sorted[mid]))",
        ),
    ),
}


def mount_options(experiments: Experiments, experiment_id: str) -> dict[str, set[str]]:
    """Each mount point's options, as the kernel shows them inside the box."""
    mounts = experiments.execute(experiment_id, ["cat", "/proc/self/mounts"])
    assert mounts.doc["exit_code"] == 0, mounts.doc
    return {
        fields[1]: set(fields[3].split(","))
        for fields in (line.split() for line in mounts.doc["stdout"].splitlines())
        if len(fields) > 3
    }


@pytest.fixture
def experiments(session: Session, tmp_path: Path) -> Iterator[Experiments]:
    service = Experiments(
        session,
        session.sandboxes(),
        ExperimentSettings(project_roots=(str(tmp_path),)),
        events=io.StringIO(),
    )
    yield service
    for record in service.ledger.list():
        service.destroy(record.experiment_id)


@pytest.mark.parametrize("environment", sorted(CASES))
def test_the_failing_test_is_named_then_fixed(
    environment: str, experiments: Experiments, state_dir: Path, tmp_path: Path
) -> None:
    if StateStore(state_dir).image(environment) is None:
        message = f"the {environment} environment is not recorded: pybox image build {environment}"
        if REQUIRE:
            pytest.fail(message)
        pytest.skip(message)
    example, failing, argv, path, (before, after) = CASES[environment]
    project = tmp_path / example
    shutil.copytree(REPO / "examples" / example, project)
    record = experiments.create(str(project), environment=environment, limits=LIMITS)
    assert record.doc["environment"] == environment
    who = experiments.execute(record.experiment_id, ["id", "-u"])
    assert who.doc["stdout"].strip() != "0"  # non-root, like every box

    # The recipe's workspace_exec: only the workspace tmpfs is exec-able, as the
    # engine mounted it (the kernel's own table, read in the box).
    options = mount_options(experiments, record.experiment_id)
    assert {"nosuid", "nodev"} <= options["/pybox"] and "noexec" not in options["/pybox"]
    assert {"nosuid", "nodev", "noexec"} <= options["/tmp"], options
    assert "noexec" in options["/dev/shm"] and "ro" in options["/"], options

    first = experiments.run_tests(record.experiment_id)
    tests = first.doc["tests"]
    assert first.doc["argv"] == list(argv), first.doc
    shown = (first.doc.get("stdout", ""), first.doc.get("stderr", ""))
    assert (tests["parsed"], tests["failing"], tests["failed"]) == (True, [failing], 1), shown
    assert tests["passed"] == 2 and tests["runner"] == {"go": "go", "rust": "cargo"}[environment]

    source = experiments.read_file(record.experiment_id, path).decode()
    assert before in source
    experiments.write_file(record.experiment_id, path, source.replace(before, after).encode())
    second = experiments.run_tests(record.experiment_id)
    assert second.state == "completed", second.doc
    assert (second.doc["tests"]["failed"], second.doc["tests"]["passed"]) == (0, 3)

    # The caches (.cache/ in the workspace) and cargo's target/ are not changes.
    changes = experiments.inspect_changes(record.experiment_id)
    assert [c["path"] for c in changes["modified"]] == [path], changes
    assert changes["created"] == [] and changes["deleted"] == []
    cache = experiments.execute(record.experiment_id, ["ls", ".cache"])
    assert cache.doc["exit_code"] == 0 and cache.doc["stdout"].strip(), cache.doc


NODE_TEST = b"""const test = require('node:test');
const assert = require('node:assert');
test('adds', () => { assert.strictEqual(1 + 1, 2); });
test.describe('strings', () => {
  test.it('concat fails', () => { assert.strictEqual('a' + 'b', 'ba'); });
});
"""


@pytest.mark.parametrize("environment", ["node18", "node20"])
def test_node_s_own_runner_names_the_failing_test(
    environment: str, experiments: Experiments, state_dir: Path, tmp_path: Path
) -> None:
    if StateStore(state_dir).image(environment) is None:
        message = f"the {environment} environment is not recorded: pybox image build {environment}"
        if REQUIRE:
            pytest.fail(message)
        pytest.skip(message)
    project = tmp_path / "nodeproject"
    (project / "test").mkdir(parents=True)
    (project / "package.json").write_text('{"name": "p", "scripts": {"test": "node --test"}}\n')
    (project / ".npmrc").write_text("engine-strict=true\n")  # settings only: copied
    (project / "test" / "a.test.js").write_bytes(NODE_TEST)
    record = experiments.create(str(project), environment=environment, limits=LIMITS)
    # Node's recipes ask for no exec-able workspace: every writable place is noexec.
    options = mount_options(experiments, record.experiment_id)
    assert all("noexec" in options[path] for path in ("/pybox", "/tmp", "/dev/shm")), options
    copied = experiments.read_file(record.experiment_id, ".npmrc")
    assert copied == b"engine-strict=true\n"
    npm = experiments.execute(record.experiment_id, ["npm", "config", "get", "cache"])
    assert npm.doc["stdout"].strip() == "/pybox/work/.cache/npm", npm.doc
    job = experiments.run_tests(record.experiment_id)
    tests = job.doc["tests"]
    assert job.doc["argv"] == ["node", "--test"]
    assert (tests["runner"], tests["passed"], tests["failing"]) == (
        "node", 1, ["strings > concat fails"],
    ), job.doc  # fmt: skip
    version = experiments.execute(record.experiment_id, ["node", "--version"])
    assert version.doc["stdout"].startswith({"node18": "v18.", "node20": "v20."}[environment])
