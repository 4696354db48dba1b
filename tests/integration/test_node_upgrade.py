"""Can examples/node-upgrade move from Node 18 to Node 20? On the real engine, in
an experiment of the `node20` environment in `packages` mode: `npm install` fails on the
engine check, package.json is fixed with write_file, `npm install` passes,
`run_tests` names the two tests that Node 20's end of DEP0164 breaks, the code is
fixed, the tests pass, `inspect_changes` shows the two changes, the files are
kept, the experiment is destroyed and the project on the host is byte for byte
unchanged. The same steps through the official MCP SDK client over stdio; and
on `node18`, as a control (network `none`), the untouched project installs and
passes.

The registry is this machine's npm's (`npm config get registry`, read at test
time; no host name is written here), allowed through the operator config of the
test's own private state (`[egress]`: `allow_hosts`, and `private_addresses`
when this machine's resolver answers a non-global address for it). The library
has no dependencies, so `npm install` fetches nothing; `npm ping` proves the
box reaches the registry through pybox's proxy, and its receipt lists exactly
that host.

Skipped when the environments are not recorded (`pybox image build node20`),
unless CI requires them (PYBOX_REQUIRE_TOOLCHAINS=1)."""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from pybox._adapters.config import load_settings
from pybox._adapters.state import StateStore
from pybox._core.errors import EngineCannotApply
from pybox._core.experiment_settings import ExperimentSettings
from pybox._core.limits import MIB, LimitRequest, Policy
from pybox._engine import Engine
from pybox._features.experiments.service import Experiments
from pybox._orchestration.session import Session
from tests.integration.test_egress import non_global
from tests.integration.test_experiments import snapshot

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "node-upgrade"
LIMITS = LimitRequest(timeout_s=120, memory_bytes=512 * MIB)
REQUIRE = os.environ.get("PYBOX_REQUIRE_TOOLCHAINS") == "1"
NPM_INSTALL = ["npm", "install", "--no-audit", "--no-fund"]
BROKEN = ["a passing run exits 0", "a failing run exits 1"]
# The two changes of the upgrade (examples/node-upgrade/README.md).
ENGINES = ('"node": ">=18 <19"', '"node": ">=18"')
EXIT_CODE = ("process.exitCode = !summary.ok;", "process.exitCode = summary.ok ? 0 : 1;")


def fixed(path: str, change: tuple[str, str]) -> bytes:
    text = (EXAMPLE / path).read_text()
    assert text.count(change[0]) == 1, (path, change[0])
    return text.replace(*change).encode()


def require(state_dir: Path, *names: str) -> None:
    for name in names:
        if StateStore(state_dir).image(name) is None:
            message = f"the {name} environment is not recorded: pybox image build {name}"
            if REQUIRE:
                pytest.fail(message)
            pytest.skip(message)


def registry_host() -> str:
    """This machine's npm registry's host name, as its npm says (argv, no shell)."""
    npm = shutil.which("npm")
    if npm is None:
        message = "no npm on this machine: its registry cannot be read for packages mode"
        if REQUIRE:
            pytest.fail(message)
        pytest.skip(message)
    said = subprocess.run(
        [npm, "config", "get", "registry"], capture_output=True, text=True, timeout=60, check=True
    ).stdout.strip()
    host = urlsplit(said).hostname
    assert urlsplit(said).scheme == "https" and host, said
    return host


@pytest.fixture
def operator_config(tmp_path: Path) -> tuple[Path, str]:
    """The operator's config (in the test's private state) allowing packages mode
    to this machine's npm registry only; and that host."""
    host = registry_host()
    private = "true" if non_global((host,)) else "false"
    path = tmp_path / "operator" / "config.toml"
    path.parent.mkdir()
    path.write_text(
        '[egress]\nmodes = ["none", "packages"]\n'
        f'allow_hosts = ["{host}"]\nmachine_config = false\nprivate_addresses = {private}\n'
    )
    return path, host


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "projects" / "node-upgrade"
    shutil.copytree(EXAMPLE, root)
    return root


@pytest.fixture
def experiments(
    engine: Engine, state_dir: Path, project: Path, operator_config: tuple[Path, str]
) -> Iterator[Experiments]:
    settings = load_settings({"PYBOX_CONFIG": str(operator_config[0])})
    session = Session(engine, StateStore(state_dir), Policy(), egress_settings=settings.egress)
    service = Experiments(
        session,
        session.sandboxes(),
        ExperimentSettings(project_roots=(str(project.parent),)),
        events=io.StringIO(),
    )
    yield service
    for record in service.ledger.list():
        service.destroy(record.experiment_id)
    session.close()


