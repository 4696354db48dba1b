"""Podman's answers, mapped: each difference from Docker pinned on a recorded answer.

`data/podman-4.3-inspect.json` is what Podman 4.3.1 (Debian 12, rootful, runc,
cgroup v1) answered for a box pybox created (its compatible inspect, with its
own inspect under "Libpod"; the bootstrap's source cut out, set back here).
"""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from pybox._core.seal import BoxFacts, Requirement
from pybox._engine.docker_seal import DOCKER_SEAL
from pybox._engine.podman_seal import MAPPINGS, PODMAN_SEAL, podman_tmpfs_options
from pybox._engine.specgen import BOX_NPROC, PodmanUnsupported, specgen
from tests.unit import seal_helpers
from tests.unit.seal_helpers import create_body
from tests.unit.test_posture import SPEC as DOCKER_SPEC
from tests.unit.test_posture import apply, weakenings

RECORDED: dict[str, Any] = json.loads(
    (Path(__file__).parent / "data" / "podman-4.3-inspect.json").read_text()
)
SPEC = dataclasses.replace(
    DOCKER_SPEC,
    uid=1600000001,
    image_id=RECORDED["Image"],
    pybox_version="0.1.0.dev0",
    owner="record:1",
)
TABLE = seal_helpers.requirements(SPEC, PODMAN_SEAL)


def verify(spec: Any, document: Any) -> Any:
    """Read back as Podman's backend does."""
    return seal_helpers.verify(spec, document, PODMAN_SEAL)


def requirements(spec: Any) -> Any:
    """Docker's translation, which Podman's maps."""
    return seal_helpers.requirements(spec, DOCKER_SEAL)


def recorded() -> dict[str, Any]:
    """Podman's answer, with this checkout's bootstrap, labels and environment."""
    document = copy.deepcopy(RECORDED)
    config = document["Config"]
    config["Entrypoint"] = SPEC.entrypoint()
    config["Env"] = SPEC.environment()
    config["Labels"] = SPEC.labels()
    return document


def test_podmans_answer_passes_the_mapped_table() -> None:
    report = verify(SPEC, recorded())
    assert report.ok, [m.describe() for m in report.mismatches]
    assert len(report.checked) == 69  # 68, and the annotations rule of the seam


def test_every_mapping_is_needed() -> None:
    """Docker's requirement fails on Podman's answer for each mapped field: none is
    mapped for nothing, and none that differs is left unmapped."""
    document = recorded()
    failing = {m.field for m in seal_helpers.verify(SPEC, document).mismatches}
    # NetworkMode is mapped only for a box on a network of its own (egress), pinned
    # on Podman's answer for one in test_podman_boxes. Annotations pass Docker's
    # check on Podman's compatible answer because it never shows them: Podman's own
    # does (test_a_runtime_annotation_is_refused_on_podman).
    assert failing == set(MAPPINGS) - {"HostConfig.NetworkMode", "HostConfig.Annotations"}


def test_unmapped_fields_read_back_as_on_docker() -> None:
    docker = {r.name: r for r in requirements(SPEC)}
    for requirement in TABLE:
        if requirement.name in docker:
            assert (
                requirement == docker[requirement.name]
                or requirement.name in MAPPINGS
                or ("Podman" in requirement.why)
            )


CASES = [
    pytest.param(req, how, value, id=f"{req.name}-{how}")
    for req in TABLE
    for how, value in weakenings(req)
]


