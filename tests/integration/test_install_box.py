"""The install box on the real engine, with the recorded stdlib image: a small
pure-Python wheel installed through this machine's pip configuration, handed
back as a safe tar, and the box gone; a bad requirement creates nothing."""

from __future__ import annotations

import base64
import hashlib
import io
import os
import tarfile
import time
from pathlib import Path

import pytest

from pybox._adapters.host_facts import current_owner
from pybox._adapters.state import StateStore
from pybox._core.errors import InvalidRequest, LibraryInstallError
from pybox._core.images import ImageRecord
from pybox._core.limits import MIB
from pybox._core.posture import LABEL_MANAGED, LABEL_OWNER
from pybox._engine import Engine
from pybox._features.sandboxes.install import install_libraries

MAX_BYTES = 64 * MIB


@pytest.fixture(scope="module")
def stdlib(state_dir: Path) -> ImageRecord:
    record = StateStore(state_dir).image("stdlib")
    assert record is not None
    return record


def mine(engine: Engine) -> list[dict[str, object]]:
    """pybox boxes of this process (other helpers share the engine)."""
    return engine.list_containers({LABEL_MANAGED: "1", LABEL_OWNER: current_owner()})


def named(engine: Engine, name: str) -> list[dict[str, object]]:
    found = engine.list_containers({LABEL_MANAGED: "1"})
    return [c for c in found if f"/{name}" in list(c.get("Names") or [])]


def test_a_wheel_is_installed_read_out_and_the_box_is_gone(
    engine: Engine, stdlib: ImageRecord
) -> None:
    before = {c["Id"] for c in mine(engine)}
    said: list[str] = []
    started = time.monotonic()
    result = install_libraries(
        engine,
        stdlib,
        ["six"],
        owner=current_owner(),
        environ=os.environ,
        max_bytes=MAX_BYTES,
        timeout_s=300.0,
        say=said.append,
    )
    taken = time.monotonic() - started
    print(f"\ninstall of six in an install box of stdlib: {taken:.2f} s", *said, sep="\n  ")
    assert result.requested == ("six",)
    [six] = result.packages
    assert six.name == "six" and six.version.count(".") >= 1
    assert six.wheel_sha256 is not None and len(six.wheel_sha256) == 64
    assert result.site_relpath.startswith(".local/lib/python3.")
    assert result.site_relpath.endswith("/site-packages")
    with tarfile.open(fileobj=io.BytesIO(result.tar_bytes), mode="r:") as archive:
        members = archive.getmembers()
        module = archive.extractfile("six.py")
        assert module is not None
        source = module.read()
    names = {m.name for m in members}
    assert "six.py" in names and f"six-{six.version}.dist-info/METADATA" in names
    assert b"Utilities for writing code that runs on Python 2 and 3" in source
    for info in members:
        assert info.isreg() or info.isdir(), info.name
        assert not info.name.startswith("/") and ".." not in info.name.split("/")
        assert info.uid == 0 and info.gid == 0 and not info.mode & 0o7000
    # The RECORD pip wrote names six.py's own hash: the files are pip's, unchanged.
    with tarfile.open(fileobj=io.BytesIO(result.tar_bytes), mode="r:") as archive:
        record = archive.extractfile(f"six-{six.version}.dist-info/RECORD")
        assert record is not None
        lines = record.read().decode().splitlines()
    digest = hashlib.sha256(source).digest()
    expected = "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
    assert any(line.startswith(f"six.py,{expected},") for line in lines)
    assert 0 < result.duration_s <= taken + 0.01
    assert named(engine, result.install_box) == []
    assert engine.inspect_container(result.install_box) is None
    assert {c["Id"] for c in mine(engine)} == before
    # The engine's default bridge, by the name the engine shows it under.
    bridge = "podman" if engine.name == "podman" else "bridge"
    assert any(f"network: {bridge}" in line for line in said)
    assert any("removed (confirmed)" in line for line in said)


def test_a_bad_requirement_creates_nothing(engine: Engine, stdlib: ImageRecord) -> None:
    before = {c["Id"] for c in mine(engine)}
    with pytest.raises(InvalidRequest, match="direct reference"):
        install_libraries(
            engine,
            stdlib,
            ["six", "six @ https://example.invalid/six.whl"],
            owner=current_owner(),
            environ=os.environ,
            max_bytes=MAX_BYTES,
        )
    assert {c["Id"] for c in mine(engine)} == before


def test_a_version_the_index_does_not_have_is_pips_explanation(
    engine: Engine, stdlib: ImageRecord
) -> None:
    before = {c["Id"] for c in mine(engine)}
    with pytest.raises(LibraryInstallError) as failed:
        install_libraries(
            engine,
            stdlib,
            ["six==0.0.1"],
            owner=current_owner(),
            environ=os.environ,
            max_bytes=MAX_BYTES,
        )
    quote = failed.value.quote
    assert quote is not None
    assert "six==0.0.1" in quote.said(str(failed.value))
    assert "Nothing was installed" in str(failed.value)
    assert {c["Id"] for c in mine(engine)} == before


def test_over_the_size_limit_is_refused_and_the_box_is_gone(
    engine: Engine, stdlib: ImageRecord
) -> None:
    before = {c["Id"] for c in mine(engine)}
    with pytest.raises(LibraryInstallError, match=r"more than the limit of .*\(4096 bytes\)"):
        install_libraries(
            engine, stdlib, ["six"], owner=current_owner(), environ=os.environ, max_bytes=4096
        )
    assert {c["Id"] for c in mine(engine)} == before


def test_a_lock_built_image_installs_for_its_own_python(engine: Engine, state_dir: Path) -> None:
    data = StateStore(state_dir).image("data")
    if data is None:
        pytest.skip("the data image is not recorded")
    result = install_libraries(
        engine, data, ["idna"], owner=current_owner(), environ=os.environ, max_bytes=MAX_BYTES
    )
    print(f"\ninstall of idna in an install box of data: {result.duration_s:.2f} s")
    assert [p.name for p in result.packages] == ["idna"]
    with tarfile.open(fileobj=io.BytesIO(result.tar_bytes), mode="r:") as archive:
        assert "idna/__init__.py" in archive.getnames()
    assert engine.inspect_container(result.install_box) is None
