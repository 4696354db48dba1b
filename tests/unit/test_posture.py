"""The posture: built from one list, and every weakening of it is caught before start."""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from pybox._adapters.confinement import seccomp_profile
from pybox._adapters.state import StateStore
from pybox._core.limits import BUILTIN_DEFAULTS, Policy
from pybox._core.posture import BOX_USER
from pybox._core.posture import RunBoxSpec as BoxSpec
from pybox._core.receipt import Status
from pybox._core.request import RunRequest
from pybox._core.seal import Check, Requirement
from pybox._core.seccomp import Confinement
from pybox._engine.podman_seal import MAPPINGS, PODMAN_SEAL
from pybox._orchestration.session import Session
from tests.unit.fake_engine import FakeEngine
from tests.unit.seal_helpers import create_body, requirements, verify

SPEC = BoxSpec(
    run_id="0123456789abcdef",
    image_id="sha256:" + "12" * 32,
    python_path="/usr/bin/python3",
    bootstrap_source="print('bootstrap')",
    limits=BUILTIN_DEFAULTS,
    owner="host:1:1",
    expires_at=2_000_000_000,
    pybox_version="test",
    confinement=Confinement(seccomp_profile(), None, "no AppArmor (test)"),
)
REQUIREMENTS = requirements(SPEC)


def inspect_document(spec: BoxSpec) -> dict[str, Any]:
    """What a faithful engine reports for a box created from `create_body`."""
    engine = FakeEngine()
    container_id = engine.create_container(spec.name, create_body(spec))
    document = engine.inspect_container(container_id)
    assert document is not None
    return document


