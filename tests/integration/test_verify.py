"""`pybox verify --json` on the real engine: every hostile case is contained.

On Podman exactly one case is refused, by design, with its known reason
(docs/engines.md, "Egress on Podman"); `.ci/run` checks the same."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema

from pybox._core.posture import LABEL_RUN_ID
from pybox._engine import Engine
from pybox._features.verify.suite import CASES
from tests.integration.conftest import run_cli

SCHEMA = json.loads(
    (Path(__file__).resolve().parents[2] / "docs" / "verify-json.schema.json").read_text()
)

# The cases an engine refuses, and what each of their failures must name.
REFUSED = {
    "docker": {},
    "podman": {"egress_packages": "com.docker.network.bridge.inhibit_ipv4"},
}
EXIT_NOT_CONTAINED = 1


def test_pybox_verify_contains_every_case(engine: Engine, cli_env: dict[str, str]) -> None:
    refused = REFUSED[engine.name]
    result = run_cli(["verify", "--json"], cli_env, timeout_s=300)
    record = json.loads(result.stdout)
    jsonschema.Draft202012Validator(SCHEMA).validate(record)
    assert record["engine"]["name"] == engine.name
    failed = {case["name"]: case["failures"] for case in record["cases"] if not case["passed"]}
    assert set(failed) == set(refused), failed
    for name, failures in failed.items():
        assert failures and all(refused[name] in failure for failure in failures), failures
    assert result.returncode == (EXIT_NOT_CONTAINED if refused else 0), result.stderr.decode()
    assert record["passed"] is (len(refused) == 0)
    assert record["left_behind"] == []
    assert [case["name"] for case in record["cases"]] == [case.name for case in CASES]
    for case in record["cases"]:
        if case["name"] in refused:  # refused before anything was made: no run to check
            assert case["run_ids"] == [], case["name"]
            continue
        assert case["run_ids"], case["name"]
        assert {fact["source"] for fact in case["evidence"]} - {"program"}, (
            f"{case['name']} rests on the program's word alone"
        )
        for run_id in case["run_ids"]:
            assert engine.list_containers({LABEL_RUN_ID: run_id}) == []
    assert b"Traceback" not in result.stderr
