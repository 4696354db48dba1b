"""The receipt's JSON shape is a contract: pinned keys, and the shipped schema."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from referencing import Registry, Resource

from pybox._core.limits import LimitRequest
from pybox._core.request import RunRequest
from pybox._frontends.cli._exec import exec_json as _exec_json
from pybox._orchestration.session import Session
from tests.unit.fake_engine import FakeEngine, Script

DOCS = Path(__file__).resolve().parents[2] / "docs"
RECEIPT_SCHEMA = json.loads((DOCS / "receipt.schema.json").read_text())
EXEC_SCHEMA = json.loads((DOCS / "exec-json.schema.json").read_text())

# Changing any of these is a new receipt_version.
PINNED = {
    "": [
        "receipt_version",
        "run_id",
        "status",
        "exit_code",
        "cause",
        "configured",
        "observed_by_engine",
        "observed_by_kernel",
        "observed_by_pybox",
        "reported_by_program",
        "unknown",
    ],
    "cause": ["summary", "known", "evidence"],
    "configured": [
        "pybox_version",
        "engine",
        "runtime",
        "image",
        "limits",
        "network",
        "user",
        "confinement",
        "writable_paths",
        "input_dir",
        "output_dir",
        "code",
        "inputs",
        "collect_outputs",
        "libraries",
        "isolation",
        "preload",
        "executable_paths",
        "program",
    ],
    "configured.program": ["kind", "interpreter_argv"],
    "configured.isolation": [
        "lane",
        "engine_runtime",
        "engine_runtime_args",
        "chosen_by",
        "shares_host_kernel",
        "system_calls",
        "limits_applied",
    ],
    "configured.engine": ["endpoint", "api_version", "server_version", "name"],
    "configured.confinement": [
        "seccomp_profile",
        "seccomp_profile_sha256",
        "apparmor_profile",
        "apparmor",
    ],
    "configured.image": ["name", "id", "recipe_hash", "digest"],
    "configured.limits": [
        "timeout_s",
        "memory_bytes",
        "cpus",
        "pids",
        "open_files",
        "writable_bytes",
        "output_bytes",
        "output_files",
        "output_files_bytes",
        "input_bytes",
    ],
    "configured.code": ["name", "size_bytes", "sha256"],
    "observed_by_engine": [
        "container_id",
        "container_name",
        "posture_verified",
        "posture_fields_checked",
        "posture_mismatches",
        "state",
        "exit_code",
        "oom_killed",
        "created_at",
        "started_at",
        "finished_at",
        "removal_confirmed",
    ],
    "observed_by_kernel": [
        "cgroup_version",
        "samples",
        "sample_interval_s",
        "memory_limit_bytes",
        "memory_peak_bytes",
        "memory_peak_source",
        "memory_limit_hits",
        "oom_kill_count",
        "pids_limit",
        "pids_peak",
        "pids_peak_source",
        "pids_limit_hits",
        "cpu_quota_cpus",
        "cpu_usage_s",
        "cpu_periods",
        "cpu_throttled_periods",
        "cpu_throttled_s",
        "counters_since",
        "peaks_include_idle_wait",
        "scope",
    ],
    "observed_by_pybox": [
        "started_at",
        "create_s",
        "verify_s",
        "start_s",
        "code_sent_s",
        "program_ended_s",
        "removed_s",
        "run_duration_s",
        "deadline_kill",
        "cancelled",
        "leftovers_swept",
        "box_source",
        "box_created_at",
        "box_waited_s",
        "pool_service",
        "egress",
        "box_kept",
    ],
    "observed_by_pybox.egress": ["mode", "hosts", "refused", "refused_names"],
    "reported_by_program": [
        "exit_code",
        "backstop_fired",
        "stdout",
        "stderr",
        "output_files",
        "output_files_skipped",
        "preload",
        "workspace_full_bytes",
    ],
    "reported_by_program.stdout": ["bytes_total", "bytes_kept", "truncated", "sha256"],
}


def _at(document: dict[str, Any], dotted: str) -> dict[str, Any]:
    value: Any = document
    for key in filter(None, dotted.split(".")):
        value = value[key]
    assert isinstance(value, dict)
    return value


def _validator(schema: dict[str, Any]) -> jsonschema.Draft202012Validator:
    registry: Registry[Any] = Registry().with_resource(
        "receipt.schema.json", Resource.from_contents(RECEIPT_SCHEMA)
    )
    return jsonschema.Draft202012Validator(schema, registry=registry)


SCRIPTS = {
    "succeeded": Script(stdout=b"42\n"),
    "failed": Script(stderr=b"boom", exit_code=2),
    "timed_out": Script(hang=True),
    "out_of_memory": Script(vanish=True, exit_code=137, oom_killed=True),
    "sandbox_error": Script(bootstrap_error="EOFError"),
    "files": Script(files=[("a/b.txt", b"x")]),
}


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_real_receipts_match_the_pinned_keys_and_the_schema(
    name: str, session: Session, engine: FakeEngine, tmp_path: Path
) -> None:
    engine.script = SCRIPTS[name]
    outcome = session.run(
        RunRequest(
            code=b"print(1)", collect_outputs=name == "files", limits=LimitRequest(timeout_s=0.2)
        ),
        files_dir=tmp_path if name == "files" else None,
    )
    receipt = outcome.receipt.to_dict()
    json.dumps(receipt)  # plain JSON types only
    for where, keys in PINNED.items():
        assert list(_at(receipt, where)) == keys, where
    _validator(RECEIPT_SCHEMA).validate(receipt)
    _validator(EXEC_SCHEMA).validate(_exec_json(outcome, tmp_path if name == "files" else None))


def test_schema_requires_exactly_the_pinned_keys() -> None:
    def schema_at(dotted: str) -> dict[str, Any]:
        node: dict[str, Any] = RECEIPT_SCHEMA
        for key in filter(None, dotted.split(".")):
            node = node["properties"][key]
            if "$ref" in node:
                node = RECEIPT_SCHEMA["$defs"][node["$ref"].rsplit("/", 1)[1]]
        return node

    for where, keys in PINNED.items():
        node = schema_at(where)
        assert sorted(node["required"]) == sorted(keys), where
        assert node.get("additionalProperties") is False, where


def test_receipt_version_is_two() -> None:
    assert RECEIPT_SCHEMA["properties"]["receipt_version"]["const"] == 2