# The upgrade needs egress `packages` (npm), which Podman cannot contain
# (docs/engines.md, "Egress on Podman"): there the proof is the refusal.
PACKAGES_ON_PODMAN = "egress packages is refused on Podman; the refusal is tested instead"


def test_the_upgrade_to_node_20_in_an_experiment(
    experiments: Experiments,
    project: Path,
    state_dir: Path,
    engine: Engine,
    engine_name: str,
    operator_config: tuple[Path, str],
) -> None:
    require(state_dir, "node20")
    before = snapshot(project)
    if engine_name == "podman":
        with pytest.raises(EngineCannotApply, match="inhibit_ipv4") as cannot:
            experiments.create(str(project), environment="node20", limits=LIMITS, egress="packages")
        assert "egress 'packages' needs Docker" in str(cannot.value)
        assert experiments.ledger.list() == []  # none left but destroyed ones
        assert snapshot(project) == before
        return
    record = experiments.create(
        str(project), environment="node20", limits=LIMITS, egress="packages"
    )
    experiment_id = record.experiment_id
    assert (record.doc["environment"], record.doc["egress"]) == ("node20", "packages")
    node = experiments.execute(experiment_id, ["node", "--version"])
    assert node.doc["stdout"].startswith("v20."), node.doc

    refused = experiments.execute(experiment_id, NPM_INSTALL)
    assert (refused.state, refused.doc["exit_code"]) == ("failed", 1), refused.doc
    assert "EBADENGINE" in refused.doc["stderr"] and ">=18 <19" in refused.doc["stderr"]

    experiments.write_file(experiment_id, "package.json", fixed("package.json", ENGINES))
    installed = experiments.execute(experiment_id, NPM_INSTALL)
    assert (installed.state, installed.doc["exit_code"]) == ("completed", 0), installed.doc
    # The registry, through pybox's proxy: the receipt lists exactly its host.
    ping = experiments.execute(experiment_id, ["npm", "ping"])
    assert ping.doc["exit_code"] == 0, ping.doc
    run = experiments.session.store().get_run(ping.doc["run_id"])
    assert run is not None and run.receipt is not None
    seen = run.receipt["observed_by_pybox"]["egress"]
    assert run.receipt["configured"]["network"] == "packages"
    assert [h["host"] for h in seen["hosts"]] == [operator_config[1]], seen

    failing = experiments.run_tests(experiment_id)
    tests = failing.doc["tests"]
    assert failing.doc["argv"] == ["node", "--test"], failing.doc
    assert (tests["runner"], tests["parsed"], tests["passed"]) == ("node", True, 1), tests
    assert tests["failing"] == BROKEN, tests
    assert "ERR_INVALID_ARG_TYPE" in failing.doc["stdout"]

    code = fixed("lib/status.js", EXIT_CODE)
    experiments.write_file(experiment_id, "lib/status.js", code)
    passing = experiments.run_tests(experiment_id)
    assert passing.state == "completed", passing.doc
    assert (passing.doc["tests"]["passed"], passing.doc["tests"]["failed"]) == (3, 0)

    changes = experiments.inspect_changes(experiment_id)
    assert sorted(c["path"] for c in changes["modified"]) == ["lib/status.js", "package.json"]
    assert changes["created"] == [] and changes["deleted"] == [], changes  # no lock file
    diff = changes["diff"].splitlines()
    added = {line[1:].strip() for line in diff if line.startswith("+") and line[:3] != "+++"}
    removed = {line[1:].strip() for line in diff if line.startswith("-") and line[:3] != "---"}
    assert (added, removed) == ({ENGINES[1], EXIT_CODE[1]}, {ENGINES[0], EXIT_CODE[0]}), diff

    kept = experiments.collect_artifacts(experiment_id, ["package.json", "lib/status.js"])
    wanted = {"package.json": fixed("package.json", ENGINES), "lib/status.js": code}
    for item in kept:
        data = wanted[item["path"]]
        assert item["sha256"] == hashlib.sha256(data).hexdigest()
        assert Path(item["stored_as"]).read_bytes() == data

    final, was_live = experiments.destroy(experiment_id)
    assert was_live and final["state"] == "destroyed"
    assert engine.inspect_container(f"pybox-{final['sandbox_id']}") is None
    assert snapshot(project) == before


