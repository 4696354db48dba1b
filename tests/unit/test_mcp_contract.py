"""The MCP tools' contract: names, result fields, limit keys and `env`, without an engine.

The contract other sandboxes' agents expect: `start_run` answers with `run_id`,
`status: "running"` and the effective `limits`; `get_result(run_id)` (alias
`get_run`) and `stop_run(run_id)`; every finished result carries `stdout`,
`stderr`, `exit_code`, `success` and `timed_out` beside pybox's own fields.
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest

from pybox._adapters.state import StateStore
from pybox._core.errors import EngineUnavailable, InvalidRequest, PyboxError
from pybox._core.limit_surfaces import canonical_limit_keys
from pybox._core.limits import MIB, LimitRequest, Policy
from pybox._core.pool import PoolSettings
from pybox._core.request import RunRequest
from pybox._frontends.mcp._runargs import run_request
from pybox._orchestration.session import Session
from tests.unit.conftest import OWNER, make_session
from tests.unit.fake_engine import FakeEngine, Script
from tests.unit.mcp_harness import Peer

COMMON = {"stdout", "stderr", "exit_code", "success", "timed_out"}


@pytest.fixture
def peer(engine: FakeEngine, state: StateStore) -> Peer:
    policy = Policy().with_settings({}, {"memory_mib": 256, "timeout_s": 60}, "test")
    return Peer(make_session(engine, state, policy))


def tools(peer: Peer) -> dict[str, dict[str, Any]]:
    return {t["name"]: t for t in peer.request("tools/list")["result"]["tools"]}


def structured(peer: Peer, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    result = peer.call(tool, arguments)["result"]
    content: dict[str, Any] = result["structuredContent"]
    jsonschema.validate(content, tools(peer)[tool]["outputSchema"])
    return content


def error_text(peer: Peer, tool: str, arguments: dict[str, Any]) -> str:
    result = peer.call(tool, arguments)["result"]
    assert result["isError"] is True, result
    assert "structuredContent" not in result
    text: str = result["content"][0]["text"]
    return text


# -- names ---------------------------------------------------------------------------------


def test_get_result_is_listed_and_get_run_stays_as_its_alias(peer: Peer) -> None:
    listed = tools(peer)
    runs = {"run_python", "start_run", "get_result", "get_run", "stop_run"}
    # The sandboxes group keeps the names agents know from Hyperbox.
    sandboxes = {
        "create_sandbox",
        "run",
        "exec",
        "read_sandbox_file",
        "write_sandbox_file",
        "list_sandbox_files",
        "destroy_sandbox",
        "list_sandboxes",
    }
    # The experiments group keeps the names agents know from Sandbox MCP (its
    # read/write_sandbox_file are the sandboxes group's, offered by both).
    experiments = {
        "create_experiment", "execute_experiment", "run_tests", "inspect_changes",
        "collect_artifacts", "get_experiment", "list_experiments", "get_job_status",
        "get_job_result", "cancel_job", "destroy_experiment", "compare_experiments",
        "check_sandbox_runtime",
    }  # fmt: skip
    assert set(listed) == runs | sandboxes | experiments
    get_result, get_run = listed["get_result"], listed["get_run"]
    assert get_result["inputSchema"] == get_run["inputSchema"]
    assert get_result["inputSchema"]["required"] == ["run_id"]
    assert get_result["annotations"]["readOnlyHint"] is True
    assert "same as get_result" in get_run["description"]
    assert listed["stop_run"]["inputSchema"]["required"] == ["run_id"]


def test_start_run_answers_with_run_id_status_and_effective_limits(
    peer: Peer, engine: FakeEngine
) -> None:
    engine.script = Script(hang=True)
    started = structured(peer, "start_run", {"code": "", "limits": {"cpus": 0.5}})
    assert started["status"] == "running" and started["state"] == "running"
    assert isinstance(started["run_id"], str)
    limits = started["limits"]
    assert limits["memory_mib"] == 256 and limits["timeout_s"] == 30.0  # defaults
    assert limits["cpus"] == 0.5 and limits["pids"] == 128  # asked for, and a default
    assert isinstance(limits["memory_mib"], int)
    stopped = structured(peer, "stop_run", {"run_id": started["run_id"]})
    assert stopped["status"] == "stopped" and stopped["limits"] == limits
    assert not engine.containers


@pytest.mark.parametrize("tool", ["get_result", "get_run"])
def test_get_result_of_a_finished_run_has_the_common_fields(
    peer: Peer, engine: FakeEngine, tool: str
) -> None:
    engine.script = Script(stdout=b"42\n", stderr=b"note\n")
    run_id = structured(peer, "start_run", {"code": "print(6*7)"})["run_id"]
    done = structured(peer, tool, {"run_id": run_id, "wait_s": 10})
    assert done["state"] == "finished"
    assert {key: done[key] for key in COMMON} == {
        "stdout": "42\n",
        "stderr": "note\n",
        "exit_code": 0,
        "success": True,
        "timed_out": False,
    }
    assert done["status"] == "succeeded" and done["receipt"]["run_id"]


# -- one run id ------------------------------------------------------------------------------


def test_the_receipt_the_registry_and_every_result_use_one_run_id(
    peer: Peer, engine: FakeEngine
) -> None:
    engine.script = Script(stdout=b"ok\n", files=[("out.txt", b"x")])
    result = peer.call("run_python", {"code": "", "return_files": True})["result"]
    done = result["structuredContent"]
    run_id = done["run_id"]
    assert done["receipt"]["run_id"] == run_id
    assert [run.run_id for run in peer.dispatcher.toolbox.registry.recent()] == [run_id]
    assert done["resource_uri"] == f"pybox://runs/{run_id}"
    assert done["stdout_uri"] == f"pybox://runs/{run_id}/stdout"
    assert done["files"][0]["uri"] == f"pybox://runs/{run_id}/files/out.txt"
    text = result["content"][0]["text"]
    assert text.startswith(f"run_id {run_id}\n") and f"(run {run_id})" in text
    engine.script = Script(hang=True)
    started = structured(peer, "start_run", {"code": ""})
    stopped = structured(peer, "stop_run", {"run_id": started["run_id"]})
    assert stopped["receipt"]["run_id"] == started["run_id"]
    listed = peer.request("resources/list")["result"]["resources"]
    assert {f"pybox://runs/{started['run_id']}", f"pybox://runs/{run_id}"} <= {
        r["uri"] for r in listed
    }


def test_a_run_is_prepared_once(peer: Peer, engine: FakeEngine, monkeypatch: Any) -> None:
    session = peer.dispatcher.toolbox.session
    calls: list[str] = []
    for name in ("prepare", "resolve"):
        original = getattr(session, name)

        def counted(*args: Any, _name: str = name, _original: Any = original) -> Any:
            calls.append(_name)
            return _original(*args)

        monkeypatch.setattr(session, name, counted)
    structured(peer, "run_python", {"code": "", "limits": {"memory_mib": 64}})
    assert calls == ["prepare", "resolve"]  # the limits resolved once, by prepare


def test_a_prepared_run_starts_once(peer: Peer, engine: FakeEngine) -> None:
    session = peer.dispatcher.toolbox.session
    registry = peer.dispatcher.toolbox.registry
    prepared = session.prepare(RunRequest(code=b""))
    run = registry.start(prepared)
    with pytest.raises(PyboxError, match="started already"):
        registry.start(prepared)
    assert run.wait(10) and run.outcome is not None
    assert run.outcome.receipt.run_id == prepared.run_id == run.run_id


def test_a_limit_above_its_ceiling_registers_no_run(peer: Peer, engine: FakeEngine) -> None:
    text = error_text(peer, "start_run", {"code": "", "limits": {"memory_mib": 512}})
    assert "512 MiB" in text and "256 MiB" in text
    assert peer.dispatcher.toolbox.registry.recent() == [] and not engine.calls


def test_run_python_results_carry_the_common_fields(peer: Peer, engine: FakeEngine) -> None:
    engine.script = Script(stderr=b"boom\n", exit_code=3)
    failed = structured(peer, "run_python", {"code": "raise SystemExit(3)"})
    assert failed["exit_code"] == 3 and failed["success"] is False
    assert failed["timed_out"] is False and failed["stderr"] == "boom\n"
    engine.script = Script(hang=True)
    late = structured(peer, "run_python", {"code": "", "limits": {"timeout_ms": 300}})
    assert late["status"] == "timed_out"
    assert late["timed_out"] is True and late["success"] is False and late["exit_code"] is None
    assert late["limits"]["timeout_s"] == 0.3  # timeout_ms, read in milliseconds


def test_a_run_pybox_could_not_start_still_has_the_common_fields(
    peer: Peer, engine: FakeEngine
) -> None:
    engine.fail["create"] = EngineUnavailable("the engine went away")
    result = peer.call("run_python", {"code": "print(1)"})["result"]
    assert result["isError"] is True
    content = result["structuredContent"]
    jsonschema.validate(content, tools(peer)["run_python"]["outputSchema"])
    assert content["status"] == "error" and content["success"] is False
    assert set(content) >= COMMON


def test_the_output_schema_requires_the_common_fields_once_finished(peer: Peer) -> None:
    schema = tools(peer)["get_result"]["outputSchema"]
    base = {
        "run_id": "r",
        "status": "running",
        "elapsed_s": 0.0,
        "timeout_s": 1.0,
        "limits": structured_limits(),
        "resource_uri": "pybox://runs/r",
    }
    jsonschema.validate({**base, "state": "running"}, schema)
    with pytest.raises(jsonschema.ValidationError, match="success"):
        jsonschema.validate(
            {**base, "state": "finished", "status": "succeeded", "stdout": "", "stderr": ""}
            | {"exit_code": 0, "timed_out": False},
            schema,
        )


def structured_limits() -> dict[str, Any]:
    return {
        "timeout_s": 1.0,
        "memory_mib": 16,
        "cpus": 1.0,
        "pids": 8,
        "open_files": 32,
        "writable_mib": 1,
        "output_kib": 1,
        "output_files": 0,
        "output_files_mib": 0,
        "input_mib": 1,
    }


# -- limit keys from other sandboxes --------------------------------------------------------


def test_exact_unit_synonyms_are_converted(peer: Peer, engine: FakeEngine) -> None:
    engine.script = Script(hang=True)
    started = structured(
        peer,
        "start_run",
        {"code": "", "limits": {"timeout_seconds": 12, "memory_bytes": 128 * MIB}},
    )
    assert started["limits"]["timeout_s"] == 12 and started["limits"]["memory_mib"] == 128
    peer.call("stop_run", {"run_id": started["run_id"]})
    assert not engine.containers


@pytest.mark.parametrize(
    ("key", "right"),
    [
        ("memory_mb", "'memory_mib'"),
        ("memory", "'memory_mib'"),
        ("memory_gb", "'memory_mib'"),
        ("timeout", "'timeout_s'"),
        ("cpu", "'cpus'"),
        ("max_processes", "'pids'"),
    ],
)
def test_ambiguous_keys_are_refused_naming_the_right_key(
    peer: Peer, engine: FakeEngine, key: str, right: str
) -> None:
    text = error_text(peer, "run_python", {"code": "", "limits": {key: 100}})
    assert f"{key!r} is not a pybox limit" in text and f"Use {right}" in text
    assert not engine.calls  # nothing was created


def test_a_synonym_beside_its_key_is_an_error(peer: Peer, engine: FakeEngine) -> None:
    text = error_text(
        peer, "run_python", {"code": "", "limits": {"timeout_s": 5, "timeout_ms": 5000}}
    )
    assert "'timeout_s' and 'timeout_ms' both set timeout_s" in text
    text = error_text(
        peer, "run_python", {"code": "", "limits": {"timeout_ms": 5000, "timeout_seconds": 5}}
    )
    assert "both set timeout_s" in text
    assert not engine.calls


def test_a_synonym_that_does_not_convert_exactly_is_refused(peer: Peer) -> None:
    text = error_text(peer, "run_python", {"code": "", "limits": {"memory_bytes": 100_000_000}})
    assert "not a whole number of MiB" in text and "'memory_mib'" in text


def test_a_refused_synonym_is_a_protocol_error_for_older_clients(peer: Peer) -> None:
    peer.initialize("2025-06-18")
    response = peer.call("run_python", {"code": "", "limits": {"memory_mb": 64}}, modern=False)
    assert response["error"]["code"] == -32602
    assert "memory_mib" in response["error"]["message"]


def test_accepted_synonyms_are_in_the_input_schema_and_refused_ones_are_not(peer: Peer) -> None:
    limits = tools(peer)["run_python"]["inputSchema"]["properties"]["limits"]["properties"]
    assert {"timeout_ms", "timeout_seconds", "memory_bytes"} <= set(limits)
    assert not {"memory_mb", "timeout", "memory", "cpu"} & set(limits)
    assert "prefer timeout_s" in limits["timeout_ms"]["description"]


def test_canonical_limit_keys_leaves_pybox_keys_and_unknown_keys_alone() -> None:
    raw = {"memory_mib": 64, "timeout_ms": 2500, "bogus": 1}
    assert canonical_limit_keys(raw, "x") == {"memory_mib": 64, "timeout_s": 2.5, "bogus": 1}
    with pytest.raises(InvalidRequest, match="x: 'memory_mb'"):
        canonical_limit_keys({"memory_mb": 1}, "x")


# -- env ----------------------------------------------------------------------------------------


def test_env_reaches_the_run_request() -> None:
    request = run_request("run_python", {"code": "", "env": {"MODE": "fast", "N": "3"}})
    assert request.env == (("MODE", "fast"), ("N", "3"))
    assert run_request("run_python", {"code": ""}).env == ()


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        (["A=1"], "env must be an object"),
        ({"A": 1}, "env['A'] must be a string"),
        ({"1A": "x"}, "env name '1A' is not usable"),
        ({"A=B": "x"}, "env name 'A=B' is not usable"),
        ({"A": "x\x00y"}, "NUL"),
    ],
)
def test_bad_env_is_refused(peer: Peer, engine: FakeEngine, env: Any, expected: str) -> None:
    assert expected in error_text(peer, "start_run", {"code": "", "env": env})
    assert not engine.calls


def test_env_is_in_the_input_schema(peer: Peer) -> None:
    schema = tools(peer)["start_run"]["inputSchema"]
    jsonschema.validate({"code": "", "env": {"MODE": "fast"}}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"code": "", "env": {"MODE": 1}}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"code": "", "env": {"BAD-NAME": "x"}}, schema)


def test_the_files_argument_says_they_are_read_by_plain_name(peer: Peer) -> None:
    # Agents of other sandboxes open("data.csv") and import helper: the schema says it works.
    for tool in ("run_python", "start_run"):
        text = tools(peer)[tool]["inputSchema"]["properties"]["files"]["description"]
        assert "open('data.csv')" in text and "import helper" in text


# -- the sweep the server made at start -----------------------------------------------------------


def test_runs_report_the_sweep_the_server_made_at_start(
    engine: FakeEngine, state: StateStore
) -> None:
    # A box left behind by a controller that died (its removal failed: engine "down").
    dead = Session(
        engine,
        state,
        Policy(),
        owner="testhost:99:99",
        sampler_factory=lambda container_id: None,
        is_owner_alive=lambda owner: owner == OWNER,
    )
    engine.script = Script(hang=True)
    engine.fail["remove"] = EngineUnavailable("down")
    dead.run(RunRequest(code=b"", limits=LimitRequest(timeout_s=0.1)))
    del engine.fail["remove"]
    assert len(engine.containers) == 1
    engine.script = Script(stdout=b"ok")
    server = Session(
        engine,
        state,
        Policy(),
        owner=OWNER,
        sampler_factory=lambda container_id: None,
        is_owner_alive=lambda owner: owner == OWNER,
        pool=PoolSettings(boxes_per_profile=1),
    )
    try:
        assert server.warm_up(wait_s=5.0)  # what `pybox mcp` does at start: sweeps first
        peer = Peer(server)
        for _ in range(2):
            receipt = structured(peer, "run_python", {"code": "print(1)"})["receipt"]
            assert receipt["observed_by_pybox"]["leftovers_swept"] == 1
    finally:
        server.close()
    assert engine.containers == {}


def test_the_capabilities_list_the_synonyms(peer: Peer) -> None:
    read = peer.request("resources/read", {"uri": "pybox://capabilities"})["result"]
    synonyms = json.loads(read["contents"][0]["text"])["limits"]["synonyms"]
    assert synonyms["timeout_ms"] == {
        "pybox_key": "timeout_s",
        "accepted": True,
        "note": "milliseconds",
    }
    assert synonyms["memory_mb"]["accepted"] is False
    assert synonyms["memory_mb"]["pybox_key"] == "memory_mib"
