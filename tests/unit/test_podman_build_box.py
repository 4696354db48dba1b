"""The build box on Podman: its create body in Podman's terms, and its read-back
pinned on Podman's recorded answer, each mapping.

`data/podman-4.3-build-inspect.json` is what Podman 4.3.1 (Debian 12, rootful,
runc, cgroup v1, netavark) answered for a build box pybox created through
`PodmanEngine`, before start (its compatible inspect, with its own under
"Libpod"). docs/engines.md ("Build boxes on Podman") lists each difference.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from pybox._adapters.confinement import seccomp_profile
from pybox._core.build_posture import BUILD_OPEN_FILES
from pybox._core.build_posture import build_box as sealed
from pybox._core.errors import ImageBuildError
from pybox._core.seal import Requirement, SealTranslation, check_requirements
from pybox._core.seccomp import Confinement
from pybox._engine.docker_seal import DOCKER_SEAL
from pybox._engine.podman_seal import MAPPINGS, PODMAN_SEAL
from pybox._engine.specgen import BOX_NPROC, specgen
from pybox._features.images import build_box
from tests.unit.fake_engine import FakeEngine
from tests.unit.test_posture import apply, weakenings

RECORDED: dict[str, Any] = json.loads(
    (Path(__file__).parent / "data" / "podman-4.3-build-inspect.json").read_text()
)
SPEC = dataclasses.replace(
    build_box.build_box_spec(
        RECORDED["Image"],
        run_id="0a226fe401c1ca22",
        owner="measure",
        pybox_version="0",
        cpus=1,
        confinement=Confinement(seccomp_profile(), None, "no AppArmor (test)"),
    ),
    # The recorded box's own labels (its expiry) and sleep.
    labels=tuple(RECORDED["Config"]["Labels"].items()),
    entrypoint=tuple(RECORDED["Config"]["Entrypoint"]),
)
TABLE = PODMAN_SEAL.requirements(sealed(SPEC))


def recorded() -> dict[str, Any]:
    return copy.deepcopy(RECORDED)


def _specgen() -> dict[str, Any]:
    return specgen(
        "pybox-build-x", PODMAN_SEAL.create_request(sealed(SPEC)), lambda _: "/p/seccomp-x.json"
    )


def test_podmans_answer_passes_the_mapped_build_table() -> None:
    report = check_requirements(TABLE, recorded())
    assert report.ok, [m.describe() for m in report.mismatches]
    # 58 before the one seal table gave a build box every rule a run box has (its
    # stdin, tty, domain name and network switch, all off) and the annotations rule.
    assert len(report.checked) == 67


def test_every_mapping_the_build_table_uses_is_needed() -> None:
    """Docker's build table fails on Podman's answer for exactly the mapped fields
    it has; the network mode, read back in both answers, passes Docker's as it is."""
    failing = {
        m.field
        for m in check_requirements(DOCKER_SEAL.requirements(sealed(SPEC)), RECORDED).mismatches
    }
    names = {r.name for r in DOCKER_SEAL.requirements(sealed(SPEC))}
    unseen = {"HostConfig.NetworkMode", "HostConfig.Annotations"}  # see test_posture_podman
    # A box without stdin or network switch expects what Podman reports for those
    # (false, null) on Docker too: their mappings are needed by a run box only.
    off = {
        "Config.StdinOnce",
        "Config.AttachStdin",
        "Config.AttachStdout",
        "Config.AttachStderr",
        "Config.NetworkDisabled",
    }
    assert failing == (set(MAPPINGS) - unseen - off) & names
    assert "HostConfig.NetworkMode" in names


def test_unmapped_fields_read_back_as_on_docker() -> None:
    docker = {r.name: r for r in DOCKER_SEAL.requirements(sealed(SPEC))}
    mapped = set(MAPPINGS)
    for requirement in TABLE:
        if requirement.name in docker and requirement.name not in mapped:
            assert requirement == docker[requirement.name]