def test_on_node_18_the_project_installs_and_passes_as_it_is(
    experiments: Experiments, project: Path, state_dir: Path
) -> None:
    require(state_dir, "node18")
    record = experiments.create(str(project), environment="node18", limits=LIMITS)
    assert record.doc["egress"] == "none"
    installed = experiments.execute(record.experiment_id, NPM_INSTALL)
    assert installed.doc["exit_code"] == 0, installed.doc
    tests = experiments.run_tests(record.experiment_id).doc["tests"]
    assert (tests["passed"], tests["failed"], tests["failing"]) == (3, 0, []), tests
    assert experiments.inspect_changes(record.experiment_id)["stats"]["total"] == 0


def test_the_upgrade_through_the_mcp_sdk_client(
    project: Path,
    state_dir: Path,
    engine: Engine,
    engine_name: str,
    operator_config: tuple[Path, str],
) -> None:
    require(state_dir, "node20")
    if engine_name == "podman":
        pytest.skip(PACKAGES_ON_PODMAN)
    anyio = pytest.importorskip("anyio")
    client_module = pytest.importorskip("mcp.client")
    from mcp.client.stdio import StdioServerParameters

    from tests.integration.test_mcp import server_env

    before = snapshot(project)
    server = StdioServerParameters(
        command=sys.executable,
        args=["-m", "pybox", "mcp", "--project-root", str(project.parent)],
        env=server_env(state_dir, engine_name) | {"PYBOX_CONFIG": str(operator_config[0])},
    )

    async def call(
        client: Any, tool: str, args: dict[str, Any], *, fails: bool = False
    ) -> dict[str, Any]:
        result = await client.call_tool(tool, args)
        assert result.is_error is fails, (tool, result)  # a failed command is an error result
        assert result.structured_content is not None, (tool, result)
        structure: dict[str, Any] = result.structured_content
        return structure

    async def steps(client: Any, experiment_id: str) -> dict[str, Any]:
        run = {"experiment_id": experiment_id, "argv": NPM_INSTALL}
        refused = await call(client, "execute_experiment", run, fails=True)
        assert refused["exit_code"] == 1 and "EBADENGINE" in refused["stderr"], refused
        content = fixed("package.json", ENGINES).decode()
        args = {"experiment_id": experiment_id, "path": "package.json", "content": content}
        await call(client, "write_sandbox_file", args)
        installed = await call(client, "execute_experiment", run)
        assert installed["exit_code"] == 0, installed
        ping = {"experiment_id": experiment_id, "argv": ["npm", "ping"]}
        assert (await call(client, "execute_experiment", ping))["exit_code"] == 0
        failing = await call(client, "run_tests", {"experiment_id": experiment_id}, fails=True)
        assert failing["tests"]["failing"] == BROKEN, failing
        content = fixed("lib/status.js", EXIT_CODE).decode()
        args = {"experiment_id": experiment_id, "path": "lib/status.js", "content": content}
        await call(client, "write_sandbox_file", args)
        passing = await call(client, "run_tests", {"experiment_id": experiment_id})
        assert (passing["tests"]["passed"], passing["tests"]["failed"]) == (3, 0), passing
        changes = await call(client, "inspect_changes", {"experiment_id": experiment_id})
        paths = ["package.json", "lib/status.js"]
        kept = await call(
            client, "collect_artifacts", {"experiment_id": experiment_id, "paths": paths}
        )
        return {"changes": changes, "kept": kept}

    async def main() -> dict[str, Any]:
        async with client_module.Client(server) as client:
            asked = {
                "project": str(project),
                "environment": "node20",
                "limits": {"timeout_s": 120},
                "egress": "packages",
            }
            created = await client.call_tool("create_experiment", asked)
            assert created.is_error is False, created
            words = created.content[0].text
            assert "reaches the operator's package registries only" in words, words
            experiment_id = created.structured_content["experiment_id"]
            try:
                done = await steps(client, experiment_id)
            finally:  # a sandbox outlives the server: never leave it behind
                args = {"experiment_id": experiment_id}
                final = await call(client, "destroy_experiment", args)
            return done | {"final": final}

    outcome = anyio.run(main)
    modified = sorted(c["path"] for c in outcome["changes"]["modified"])
    assert modified == ["lib/status.js", "package.json"], outcome["changes"]
    assert outcome["changes"]["created"] == [] and outcome["changes"]["deleted"] == []
    assert outcome["final"]["state"] == "destroyed"
    assert engine.inspect_container(f"pybox-{outcome['final']['sandbox_id']}") is None
    assert snapshot(project) == before
    assert outcome["kept"], outcome["kept"]