@pytest.mark.parametrize(("requirement", "how", "value"), CASES)
def test_each_weakening_of_podmans_answer_is_caught(
    requirement: Requirement, how: str, value: Any
) -> None:
    document = recorded()
    apply(document, requirement, how, value)
    report = verify(SPEC, document)
    assert requirement.name in {m.field for m in report.mismatches}


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        # What Podman's compatible create gives: its own cgroup namespace default
        # (the host's, on cgroup v1) and writable tmpfs on /run and /var/tmp.
        (("Libpod", "HostConfig", "CgroupMode"), "host", "Libpod.HostConfig.CgroupMode"),
        (
            ("HostConfig", "Tmpfs", "/run"),
            "rw,rprivate,nosuid,nodev,tmpcopyup",
            "HostConfig.Tmpfs",
        ),
        (("Libpod", "BoundingCaps"), ["CAP_CHOWN"], "Libpod.BoundingCaps"),
        (("Libpod", "EffectiveCaps"), ["CAP_KILL"], "Libpod.EffectiveCaps"),
        (("Libpod", "OCIRuntime"), "crun", "Libpod.OCIRuntime"),
        (
            ("Libpod", "HostConfig", "SecurityOpt"),
            ["no-new-privileges", "seccomp=unconfined"],
            "Libpod.HostConfig.SecurityOpt",
        ),
        (
            ("HostConfig", "SecurityOpt"),
            ["no-new-privileges", "unmask=ALL"],
            "HostConfig.SecurityOpt",
        ),
        (
            ("HostConfig", "SecurityOpt"),
            ["no-new-privileges", "seccomp=/elsewhere/seccomp-" + "ab" * 32 + ".json"],
            "HostConfig.SecurityOpt",
        ),
        (("HostConfig", "SecurityOpt"), ["no-new-privileges"], "HostConfig.SecurityOpt"),
        (("Libpod", "HostConfig", "NetworkMode"), "bridge", "Libpod.HostConfig.NetworkMode"),
        (("HostConfig", "IpcMode"), "host", "HostConfig.IpcMode"),
        (("HostConfig", "MaskedPaths"), ["/proc/kcore"], "HostConfig.MaskedPaths"),
    ],
)
def test_podman_specific_weakenings_are_refused(
    path: tuple[str, ...], value: Any, field: str
) -> None:
    document = recorded()
    target = document
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    assert field in {m.field for m in verify(SPEC, document).mismatches}


def test_ulimits_compare_by_name_and_include_the_explicit_nproc() -> None:
    document = recorded()
    names = sorted(u["Name"] for u in document["HostConfig"]["Ulimits"])
    assert names == ["RLIMIT_CORE", "RLIMIT_NOFILE", "RLIMIT_NPROC"]
    for item in document["HostConfig"]["Ulimits"]:
        if item["Name"] == "RLIMIT_NPROC":
            item["Soft"] = item["Hard"] = 1048576  # Podman's own default
    assert "HostConfig.Ulimits" in {m.field for m in verify(SPEC, document).mismatches}


def test_tmpfs_owner_becomes_podmans_u_option() -> None:
    options = SPEC.tmpfs()["/pybox"]
    assert "uid=1600000001" in options
    shown = podman_tmpfs_options(options, 1600000001).split(",")
    assert "U" in shown and not any(o.startswith(("uid=", "gid=")) for o in shown)
    assert "U" not in podman_tmpfs_options(SPEC.tmpfs()["/tmp"], 1600000001).split(",")


# -- the create body in Podman's terms --------------------------------------------------


def _specgen(body: dict[str, Any]) -> dict[str, Any]:
    return specgen("pybox-x", body, lambda profile: "/profiles/seccomp-x.json")


def test_specgen_says_each_field_in_podmans_terms() -> None:
    spec = _specgen(create_body(SPEC))
    assert spec["cgroupns"] == spec["ipcns"] == spec["pidns"] == {"nsmode": "private"}
    assert spec["netns"] == {"nsmode": "none"}
    assert spec["read_only_filesystem"] is True and spec["read_write_tmpfs"] is False
    assert spec["seccomp_profile_path"] == "/profiles/seccomp-x.json"
    assert spec["annotations"] == {"io.podman.annotations.seccomp": "/profiles/seccomp-x.json"}
    assert spec["no_new_privileges"] is True and spec["cap_drop"] == ["ALL"]
    assert {"type": "nproc", "soft": BOX_NPROC, "hard": BOX_NPROC} in spec["r_limits"]
    mounts = {m["destination"]: m["options"] for m in spec["mounts"]}
    assert "U" in mounts["/pybox"] and "notmpcopyup" in mounts["/tmp"]
    limits = SPEC.limits
    assert spec["resource_limits"]["memory"] == {
        "limit": limits.memory_bytes,
        "swap": limits.memory_bytes,
    }
    assert spec["resource_limits"]["pids"] == {"limit": limits.pids}
    assert spec["oci_runtime"] == "runc" and spec["use_image_hosts"] is True


