"""pybox's seccomp profile, its read-back, AppArmor, and what doctor says about both."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from pybox._adapters import confinement as confinement_adapter
from pybox._adapters.confinement import host_apparmor, seccomp_profile
from pybox._core.receipt import Status
from pybox._core.request import RunRequest
from pybox._core.seccomp import (
    DENIED,
    ENGINE_APPARMOR_PROFILE,
    REMOVED_FROM_ENGINE_DEFAULT,
    Confinement,
    allowed_names,
    apparmor_requirement,
    canonical,
    profile_sha256,
    security_opt_view,
)
from pybox._engine import DockerEngine
from pybox._orchestration import doctor
from pybox._orchestration.doctor import seccomp_problem
from pybox._orchestration.session import Session
from tests.unit.fake_engine import FakeEngine
from tests.unit.seal_helpers import verify
from tests.unit.test_posture import SPEC, inspect_document

PROFILE = json.loads(seccomp_profile())
ALLOWED = allowed_names(PROFILE)
CLONE_NAMESPACE_FLAGS = 0x7E020000  # CLONE_NEWNS|CGROUP|UTS|IPC|USER|PID|NET


# -- the profile ----------------------------------------------------------------------


def test_the_profile_denies_by_default_with_eperm() -> None:
    assert PROFILE["defaultAction"] == "SCMP_ACT_ERRNO"
    assert PROFILE["defaultErrnoRet"] == 1


@pytest.mark.parametrize("name", sorted(DENIED))
def test_no_rule_allows_a_denied_call(name: str) -> None:
    assert name not in ALLOWED
    assert DENIED[name].strip(), f"{name} has no reason"


def test_every_call_removed_from_the_engine_default_is_justified() -> None:
    assert set(REMOVED_FROM_ENGINE_DEFAULT) <= set(DENIED)
    for name in ("io_uring_setup", "io_uring_enter", "io_uring_register", "ptrace"):
        assert name in REMOVED_FROM_ENGINE_DEFAULT


def test_the_calls_python_and_the_bootstrap_need_are_allowed() -> None:
    needed = {
        "read", "write", "openat", "close", "mmap", "munmap", "mprotect", "brk", "execve",
        "futex", "clone", "wait4", "exit_group", "rt_sigaction", "prctl", "mknodat",
        "pipe2", "poll", "getrandom", "socket", "fcntl", "newfstatat", "getdents64",
    }  # fmt: skip
    assert needed <= ALLOWED


def test_clone_never_makes_a_namespace_and_clone3_falls_back() -> None:
    clones = [r for r in PROFILE["syscalls"] if "clone" in r["names"]]
    assert clones and all(r["action"] == "SCMP_ACT_ALLOW" for r in clones)
    for rule in clones:
        (arg,) = rule["args"]
        assert arg["op"] == "SCMP_CMP_MASKED_EQ"
        assert arg["value"] == CLONE_NAMESPACE_FLAGS
    (clone3,) = [r for r in PROFILE["syscalls"] if "clone3" in r["names"]]
    assert clone3["action"] == "SCMP_ACT_ERRNO" and clone3["errnoRet"] == 38


def test_conditional_rules_depend_on_the_architecture_only() -> None:
    # Capability-conditional rules would only matter with capabilities, and a
    # box has none; pybox's profile states what every box gets.
    for rule in PROFILE["syscalls"]:
        for key in ("includes", "excludes"):
            assert set(rule.get(key, {})) <= {"arches"}, rule


def test_the_profile_is_sent_canonical_and_hashed() -> None:
    text = seccomp_profile()
    assert text == canonical(text)
    shipped = (Path(confinement_adapter.__file__).parents[1] / "_core" / "seccomp.json").read_text()
    assert profile_sha256(shipped) == profile_sha256(text)
    assert profile_sha256(json.dumps(PROFILE, indent=4)) == profile_sha256(text)


def test_a_confinement_is_never_unconfined_or_uncanonical() -> None:
    with pytest.raises(ValueError, match="unconfined"):
        Confinement(seccomp_profile(), "unconfined", "test")
    with pytest.raises(ValueError, match="canonical"):
        Confinement(json.dumps(PROFILE, indent=1), None, "test")


def test_security_options_are_compared_by_the_profile_hash() -> None:
    option = "seccomp=" + seccomp_profile()
    view = security_opt_view(["no-new-privileges", option, "seccomp=unconfined", "seccomp=x"])
    assert view[0] == "no-new-privileges"
    assert view[1] == "seccomp=" + profile_sha256(seccomp_profile())
    assert view[2] == "seccomp=unconfined"
    assert view[3].startswith("seccomp=<not JSON, sha256:")


# -- the read-back ---------------------------------------------------------------------


def _with_security_opt(options: Any) -> list[str]:
    document = inspect_document(SPEC)
    document["HostConfig"]["SecurityOpt"] = options
    return [m.field for m in verify(SPEC, document).mismatches]


def _io_uring_profile() -> str:
    profile = json.loads(seccomp_profile())
    profile["syscalls"].append({"names": ["io_uring_setup"], "action": "SCMP_ACT_ALLOW"})
    return "seccomp=" + json.dumps(profile)


@pytest.mark.parametrize(
    "options",
    [
        pytest.param(["no-new-privileges"], id="profile-left-out"),
        pytest.param(["no-new-privileges", "seccomp=unconfined"], id="seccomp-unconfined"),
        pytest.param(None, id="removed"),
        pytest.param("io_uring", id="profile-with-io_uring"),
        pytest.param("apparmor", id="apparmor-unconfined-added"),
        pytest.param("label", id="label-disable-added"),
    ],
)
def test_a_missing_unconfined_or_other_profile_is_refused(options: Any) -> None:
    own = "seccomp=" + seccomp_profile()
    if options == "io_uring":
        options = ["no-new-privileges", _io_uring_profile()]
    elif options == "apparmor":
        options = ["no-new-privileges", own, "apparmor=unconfined"]
    elif options == "label":
        options = ["no-new-privileges", own, "label=disable"]
    assert _with_security_opt(options) == ["HostConfig.SecurityOpt"]


def test_the_same_profile_written_differently_passes() -> None:
    respelled = "seccomp=" + json.dumps(json.loads(seccomp_profile()), indent=2)
    assert _with_security_opt(["no-new-privileges", respelled]) == []


def test_a_mismatch_names_hashes_not_kilobytes_of_json() -> None:
    document = inspect_document(SPEC)
    document["HostConfig"]["SecurityOpt"] = ["no-new-privileges", _io_uring_profile()]
    (mismatch,) = verify(SPEC, document).mismatches
    text = mismatch.describe()
    assert profile_sha256(seccomp_profile()) in text
    assert "defaultAction" not in text and len(text) < 800


APPARMOR_SPEC = dataclasses.replace(
    SPEC, confinement=Confinement(seccomp_profile(), ENGINE_APPARMOR_PROFILE, "test")
)


@pytest.mark.parametrize(
    ("spec", "profile", "refused"),
    [
        pytest.param(SPEC, "", False, id="no-apparmor-none"),
        pytest.param(SPEC, "unconfined", True, id="no-apparmor-unconfined"),
        pytest.param(APPARMOR_SPEC, "docker-default", False, id="apparmor-default"),
        pytest.param(APPARMOR_SPEC, "unconfined", True, id="apparmor-unconfined"),
        pytest.param(APPARMOR_SPEC, "", True, id="apparmor-none"),
        pytest.param(APPARMOR_SPEC, "custom-profile", True, id="apparmor-other"),
    ],
)
def test_the_apparmor_profile_is_read_back(spec: Any, profile: str, refused: bool) -> None:
    document = inspect_document(spec)
    document["AppArmorProfile"] = profile
    fields = [m.field for m in verify(spec, document).mismatches]
    assert fields == (["AppArmorProfile"] if refused else [])


def test_an_unconfined_box_never_starts(engine: FakeEngine, session: Session) -> None:
    engine.tamper = lambda document: document.__setitem__("AppArmorProfile", "unconfined")
    receipt = session.run(RunRequest(code=b"print(1)")).receipt
    assert receipt.status is Status.SANDBOX_ERROR
    assert "AppArmorProfile" in receipt.cause.summary
    assert "start" not in [name for name, _ in engine.calls]
    assert receipt.observed_by_engine.removal_confirmed


def test_the_receipt_names_the_profile_and_apparmor(engine: FakeEngine, session: Session) -> None:
    receipt = session.run(RunRequest(code=b"print(1)")).receipt
    facts = receipt.configured.confinement
    assert facts.seccomp_profile == "pybox"
    assert facts.seccomp_profile_sha256 == profile_sha256(seccomp_profile())
    assert facts.apparmor_profile == (ENGINE_APPARMOR_PROFILE if engine.apparmor else None)
    assert "AppArmor" in facts.apparmor
    assert any("seccomp profile pybox" in line for line in receipt.summary_lines())


# -- AppArmor on the host ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "enabled"), [("Y\n", True), ("N\n", False), (None, False)], ids=str
)
def test_host_apparmor_is_read_from_sys(tmp_path: Path, content: str | None, enabled: bool) -> None:
    path = tmp_path / "enabled"
    if content is not None:
        path.write_text(content)
    found, said = host_apparmor(str(path))
    assert found is enabled
    assert str(path) in said


def test_apparmor_is_required_where_the_engine_or_the_host_has_it() -> None:
    assert apparmor_requirement(["name=apparmor"], None, "-")[0] == ENGINE_APPARMOR_PROFILE
    assert apparmor_requirement([], True, "-")[0] == ENGINE_APPARMOR_PROFILE
    profile, basis = apparmor_requirement(["name=seccomp,profile=default"], False, "X absent")
    assert profile is None
    assert "no AppArmor" in basis and "X absent" in basis


# -- doctor --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ([], "no seccomp support"),
        (["name=seccomp,profile=unconfined"], "unconfined"),
        (["name=apparmor", "name=seccomp,profile=unconfined"], "unconfined"),
        (["name=seccomp,profile=default"], None),
        (["name=apparmor", "name=seccomp,profile=default", "name=cgroupns"], None),
    ],
)
def test_doctor_flags_an_engine_without_seccomp_or_unconfined(
    options: list[str], problem: str | None
) -> None:
    found = seccomp_problem(options)
    if problem is None:
        assert found is None
    else:
        assert found is not None and problem in found[0]


def _diagnose_with(
    monkeypatch: pytest.MonkeyPatch, engine: FakeEngine, tmp_path: Path
) -> dict[str, Any]:
    monkeypatch.setattr(DockerEngine, "connect", staticmethod(lambda endpoint: engine))
    socket = tmp_path / "docker.sock"
    socket.touch()
    environ = {"DOCKER_HOST": f"unix://{socket}", "PYBOX_STATE_DIR": str(tmp_path / "state")}
    return doctor.diagnose(environ)


def test_doctor_reports_an_unconfined_engine_as_a_problem(
    monkeypatch: pytest.MonkeyPatch, engine: FakeEngine, tmp_path: Path
) -> None:
    engine.security_options = ["name=seccomp,profile=unconfined"]
    report = _diagnose_with(monkeypatch, engine, tmp_path)
    problems = {p["what"]: p for p in report["problems"]}
    assert "unconfined" in problems["seccomp"]["detail"]
    assert "seccomp-profile" in problems["seccomp"]["next"]
    assert report["confinement"]["seccomp_profile_sha256"] == profile_sha256(seccomp_profile())


def test_doctor_states_apparmor_honestly(
    monkeypatch: pytest.MonkeyPatch, engine: FakeEngine, tmp_path: Path
) -> None:
    monkeypatch.setattr(doctor, "host_apparmor", lambda: (False, "/sys/x does not exist"))
    engine.apparmor = False
    report = _diagnose_with(monkeypatch, engine, tmp_path)
    assert report["confinement"]["apparmor_profile"] is None
    assert "no AppArmor" in report["confinement"]["apparmor"]
    assert not [p for p in report["problems"] if p["what"] in ("seccomp", "apparmor")]


def test_doctor_flags_host_apparmor_the_engine_does_not_use(
    monkeypatch: pytest.MonkeyPatch, engine: FakeEngine, tmp_path: Path
) -> None:
    monkeypatch.setattr(doctor, "host_apparmor", lambda: (True, "/sys/x is Y"))
    engine.apparmor = False
    report = _diagnose_with(monkeypatch, engine, tmp_path)
    assert report["confinement"]["apparmor_profile"] == ENGINE_APPARMOR_PROFILE
    (problem,) = [p for p in report["problems"] if p["what"] == "apparmor"]
    assert "refuses every box" in problem["detail"]
