"""What Podman would run differently from the body, refused or mapped: each pinned.

Measured on Podman 4.3.1 (Debian 12, rootful, runc, cgroup v1): the box's
environment and its /etc/passwd and /etc/group, an unknown runtime name, a
body without a health check or masked paths, a box whose stdin must outlive
its attach connection, the `stopped` state and the tmpfs owner once started.
docs/engines.md lists each.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from pybox._core import wire
from pybox._core.egress import (
    INHIBIT_IPV4,
    OPEN,
    PACKAGES,
    EgressPlan,
    network_body,
    network_problems,
)
from pybox._core.errors import EngineError
from pybox._core.receipt import Status
from pybox._core.request import RunRequest
from pybox._engine.docker_seal import DOCKER_SEAL
from pybox._engine.endpoint import EngineEndpoint
from pybox._engine.podman import ENABLE_ICC, PodmanEngine, docker_state
from pybox._engine.podman_seal import MAPPINGS, PODMAN_SEAL, READ_BACK_AS, box_facts, tmpfs_view
from pybox._engine.specgen import PodmanUnsupported, needs_keeper, specgen
from pybox._orchestration.session import Session
from tests.unit import seal_helpers
from tests.unit.fake_engine import FakeEngine, Script
from tests.unit.seal_helpers import create_body
from tests.unit.test_posture_podman import SPEC, recorded, requirements, verify


def _specgen(body: dict[str, Any]) -> dict[str, Any]:
    return specgen("pybox-x", body, lambda profile: "/profiles/seccomp-x.json")


def test_the_box_gets_only_the_body_s_environment_and_no_written_passwd() -> None:
    spec = _specgen(create_body(SPEC))
    # Podman's defaults (container=podman, TERM=xterm) and its /etc/passwd and
    # /etc/group entries for a uid the image does not list are switched off.
    assert spec["unsetenvall"] is True
    assert spec["manage_password"] is False
    assert spec["env"] == dict(item.split("=", 1) for item in SPEC.environment())
    assert spec["use_image_hosts"] is True and spec["use_image_resolve_conf"] is True


def test_the_health_check_is_exactly_the_body_s() -> None:
    body = create_body(SPEC)
    assert _specgen(body)["healthconfig"] == {"Test": ["NONE"]}
    del body["Healthcheck"]
    assert "healthconfig" not in _specgen(body)


def test_a_sandbox_gets_a_keeper_podman_closes_its_stdin_with_the_attach() -> None:
    sandbox = dataclasses.replace(
        SPEC, protocol=wire.SANDBOX, expires_at=2_000_000_000, sandbox_store="store"
    )
    body = create_body(sandbox)
    assert body["StdinOnce"] is False
    assert needs_keeper(body)
    assert _specgen(body)["stdin"] is True
    # Boxes whose stdin closes with pybox's connection are made as before, keeperless.
    assert create_body(SPEC)["StdinOnce"] is True
    assert not needs_keeper(create_body(SPEC))
    assert _specgen(create_body(SPEC))["stdin"] is True


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"NetworkDisabled": None}, "NetworkDisabled"),
        ({"NetworkDisabled": False}, "NetworkDisabled"),
        ({"HostConfig.MaskedPaths": []}, "HostConfig.MaskedPaths"),
        ({"HostConfig.ReadonlyPaths": []}, "HostConfig.ReadonlyPaths"),
        ({"HostConfig.MaskedPaths": ["/proc/kcore"]}, "HostConfig.MaskedPaths"),
    ],
)
def test_a_field_podman_would_silently_run_otherwise_is_refused(
    changes: dict[str, Any], field: str
) -> None:
    body = create_body(SPEC)
    for name, value in changes.items():
        if name.startswith("HostConfig."):
            body["HostConfig"][name.split(".", 1)[1]] = value
        else:
            body[name] = value
    with pytest.raises(PodmanUnsupported) as caught:
        _specgen(body)
    assert caught.value.field == field


def test_a_box_on_a_network_says_so_in_both_fields() -> None:
    body = create_body(SPEC)
    body["NetworkDisabled"] = False
    body["HostConfig"]["NetworkMode"] = "bridge"
    assert _specgen(body)["netns"] == {"nsmode": "bridge"}


class _Podman(PodmanEngine):
    """PodmanEngine over canned answers: create, then its own inspect."""

    def __init__(self, runtime: str) -> None:
        super().__init__(EngineEndpoint("/nowhere.sock", "test", "podman"), "1.41", "4.3.1")
        self.runtime = runtime
        self.removed: list[str] = []

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        if path.endswith("/containers/create"):
            return {"Id": "c" * 64}
        return {"OCIRuntime": self.runtime}

    def remove_container(self, container_id: str) -> bool:
        self.removed.append(container_id)
        return True


def test_a_runtime_podman_does_not_know_is_refused_and_the_box_removed() -> None:
    body = create_body(SPEC)
    assert _Podman("runc").create_container("pybox-x", body) == "c" * 64
    body["HostConfig"]["Runtime"] = "io.containerd.runc.v2"
    # Podman 4.3 made this box with its default runtime (runc), silently.
    engine = _Podman("runc")
    with pytest.raises(PodmanUnsupported) as caught:
        engine.create_container("pybox-x", body)
    assert caught.value.field == "HostConfig.Runtime"
    assert engine.removed == ["c" * 64]


def test_a_sandbox_box_whose_keeper_does_not_start_is_removed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    started: list[str] = []

    def keeper(engine_socket: str, api_version: str, container_id: str) -> int:
        started.append(container_id)
        raise EngineError("The keeper of box cccc did not start (no attach).")

    monkeypatch.setattr("pybox._engine.podman.start_keeper", keeper)
    sandbox = dataclasses.replace(
        SPEC, protocol=wire.SANDBOX, expires_at=2_000_000_000, sandbox_store="store"
    )
    engine = _Podman("runc")
    with pytest.raises(EngineError, match="keeper"):
        engine.create_container("pybox-x", create_body(sandbox))
    assert started == ["c" * 64] and engine.removed == ["c" * 64]
    # A one-program box gets no keeper.
    assert engine.create_container("pybox-y", create_body(SPEC)) == "c" * 64
    assert started == ["c" * 64]


def test_stopped_reads_as_docker_s_exited() -> None:
    answer: dict[str, Any] = {
        "Id": "x",
        "State": {"Status": "stopped", "Running": False, "ExitCode": 124},
    }
    assert docker_state(answer)["State"] == {"Status": "exited", "Running": False, "ExitCode": 124}
    assert answer["State"]["Status"] == "stopped"  # not changed in place
    for status in ("running", "created", "exited", "paused"):
        assert docker_state({"State": {"Status": status}})["State"]["Status"] == status


def test_a_started_box_s_tmpfs_owner_reads_as_u() -> None:
    document = recorded()
    owner = f"uid={SPEC.uid},gid={SPEC.uid}"
    document["HostConfig"]["Tmpfs"] = {
        path: options.replace("U", owner)
        for path, options in document["HostConfig"]["Tmpfs"].items()
    }
    assert verify(SPEC, document).ok
    other = f"uid={SPEC.uid + 1},gid={SPEC.uid + 1}"
    document["HostConfig"]["Tmpfs"] = {
        path: options.replace(owner, other)
        for path, options in document["HostConfig"]["Tmpfs"].items()
    }
    report = verify(SPEC, document)
    assert [m.field for m in report.mismatches] == ["HostConfig.Tmpfs"]
    assert tmpfs_view({"/t": "rw,uid=5,gid=6"}, 5) == {"/t": ["gid=6", "rw", "uid=5"]}


def test_read_back_as_names_the_fields_each_mapping_checks() -> None:
    docker = {requirement.name: requirement for requirement in requirements(SPEC)}
    mapped = {requirement.name for requirement in seal_helpers.requirements(SPEC, PODMAN_SEAL)}
    for field, mapping in MAPPINGS.items():
        names = {requirement.name for requirement in mapping(box_facts(SPEC.box()), docker[field])}
        assert names <= mapped
        assert PODMAN_SEAL.read_back_as(field) == READ_BACK_AS.get(field, frozenset({field}))
        assert names == set(PODMAN_SEAL.read_back_as(field)), field
    assert DOCKER_SEAL.read_back_as("HostConfig.CapDrop") == {"HostConfig.CapDrop"}


@pytest.mark.parametrize("backstop", [False, True])
def test_a_box_that_ended_before_its_ack_is_not_an_engine_failure(
    session: Session, engine: FakeEngine, backstop: bool
) -> None:
    """Podman closes the attach connection once the box has ended: protocol 1's
    last ACK (only there to let the bootstrap end early) may find it closed."""
    engine.closes_attach_on_exit = True
    engine.script = Script(stdout=b"hi\n", exit_code=124 if backstop else 0, backstop=backstop)
    outcome = session.run(RunRequest(code=b"pass"))
    assert outcome.stdout == b"hi\n"
    assert outcome.receipt.status is not Status.SANDBOX_ERROR
    assert outcome.receipt.exit_code == (124 if backstop else 0)
    assert outcome.receipt.observed_by_engine.removal_confirmed


class _PodmanCalls(_Podman):
    def __init__(self) -> None:
        super().__init__("runc")
        self.calls: list[str] = []

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        self.calls.append(f"{method} {path}")
        return {"Id": "n" * 64}


def test_a_packages_network_is_refused_on_podman_before_any_call() -> None:
    # Measured on Podman 4.3.1 (netavark): the option is "not a recognized option",
    # and an internal network gives the host 10.89.0.1 with aardvark-dns on :53.
    engine = _PodmanCalls()
    with pytest.raises(PodmanUnsupported) as caught:
        engine.create_network("pybox-egress-x", network_body(PACKAGES, {"io.pybox.managed": "1"}))
    assert caught.value.field == f"Options[{INHIBIT_IPV4}]"
    assert "gateway address" in str(caught.value) and "Docker" in str(caught.value)
    assert engine.calls == []
    # An `open` network asks for no host-less bridge: it goes to the engine.
    engine.create_network("pybox-egress-y", network_body(OPEN, {"io.pybox.managed": "1"}))
    assert engine.calls == ["POST /networks/create"]


OWN = "pybox-egress-x"
OPEN_SPEC = dataclasses.replace(SPEC, egress=EgressPlan(OPEN, OWN))


def _open_answer() -> dict[str, Any]:
    """The recorded answer, with an `open` box's network as Podman 4.3.1 answered it
    (measured: `NetworkMode: bridge` in both answers, the network only under
    `NetworkSettings.Networks`, no `NetworkDisabled`, the image's hosts and resolv.conf)."""
    document = recorded()
    document["Config"].pop("NetworkDisabled", None)
    document["HostConfig"]["NetworkMode"] = "bridge"
    document["Libpod"]["HostConfig"]["NetworkMode"] = "bridge"
    endpoint = {"NetworkID": OWN, "Aliases": ["de9a58af72a1"], "IPAddress": ""}
    document["NetworkSettings"]["Networks"] = {OWN: endpoint}
    document["Libpod"]["NetworkSettings"]["Networks"] = {OWN: endpoint}
    return document


def test_an_open_box_joins_its_own_network_and_reads_back_as_podman_answers() -> None:
    spec = _specgen(create_body(OPEN_SPEC))
    assert (spec["netns"], spec["Networks"]) == ({"nsmode": "bridge"}, {OWN: {}})
    assert spec["use_image_hosts"] and spec["use_image_resolve_conf"]
    report = verify(OPEN_SPEC, _open_answer())
    assert report.ok, [m.describe() for m in report.mismatches]
    docker = seal_helpers.verify(OPEN_SPEC, _open_answer())
    assert "HostConfig.NetworkMode" in {m.field for m in docker.mismatches}


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        (("HostConfig", "NetworkMode"), "host", "HostConfig.NetworkMode"),
        (("Libpod", "HostConfig", "NetworkMode"), "host", "Libpod.HostConfig.NetworkMode"),
        (("Libpod", "HostConfig", "NetworkMode"), "none", "Libpod.HostConfig.NetworkMode"),
        (("NetworkSettings", "Networks"), {OWN: {}, "podman": {}}, "NetworkSettings.Networks"),
        (
            ("Libpod", "NetworkSettings", "Networks"),
            {"podman": {}},
            "Libpod.NetworkSettings.Networks",
        ),
    ],
)
def test_an_open_box_on_another_network_is_refused(
    path: tuple[str, ...], value: Any, field: str
) -> None:
    document = _open_answer()
    *parents, last = path
    target = document
    for key in parents:
        target = target[key]
    target[last] = value
    assert field in [m.field for m in verify(OPEN_SPEC, document).mismatches]