def _parent(document: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
    target = document
    for key in path[:-1]:
        target = target.setdefault(key, {})
    return target


def weakenings(requirement: Requirement) -> list[tuple[str, Any]]:
    """Ways a hostile or buggy engine could hand back a weaker box for this field."""
    if requirement.check is Check.EMPTY:
        if isinstance(requirement.expected, bool) or requirement.expected is False:
            return [("set", True)]
        if isinstance(requirement.expected, dict):
            return [("set", {"weak": "1"})]
        if isinstance(requirement.expected, list):
            return [("set", ["/:/host"])]
        if isinstance(requirement.expected, int):
            return [("set", -1000)]
        return [("set", "host")]
    if requirement.check is Check.INCLUDES:
        expected = requirement.expected
        if isinstance(expected, dict):
            key = next(iter(expected))
            return [("drop-item", key), ("remove", None)]
        return [("drop-item", expected[0]), ("remove", None)]
    weaker: Any
    if isinstance(requirement.expected, bool):
        weaker = not requirement.expected
    elif isinstance(requirement.expected, int):
        weaker = requirement.expected * 2 + 1
    elif isinstance(requirement.expected, str):
        weaker = "host"
    elif isinstance(requirement.expected, list):
        weaker = []
    else:
        weaker = {}
    return [("remove", None), ("set", weaker)]


CASES = [
    pytest.param(req, how, value, id=f"{req.name}-{how}")
    for req in REQUIREMENTS
    for how, value in weakenings(req)
]


def apply(document: dict[str, Any], requirement: Requirement, how: str, value: Any) -> None:
    parent = _parent(document, requirement.inspect_path)
    key = requirement.inspect_path[-1]
    if how == "remove":
        parent.pop(key, None)
    elif how == "set":
        parent[key] = value
    else:
        current = copy.deepcopy(parent[key])
        if isinstance(current, dict):
            current.pop(value)
        else:
            current.remove(value)
        parent[key] = current


def test_create_body_is_built_from_the_requirements() -> None:
    body = create_body(SPEC)
    assert body["User"] == BOX_USER
    assert body["NetworkDisabled"] is True
    assert body["HostConfig"]["NetworkMode"] == "none"
    assert body["HostConfig"]["ReadonlyRootfs"] is True
    assert body["HostConfig"]["CapDrop"] == ["ALL"]
    assert body["HostConfig"]["SecurityOpt"] == [
        "no-new-privileges",
        "seccomp=" + seccomp_profile(),
    ]
    assert body["HostConfig"]["MemorySwap"] == body["HostConfig"]["Memory"]
    assert body["HostConfig"]["Binds"] == []
    assert body["HostConfig"]["LogConfig"] == {"Type": "none", "Config": {}}
    assert body["Image"] == SPEC.image_id
    # Every requirement with a create path is in the body, with its value.
    for requirement in REQUIREMENTS:
        if requirement.create_path is None:
            continue
        target: Any = body
        for key in requirement.create_path:
            target = target[key]
        assert target == requirement.expected


def test_a_faithful_engine_passes() -> None:
    report = verify(SPEC, inspect_document(SPEC))
    assert report.ok, report.mismatches
    assert len(report.checked) == len(REQUIREMENTS)


def test_names_are_unique() -> None:
    names = [r.name for r in REQUIREMENTS]
    assert len(names) == len(set(names))


@pytest.mark.parametrize(("requirement", "how", "value"), CASES)
def test_each_weakening_is_caught(requirement: Requirement, how: str, value: Any) -> None:
    document = inspect_document(SPEC)
    apply(document, requirement, how, value)
    report = verify(SPEC, document)
    assert [m.field for m in report.mismatches] == [requirement.name]


@pytest.mark.parametrize(
    "requirement",
    [r for r in REQUIREMENTS if r.check is not Check.EMPTY],
    ids=lambda r: r.name,
)
def test_a_weakened_box_never_starts(requirement: Requirement, state: StateStore) -> None:
    engine = FakeEngine()
    how, value = weakenings(requirement)[0]
    engine.tamper = lambda document: apply(document, requirement, how, value)
    session = Session(
        engine,
        state,
        Policy(),
        owner="testhost:1:1",
        sampler_factory=lambda container_id: None,
        is_owner_alive=lambda owner: True,
    )
    receipt = session.run(RunRequest(code=b"print(1)")).receipt
    assert receipt.status is Status.SANDBOX_ERROR
    assert requirement.name in receipt.cause.summary
    assert [m.field for m in receipt.observed_by_engine.posture_mismatches] == [requirement.name]
    assert "start" not in [name for name, _ in engine.calls]
    assert "attach" not in [name for name, _ in engine.calls]
    assert engine.containers == {}
    assert receipt.observed_by_engine.removal_confirmed


@pytest.mark.parametrize(("cpus", "threads"), [(0.5, "1"), (1.0, "1"), (1.5, "2"), (2.0, "2")])
def test_thread_counts_follow_the_cpu_limit(cpus: float, threads: str) -> None:
    import dataclasses

    spec = dataclasses.replace(SPEC, limits=dataclasses.replace(BUILTIN_DEFAULTS, cpus=cpus))
    environment = dict(item.split("=", 1) for item in spec.environment())
    assert environment["OMP_NUM_THREADS"] == threads
    assert environment["OPENBLAS_NUM_THREADS"] == threads


def test_a_runtime_annotation_is_refused() -> None:
    """The seal rule added with the seam: an engine that shows an annotation for the
    box's runtime (Docker's HostConfig.Annotations, API 1.43 and later) gave it one
    pybox never sends: the box is refused, whichever kind it is."""
    document = inspect_document(SPEC)
    assert verify(SPEC, document).ok
    assert "Annotations" not in create_body(SPEC)["HostConfig"]
    document["HostConfig"]["Annotations"] = {"run.oci.keep_original_groups": "1"}
    assert [m.field for m in verify(SPEC, document).mismatches] == ["HostConfig.Annotations"]


# -- the Docker backend's translations, on Docker's recorded answer ---------------------

# What Docker 20.10 (API 1.41, runc, this repository's CI host: no AppArmor) answered
# for a run box pybox created from `DOCKER_SEAL.create_request(RECORDED_SPEC.box())`
# (the bootstrap's source and the seccomp profile cut out, set back by `recorded()`).
RECORDED: dict[str, Any] = json.loads(
    (Path(__file__).parent / "data" / "docker-20.10-inspect.json").read_text()
)
RECORDED_SPEC = dataclasses.replace(
    SPEC,
    run_id=RECORDED["Config"]["Labels"]["io.pybox.run-id"],
    image_id=RECORDED["Image"],
    uid=1600000001,
    owner="record:1",
)


def recorded() -> dict[str, Any]:
    """Docker's answer, with this checkout's bootstrap, profile and labels."""
    document = copy.deepcopy(RECORDED)
    document["Config"]["Entrypoint"] = RECORDED_SPEC.entrypoint()
    document["Config"]["Labels"] = {**document["Config"]["Labels"], **RECORDED_SPEC.labels()}
    document["HostConfig"]["SecurityOpt"] = RECORDED_SPEC.confinement.security_opt()
    return document


def test_dockers_recorded_answer_passes_the_docker_translation() -> None:
    report = verify(RECORDED_SPEC, recorded())
    assert report.ok, [m.describe() for m in report.mismatches]
    assert len(report.checked) == len(requirements(RECORDED_SPEC)) == 65
    # Docker shows no annotation it was not given (API 1.41 has none).
    assert "Annotations" not in RECORDED["HostConfig"]


def test_the_podman_translation_fails_on_dockers_answer_where_podman_differs() -> None:
    """Podman's translation is Docker's with its differences: on Docker's answer it
    fails for fields only Podman's own answer holds, and nowhere else."""
    failing = {m.field for m in verify(RECORDED_SPEC, recorded(), PODMAN_SEAL).mismatches}
    assert failing and all(field.startswith("Libpod.") or field in MAPPINGS for field in failing), (
        failing
    )


@pytest.mark.parametrize(
    ("requirement", "how", "value"),
    [
        pytest.param(req, how, value, id=f"{req.name}-{how}")
        for req in requirements(RECORDED_SPEC)
        for how, value in weakenings(req)
    ],
)
def test_each_weakening_of_dockers_recorded_answer_is_caught(
    requirement: Requirement, how: str, value: Any
) -> None:
    document = recorded()
    apply(document, requirement, how, value)
    report = verify(RECORDED_SPEC, document)
    assert [m.field for m in report.mismatches] == [requirement.name]
