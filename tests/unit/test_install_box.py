"""The install box with the fake engine: the sandbox's image, pybox's labels, the
network for pip only, and the box gone after a success, a pip failure, the time
limit, the size limit, a posture that differs; a bad requirement creates nothing."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from pybox._adapters.piptool import PipSettings
from pybox._core.errors import CleanupError, InvalidRequest, LibraryInstallError
from pybox._core.limits import MIB
from pybox._core.posture import LABEL_EXPIRES_AT, LABEL_MANAGED, LABEL_OWNER
from pybox._features.sandboxes import install
from pybox._features.sandboxes.install import InstalledLibraries, install_libraries
from pybox._features.sandboxes.site_tar import InstalledPackage
from tests.unit.conftest import OWNER
from tests.unit.fake_engine import FakeEngine
from tests.unit.test_install import (
    IMAGE,
    REPORT_PATH,
    SIX_FOLDER,
    SIX_SHA,
    TARGET_PATH,
    entries,
    installed,
    member,
    pip_report,
    tar_of,
)


def python_says(argv: list[str]) -> tuple[int, bytes]:
    script = argv[-1]
    if "getusersitepackages" in script:
        facts = {"implementation": "CPython", "version": "3.11.2", "tag": "cp311"}
        facts |= {"machine": "x86_64", "site": ".local/lib/python3.11/site-packages"}
        return 0, json.dumps(facts).encode() + b"\n"
    if "os.walk" in script:
        return 0, json.dumps({"bytes": 16, "entries": 4}).encode() + b"\n"
    if "install" in argv:
        return 0, b"Collecting six\nSuccessfully installed six-1.17.0\n"
    return 0, b""


@pytest.fixture
def box_engine(engine: FakeEngine, monkeypatch: pytest.MonkeyPatch) -> FakeEngine:
    monkeypatch.setattr(install, "download_pip_wheel", lambda lock, env: ("pip-1-py3.whl", b"w"))
    engine.exec_script = python_says
    report = pip_report(installed("six", "1.17.0", {"hashes": {"sha256": SIX_SHA}}))
    engine.archives_out[REPORT_PATH] = tar_of(
        [member("report.json", data=json.dumps(report).encode())]
    )
    engine.archives_out[TARGET_PATH] = tar_of(SIX_FOLDER)
    return engine


def run_install(engine: FakeEngine, libraries: list[str], **kwargs: Any) -> InstalledLibraries:
    settings = PipSettings(index_url="https://mirror.invalid/simple")
    return install_libraries(
        engine,
        IMAGE,
        libraries,
        owner=OWNER,
        environ={},
        max_bytes=kwargs.pop("max_bytes", 10 * MIB),
        pip=settings,
        **kwargs,
    )


def test_the_install_box_installs_and_is_gone(box_engine: FakeEngine) -> None:
    said: list[str] = []
    result = run_install(box_engine, ["Six"], say=said.append)
    assert result.requested == ("six",)
    assert result.packages == (InstalledPackage("six", "1.17.0", SIX_SHA),)
    assert result.site_relpath == ".local/lib/python3.11/site-packages"
    assert sorted(entries(result.tar_bytes)) == [
        "six-1.17.0.dist-info",
        "six-1.17.0.dist-info/METADATA",
        "six.py",
    ]
    assert result.install_box.startswith("pybox-install-")
    assert box_engine.names("create") == [result.install_box]
    assert box_engine.containers == {}
    assert any("removed (confirmed)" in line for line in said)


def test_the_box_is_the_sandboxs_image_labelled_for_the_sweep(
    box_engine: FakeEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    bodies: list[dict[str, Any]] = []
    create = box_engine.create_container

    def keep(name: str, body: dict[str, Any]) -> str:
        bodies.append(body)
        return create(name, body)

    monkeypatch.setattr(box_engine, "create_container", keep)
    run_install(box_engine, ["six"], timeout_s=60)
    body = bodies[0]
    assert body["Image"] == IMAGE.image_id
    assert body["Entrypoint"][0] == IMAGE.python_path
    labels = body["Labels"]
    assert labels[LABEL_MANAGED] == "1" and labels[LABEL_OWNER] == OWNER
    assert time.time() < float(labels[LABEL_EXPIRES_AT]) <= time.time() + 60 + 120 + 1
    assert body["HostConfig"]["CapDrop"] == ["ALL"]


def test_the_network_is_attached_for_pip_only(box_engine: FakeEngine) -> None:
    run_install(box_engine, ["six", "idna>=3"])
    execs = box_engine.names("exec")
    networks = box_engine.names("exec_networks")
    pip_step = [i for i, argv in enumerate(execs) if " install " in argv]
    assert len(pip_step) == 1 and len(execs) == 3
    assert [bool(n) for n in networks] == [i in pip_step for i in range(len(execs))]
    argv = execs[pip_step[0]].split(" ")
    assert argv[:4] == [
        "/usr/bin/python3",
        "-I",
        "/opt/pybox-build/pip-1-py3.whl/pip",
        "install",
    ]
    for option in ("--only-binary=:all:", "--no-cache-dir", "--isolated", "--target", "--report"):
        assert option in argv
    assert argv[argv.index("--index-url") + 1] == "https://mirror.invalid/simple"
    assert argv[-2:] == ["six", "idna>=3"]


def test_every_python_the_install_box_starts_is_isolated(box_engine: FakeEngine) -> None:
    # pybox's own programs in a box: the probe, pip and the measurement.
    run_install(box_engine, ["six"])
    execs = [argv.split(" ") for argv in box_engine.names("exec")]
    assert execs and all(argv[:2] == ["/usr/bin/python3", "-I"] for argv in execs), execs


def test_a_bad_requirement_creates_nothing(box_engine: FakeEngine) -> None:
    with pytest.raises(InvalidRequest, match="is a URL"):
        run_install(box_engine, ["six", "https://example.invalid/evil.whl"])
    assert box_engine.calls == []
    with pytest.raises(InvalidRequest, match="No libraries were given"):
        run_install(box_engine, [])
    assert box_engine.calls == []


def test_a_pip_failure_is_an_error_with_pips_words_and_the_box_is_removed(
    box_engine: FakeEngine,
) -> None:
    def fails(argv: list[str]) -> tuple[int, bytes]:
        if "install" in argv:
            return 1, b"ERROR: No matching distribution found for six==0.0.1\n"
        return python_says(argv)

    box_engine.exec_script = fails
    with pytest.raises(LibraryInstallError) as failed:
        run_install(box_engine, ["six==0.0.1"])
    quote = failed.value.quote
    assert quote is not None and "No matching distribution" in quote.said(str(failed.value))
    assert box_engine.containers == {}
    assert box_engine.names("disconnect")[-1] == "bridge"


def test_over_the_time_limit_the_box_is_killed_and_removed(box_engine: FakeEngine) -> None:
    def slow(argv: list[str]) -> tuple[int, bytes]:
        if "install" in argv:
            time.sleep(0.5)
        return python_says(argv)

    box_engine.exec_script = slow
    with pytest.raises(LibraryInstallError, match=r"did not finish within 0.3 s; the install box"):
        run_install(box_engine, ["six"], timeout_s=0.3)
    assert box_engine.containers == {}


def test_over_the_size_limit_nothing_is_read_out(box_engine: FakeEngine) -> None:
    with pytest.raises(LibraryInstallError, match=r"\(16 bytes\), more than the limit of"):
        run_install(box_engine, ["six"], max_bytes=15)
    assert box_engine.names("get_archive") == []
    assert box_engine.containers == {}


def test_a_folder_larger_than_the_box_measured_is_not_read(box_engine: FakeEngine) -> None:
    big = [member(f"target/f{i}", data=b"x" * 4096) for i in range(300)]
    box_engine.archives_out[TARGET_PATH] = tar_of(big)
    with pytest.raises(LibraryInstallError, match="larger than it measured"):
        run_install(box_engine, ["six"])
    assert box_engine.containers == {}


def test_a_posture_that_differs_is_refused_before_start(box_engine: FakeEngine) -> None:
    def weaken(document: dict[str, Any]) -> None:
        document["HostConfig"]["Privileged"] = True

    box_engine.tamper = weaken
    with pytest.raises(LibraryInstallError, match="install box was refused before start"):
        run_install(box_engine, ["six"])
    assert box_engine.names("start") == [] and box_engine.containers == {}


def test_a_removal_that_cannot_be_confirmed_is_an_error(
    box_engine: FakeEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(install, "remove_and_confirm", lambda engine, container_id: False)
    with pytest.raises(CleanupError, match=r"could not be confirmed removed.*pybox sweep"):
        run_install(box_engine, ["six"])
