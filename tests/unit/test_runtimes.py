"""The isolation lanes: the operator's choice, refusals, the limit mapping, the
posture and the receipt under gVisor, and doctor's look at the engine's runtimes."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from pybox._adapters.config import load_settings
from pybox._adapters.state import StateStore
from pybox._core.errors import ConfigError, EgressRefused, RuntimeNotAllowed, RuntimeUnavailable
from pybox._core.limits import BUILTIN_DEFAULTS, Policy
from pybox._core.request import RunRequest
from pybox._core.runtime_limits import (
    GVISOR_HOST_THREADS_BASE,
    GVISOR_HOST_THREADS_PER_PROCESS,
    applied_limits,
    engine_pids_limit,
    ulimits,
)
from pybox._core.runtimes import (
    GVISOR,
    RUNC,
    RuntimeChoice,
    RuntimePolicy,
    daemon_config_snippet,
    engine_runtimes,
    policy_from_settings,
    refuse_egress_without_network,
)
from pybox._orchestration.runtime_doctor import gvisor_report
from pybox._orchestration.session import Session
from tests.unit.conftest import OWNER
from tests.unit.fake_engine import FakeEngine, Script
from tests.unit.seal_helpers import create_body
from tests.unit.test_posture import SPEC

RUNSC = {"path": "/usr/bin/runsc", "runtimeArgs": ["--platform=ptrace", "--network=none"]}


def gvisor_session(engine: FakeEngine, state: StateStore, policy: RuntimePolicy) -> Session:
    return Session(
        engine,
        state,
        Policy(),
        owner=OWNER,
        sampler_factory=lambda container_id: None,
        is_owner_alive=lambda owner: owner == OWNER,
        runtimes=policy,
    )


def test_the_default_policy_runs_runc_and_allows_both() -> None:
    policy = RuntimePolicy()
    assert policy.choose(None).lane == RUNC
    assert policy.choose(None).engine_runtime == "runc"
    assert policy.choose("gvisor").engine_runtime == "runsc"
    assert policy.choose("gvisor").chosen_by == "the run's request"


def test_a_lane_not_allowed_is_refused_never_moved() -> None:
    only = policy_from_settings(RuntimePolicy(), None, ["gvisor"], None, "test.toml")
    assert only.default == GVISOR  # the only one allowed is the default
    with pytest.raises(RuntimeNotAllowed, match=r"'runc' is not allowed .*test.toml.*gvisor"):
        only.choose("runc")
    with pytest.raises(RuntimeNotAllowed, match="'kata' is not one pybox knows"):
        only.choose("kata")


def test_bad_runtime_settings_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="not 'kata'"):
        policy_from_settings(RuntimePolicy(), "kata", None, None, "f")
    with pytest.raises(ConfigError, match="default runtime 'runc' is not among"):
        RuntimePolicy(default=RUNC, allowed=(GVISOR,), source="f")
    with pytest.raises(ConfigError, match="engine_runtime"):
        policy_from_settings(RuntimePolicy(), None, None, "run sc; rm", "f")


def test_runtime_settings_from_file_and_environment(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text(
        'runtime = "gvisor"\nallowed_runtimes = ["gvisor", "runc"]\n'
        '[gvisor]\nengine_runtime = "runsc-ptrace"\n'
    )
    # No preview gate any more: the file's choice stands (PYBOX_GVISOR_PREVIEW is
    # not read), and by default a run may ask for either lane.
    plain = load_settings({"PYBOX_STATE_DIR": str(tmp_path)})
    assert plain.runtimes.default == "runc"
    assert plain.runtimes.allowed == ("runc", "gvisor")
    runc = load_settings({"PYBOX_STATE_DIR": str(tmp_path), "PYBOX_ALLOWED_RUNTIMES": "runc"})
    assert runc.runtimes.allowed == ("runc",)
    preview = {"PYBOX_STATE_DIR": str(tmp_path)}
    settings = load_settings(preview, str(config))
    assert settings.runtimes.default == GVISOR
    assert settings.runtimes.engine_runtime(GVISOR) == "runsc-ptrace"
    env = {**preview, "PYBOX_ALLOWED_RUNTIMES": "gvisor"}
    settings = load_settings(env, str(config))
    assert settings.runtimes.allowed == (GVISOR,)
    config.write_text('[gvisor]\nplatform = "kvm"\n')
    with pytest.raises(ConfigError, match=r"unknown \[gvisor\] setting platform"):
        load_settings({"PYBOX_STATE_DIR": str(tmp_path)}, str(config))


def test_each_limit_is_mapped_for_gvisor() -> None:
    limits = BUILTIN_DEFAULTS
    assert engine_pids_limit(RUNC, limits) == limits.pids
    assert engine_pids_limit(GVISOR, limits) == (
        GVISOR_HOST_THREADS_BASE + GVISOR_HOST_THREADS_PER_PROCESS * limits.pids
    )
    assert {"Name": "nproc", "Soft": limits.pids, "Hard": limits.pids} in ulimits(GVISOR, limits)
    assert all(u["Name"] != "nproc" for u in ulimits(RUNC, limits))
    every = {"timeout_s", "memory_bytes", "cpus", "pids", "open_files", "writable_bytes"}
    for lane in (RUNC, GVISOR):
        applied = {a.limit: a for a in applied_limits(lane, limits)}
        assert every <= set(applied)
    gvisor = {a.limit: a for a in applied_limits(GVISOR, limits)}
    assert "Sentry" in gvisor["pids"].enforced_by and "nproc" in gvisor["pids"].engine
    assert "whole sandbox" in gvisor["memory_bytes"].engine


def test_gvisor_posture_and_receipt(tmp_path: Path, state: StateStore) -> None:
    engine = FakeEngine()
    engine.runtimes["runsc"] = RUNSC
    engine.script = Script(stdout=b"42\n", exit_code=0)
    session = gvisor_session(engine, state, RuntimePolicy(default=GVISOR))
    prepared = session.prepare(RunRequest(code=b"print(6*7)\n"))
    assert prepared.runtime.engine_runtime == "runsc"
    assert prepared.runtime.engine_runtime_args == ("--platform=ptrace", "--network=none")
    receipt = session.run(prepared).receipt
    assert receipt.observed_by_engine.posture_verified
    assert engine.containers == {}  # removed, confirmed
    isolation = receipt.configured.isolation
    assert isolation is not None and isolation.lane == GVISOR
    assert receipt.configured.runtime == "runsc"
    assert not isolation.shares_host_kernel
    assert "not load" in isolation.system_calls
    assert receipt.observed_by_kernel.scope == "gvisor_sandbox"
    assert any("gVisor's Sentry" in line for line in receipt.summary_lines())


def test_gvisor_create_body_holds_the_runtime_and_the_mapped_caps() -> None:
    spec = replace(SPEC, isolation=RuntimeChoice(GVISOR, "runsc", "test"))
    host = create_body(spec)["HostConfig"]
    assert host["Runtime"] == "runsc"
    assert host["PidsLimit"] == engine_pids_limit(GVISOR, spec.limits)
    assert {"Name": "nproc", "Soft": spec.limits.pids, "Hard": spec.limits.pids} in host["Ulimits"]


def test_a_run_asking_for_gvisor_on_an_engine_without_it_is_refused(
    state: StateStore,
) -> None:
    engine = FakeEngine()
    session = gvisor_session(engine, state, RuntimePolicy())
    with pytest.raises(RuntimeUnavailable, match="registered as 'runsc'; it has runc"):
        session.prepare(RunRequest(code=b"", runtime="gvisor"))
    assert not [c for c in engine.calls if c[0] == "create"]
    engine.calls.clear()
    only_runc = RuntimePolicy(default=RUNC, allowed=(RUNC,), source="ops.toml")
    session = gvisor_session(engine, state, only_runc)
    with pytest.raises(RuntimeNotAllowed, match=r"ops\.toml"):
        session.prepare(RunRequest(code=b"", runtime="gvisor"))
    assert engine.calls == []  # refused before the engine was asked anything


def test_doctor_prints_the_daemon_entry_when_runsc_is_not_registered() -> None:
    info = {"Runtimes": {"runc": {"path": "runc"}}}
    report, problems = gvisor_report(
        info, RuntimePolicy(), local_host=True, runsc_path="/usr/bin/runsc"
    )
    assert not report["registered"] and not problems
    assert report["daemon_config"] == daemon_config_snippet("runsc", "/usr/bin/runsc")
    assert '"runtimeArgs": ["--platform=ptrace", "--network=none"]' in report["daemon_config"]
    report, problems = gvisor_report(
        info, RuntimePolicy(default=GVISOR), local_host=True, runsc_path=None
    )
    assert problems and "apt-get install runsc" in problems[0]["next"]


def test_doctor_sees_a_registered_gvisor() -> None:
    info = {"Runtimes": {"runc": {"path": "runc"}, "runsc": RUNSC}}
    assert [r.name for r in engine_runtimes(info) if r.is_gvisor] == ["runsc"]
    report, problems = gvisor_report(
        info, RuntimePolicy(default=GVISOR), local_host=True, runsc_path="/usr/bin/runsc"
    )
    assert report["registered"] and not problems and report["daemon_config"] is None
    assert report["runtime_args"] == ["--platform=ptrace", "--network=none"]


def test_egress_is_refused_where_runsc_gives_no_network() -> None:
    no_network = RuntimeChoice(GVISOR, "runsc", "test", ("--platform=ptrace", "--network=none"))
    with pytest.raises(EgressRefused, match="--network=none"):
        refuse_egress_without_network("packages", no_network)
    with pytest.raises(EgressRefused, match="runtime runc"):
        refuse_egress_without_network("open", no_network)
    refuse_egress_without_network("none", no_network)
    # With gVisor's own network stack, or under runc, the proxy is reachable.
    refuse_egress_without_network("packages", RuntimeChoice(GVISOR, "runsc", "test", ()))
    refuse_egress_without_network("packages", RuntimeChoice())


def test_a_gvisor_run_asking_for_egress_is_refused_before_the_engine_makes_anything(
    engine: FakeEngine, state: StateStore
) -> None:
    engine.runtimes["runsc"] = RUNSC  # registered with --network=none
    session = gvisor_session(engine, state, RuntimePolicy(default=GVISOR))
    with pytest.raises(EgressRefused, match="no network stack"):
        session.prepare(RunRequest(code=b"pass", egress="packages"))
    assert engine.containers == {}
    session.prepare(RunRequest(code=b"pass"))  # without egress: as before
