"""`pybox verify --json` on the real engine: every hostile case is contained.

On Podman one case's mode is refused by design before anything is made, with
its known reason (docs/engines.md, "Egress on Podman"): the case passes on that
refusal, with no run; `.ci/run` checks the same."""

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

# The cases whose mode an engine refuses before anything is made, and what the
# refusal must name in their evidence: contained, with no run.
REFUSED = {
    "docker": {},
    "podman": {"egress_packages": "com.docker.network.bridge.inhibit_ipv4"},
}


def test_pybox_verify_contains_every_case(engine: Engine, cli_env: dict[str, str]) -> None:
    refused = REFUSED[engine.name]
    result = run_cli(["verify", "--json"], cli_env, timeout_s=300)
    record = json.loads(result.stdout)
    jsonschema.Draft202012Validator(SCHEMA).validate(record)
    assert record["engine"]["name"] == engine.name
    failed = {case["name"]: case["failures"] for case in record["cases"] if not case["passed"]}
    assert failed == {}, failed
    assert result.returncode == 0, result.stderr.decode()
    assert record["passed"] is True
    assert record["left_behind"] == []
    assert [case["name"] for case in record["cases"]] == [case.name for case in CASES]
    for case in record["cases"]:
        evidence: dict[str, str] = {}
        for fact in case["evidence"]:
            evidence[fact["source"]] = evidence.get(fact["source"], "") + " | " + fact["fact"]
        if case["name"] in refused:  # refused before anything was made: no run to check
            assert case["run_ids"] == [], case["name"]
            assert refused[case["name"]] in evidence.get("pybox", ""), evidence
            assert "engine" in evidence, evidence  # nothing of it listed
            continue
        assert case["run_ids"], case["name"]
        assert set(evidence) - {"program"}, f"{case['name']} rests on the program's word alone"
        for run_id in case["run_ids"]:
            assert engine.list_containers({LABEL_RUN_ID: run_id}) == []
    assert b"Traceback" not in result.stderr