@pytest.mark.parametrize(
    ("requirement", "how", "value"),
    [
        pytest.param(req, how, value, id=f"{req.name}-{how}")
        for req in TABLE
        for how, value in weakenings(req)
    ],
)
def test_each_weakening_of_podmans_build_box_is_caught(
    requirement: Requirement, how: str, value: Any
) -> None:
    document = recorded()
    apply(document, requirement, how, value)
    report = check_requirements(TABLE, document)
    assert requirement.name in {m.field for m in report.mismatches}


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        # Podman's own answer says the box is on another network namespace.
        (("Libpod", "HostConfig", "NetworkMode"), "host", "Libpod.HostConfig.NetworkMode"),
        (("Libpod", "HostConfig", "NetworkMode"), "none", "Libpod.HostConfig.NetworkMode"),
        (("Libpod", "HostConfig", "CgroupMode"), "host", "Libpod.HostConfig.CgroupMode"),
        (("Libpod", "BoundingCaps"), ["CAP_CHOWN"], "Libpod.BoundingCaps"),
        (("Libpod", "EffectiveCaps"), ["CAP_DAC_OVERRIDE"], "Libpod.EffectiveCaps"),
        (("Libpod", "OCIRuntime"), "crun", "Libpod.OCIRuntime"),
        (
            ("Libpod", "HostConfig", "SecurityOpt"),
            ["no-new-privileges", "seccomp=unconfined"],
            "Libpod.HostConfig.SecurityOpt",
        ),
        (("HostConfig", "Tmpfs", "/run"), "rw,rprivate,nosuid,nodev", "HostConfig.Tmpfs"),
        (
            (
                "HostConfig",
                "IpcMode",
            ),
            "host",
            "HostConfig.IpcMode",
        ),
    ],
)
def test_podman_specific_weakenings_of_the_build_box_are_refused(
    path: tuple[str, ...], value: Any, field: str
) -> None:
    document = recorded()
    target = document
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    assert field in {m.field for m in check_requirements(TABLE, document).mismatches}


def test_podmans_default_rlimits_are_refused() -> None:
    """Podman's own open-files default (1048576) and process limit read back as
    weaker than the build box's stated ones."""
    for name in ("RLIMIT_NOFILE", "RLIMIT_NPROC"):
        document = recorded()
        for item in document["HostConfig"]["Ulimits"]:
            if item["Name"] == name:
                item["Soft"] = item["Hard"] = 1048576
        assert "HostConfig.Ulimits" in {
            m.field for m in check_requirements(TABLE, document).mismatches
        }


def test_the_build_box_in_podmans_terms() -> None:
    spec = _specgen()
    assert spec["netns"] == {"nsmode": "bridge"}
    # The engine writes the box's resolv.conf on the bridge (pip resolves the index,
    # as on Docker's bridge); never its /etc/hosts (Podman names the host in it).
    assert spec["use_image_resolve_conf"] is False and spec["use_image_hosts"] is True
    assert spec["user"] == "0:0" and spec["read_only_filesystem"] is False
    assert spec["cap_drop"] == ["ALL"] and spec["cap_add"] == [] and spec["no_new_privileges"]
    assert spec["cgroupns"] == spec["ipcns"] == spec["pidns"] == spec["utsns"]
    assert spec["cgroupns"] == {"nsmode": "private"}
    assert spec["seccomp_profile_path"] == "/p/seccomp-x.json"
    assert spec["r_limits"] == [
        {"type": "nofile", "soft": BUILD_OPEN_FILES, "hard": BUILD_OPEN_FILES},
        {"type": "core", "soft": 0, "hard": 0},
        {"type": "nproc", "soft": BOX_NPROC, "hard": BOX_NPROC},
    ]
    mounts = {m["destination"]: m["options"] for m in spec["mounts"]}
    assert list(mounts) == ["/tmp"]
    assert "notmpcopyup" in mounts["/tmp"] and "U" not in mounts["/tmp"]
    assert spec["resource_limits"]["memory"] == {
        "limit": build_box.BUILD_MEMORY_BYTES,
        "swap": build_box.BUILD_MEMORY_BYTES,
    }
    assert spec["resource_limits"]["pids"] == {"limit": build_box.BUILD_PIDS}


class _PodmanFake(FakeEngine):
    name = "podman"
    seal: SealTranslation = PODMAN_SEAL


def test_a_build_box_is_no_longer_refused_on_podman_and_is_read_back_mapped() -> None:
    engine = _PodmanFake()
    container_id = build_box.create_build_box(engine, "b", SPEC)
    # The fake answers Docker's form: Podman's table asks for Podman's own answer.
    with pytest.raises(ImageBuildError, match="refused before start") as caught:
        build_box.read_back_build_box(engine, SPEC, container_id)
    assert "Libpod." in str(caught.value)
    engine.seal = DOCKER_SEAL
    assert build_box.read_back_build_box(engine, SPEC, container_id).ok