@pytest.mark.parametrize(
    ("where", "key", "value"),
    [
        ("HostConfig", "Binds", ["/:/host"]),
        ("HostConfig", "Devices", [{"PathOnHost": "/dev/kmsg"}]),
        ("HostConfig", "Sysctls", {"kernel.shm_rmid_forced": "1"}),
        ("HostConfig", "PidMode", "host"),
        ("HostConfig", "SecurityOpt", ["no-new-privileges", "label=disable"]),
        ("HostConfig", "SecurityOpt", ["no-new-privileges", "apparmor=unconfined"]),
        ("HostConfig", "UsernsMode", "host"),
        (None, "ExposedPorts", {"80/tcp": {}}),
    ],
)
def test_a_field_podman_is_not_asked_for_is_a_refusal_naming_it(
    where: str | None, key: str, value: Any
) -> None:
    body = create_body(SPEC)
    (body[where] if where else body)[key] = value
    with pytest.raises(PodmanUnsupported) as caught:
        _specgen(body)
    assert key in caught.value.field
    assert "refuses the box" in str(caught.value)


def test_a_runtime_annotation_is_refused_on_podman() -> None:
    """The seal rule added with the seam: no annotation reaches the box's runtime but
    Podman's record of its own settings (crun reads `run.oci.*`, gVisor `dev.gvisor.*`)."""
    assert verify(SPEC, recorded()).ok
    for key in ("run.oci.keep_original_groups", "dev.gvisor.spec.mount.x.share"):
        document = recorded()
        document["Libpod"]["Config"]["Annotations"][key] = "1"
        fields = {m.field for m in verify(SPEC, document).mismatches}
        assert fields == {"Libpod.Config.Annotations"}, key
    assert PODMAN_SEAL.read_back_as("HostConfig.Annotations") == {"Libpod.Config.Annotations"}


def test_the_annotations_podman_writes_itself_are_not_a_runtime_s() -> None:
    """What Podman 4.3's own API writes on a sandbox's box (CI's Podman pass): who
    manages it, when it was made and the image's stop signal; none reconfigures the
    runtime, so the box is not refused for them (a runtime's key beside them is)."""
    document = recorded()
    document["Libpod"]["Config"]["Annotations"].update(
        {
            "io.container.manager": "libpod",
            "io.kubernetes.cri-o.Created": "2026-12-05T03:51:56.556213742Z",
            "org.opencontainers.image.stopSignal": "15",
        }
    )
    assert verify(SPEC, document).ok
    document["Libpod"]["Config"]["Annotations"]["run.oci.hooks"] = "x"
    assert {m.field for m in verify(SPEC, document).mismatches} == {"Libpod.Config.Annotations"}


def test_facts_name_the_runtime_where_each_backend_keeps_it() -> None:
    """Podman's compatible answer always says 'oci'; its own answer names the runtime
    (CI's Podman pass: `pybox verify`'s mcp_env case read the wrong one)."""
    document = recorded()
    document["HostConfig"]["Runtime"] = "oci"
    document["Libpod"]["OCIRuntime"] = "runc"
    assert BoxFacts(PODMAN_SEAL, document).values_of("HostConfig.Runtime") == ("runc",)
    assert BoxFacts(DOCKER_SEAL, {"HostConfig": {"Runtime": "runsc"}}).values_of(
        "HostConfig.Runtime"
    ) == ("runsc",)
    assert BoxFacts(DOCKER_SEAL, {}).values_of("HostConfig.Runtime") == ()