@pytest.mark.parametrize("mode", ["host", "container:abc", "ns:/proc/1/ns/net", "slirp4netns"])
def test_a_network_mode_naming_another_namespace_is_refused(mode: str) -> None:
    body = create_body(OPEN_SPEC)
    body["HostConfig"]["NetworkMode"] = mode
    with pytest.raises(PodmanUnsupported) as caught:
        _specgen(body)
    assert caught.value.field == "HostConfig.NetworkMode"


def test_an_open_network_goes_without_the_bridge_options_podman_ignores() -> None:
    engine = _PodmanBodies()
    engine.create_network(OWN, network_body(OPEN, {"io.pybox.managed": "1"}))
    assert engine.bodies[0]["Options"] == {}  # enable_icc=true: Podman's bridge always is
    for options, field in [
        ({ENABLE_ICC: "false"}, f"Options[{ENABLE_ICC}]"),
        ({"com.docker.network.bridge.name": "br0"}, "Options[com.docker.network.bridge.name]"),
    ]:
        with pytest.raises(PodmanUnsupported) as caught:
            engine.create_network(OWN, {**network_body(OPEN, {}), "Options": options})
        assert caught.value.field == field
    assert len(engine.bodies) == 1


def test_podmans_open_network_answer_passes_the_network_read_back() -> None:
    labels = {"io.pybox.egress": "open", "io.pybox.egress-for": "x"}
    # Measured on Podman 4.3.1 (compatible inspect of an `open` network; its own
    # answer adds dns_enabled: true, network_interface podman1, made at box start).
    answer = {
        "Name": OWN,
        "Driver": "bridge",
        "Internal": False,
        "EnableIPv6": False,
        "Attachable": False,
        "IPAM": {
            "Driver": "default",
            "Config": [{"Subnet": "10.89.0.0/24", "Gateway": "10.89.0.1"}],
        },
        "Options": {},
        "Labels": dict(labels),
        "Scope": "local",
    }
    assert network_problems(answer, OPEN, labels) == []
    assert network_problems({**answer, "Internal": True}, OPEN, labels) == [
        "Internal is True, not False"
    ]


class _PodmanBodies(_Podman):
    def __init__(self) -> None:
        super().__init__("runc")
        self.bodies: list[dict[str, Any]] = []

    def _call(self, method: str, path: str, **kwargs: Any) -> Any:
        self.bodies.append(kwargs["body"])
        return {"Id": "n" * 64}
