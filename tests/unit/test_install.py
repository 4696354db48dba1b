"""What an install box hands back, made safe: the tar rewriting (links, `..`,
absolute names, setuid bits), pip's report, pip's failures quoted as the box's
words, the box's measure. The box itself, with the fake engine: test_install_box.py."""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Iterable
from typing import Any

import pytest

from pybox._core.errors import LibraryInstallError
from pybox._core.images import ImageRecord
from pybox._core.limits import MIB
from pybox._features.sandboxes import install
from pybox._features.sandboxes.site_tar import (
    InstalledPackage,
    measured_size,
    packages_from_report,
    pip_failure,
    read_member,
    safe_site_tar,
    site_relpath,
)
from tests.unit.fake_engine import TEST_IMAGE_ID, TEST_RECIPE_HASH

SIX_SHA = "4721f391ed90541fddacab5acf947aa0d3dc7d27b2e1e8eda2be8970586c3274"
IDNA_SHA = "b" * 64
IMAGE = ImageRecord(
    name="stdlib",
    image_id=TEST_IMAGE_ID,
    recipe_hash=TEST_RECIPE_HASH,
    python_path="/usr/bin/python3",
    built_at="2026-01-01T00:00:00Z",
)
REPORT_PATH = f"{install.INSTALL_DIR}/{install.REPORT_NAME}"
TARGET_PATH = f"{install.INSTALL_DIR}/{install.TARGET_NAME}"


def member(
    name: str, kind: bytes = tarfile.REGTYPE, **fields: Any
) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type = kind
    data: bytes = fields.pop("data", b"")
    for key, value in fields.items():
        setattr(info, key, value)
    if kind in (tarfile.REGTYPE, tarfile.AREGTYPE):
        info.size = len(data)
    return info, data


def tar_of(members: Iterable[tuple[tarfile.TarInfo, bytes]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as archive:
        for info, data in members:
            archive.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return buffer.getvalue()


def entries(tar_bytes: bytes) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(tar_bytes), mode="r:") as archive:
        return {info.name: info for info in archive.getmembers()}


def contents(tar_bytes: bytes, name: str) -> bytes:
    with tarfile.open(fileobj=io.BytesIO(tar_bytes), mode="r:") as archive:
        extracted = archive.extractfile(name)
        assert extracted is not None
        return extracted.read()


SIX_FOLDER = [
    member("target", tarfile.DIRTYPE, mode=0o755),
    member("target/six.py", data=b"# six\n", mode=0o644, uid=1234, gid=99, uname="u"),
    member("target/six-1.17.0.dist-info", tarfile.DIRTYPE, mode=0o755),
    member("target/six-1.17.0.dist-info/METADATA", data=b"Name: six\n", mode=0o644),
]


# -- the tar rewriting ---------------------------------------------------------


def test_files_and_folders_come_out_relative_owned_by_0_with_their_contents() -> None:
    site = safe_site_tar(tar_of(SIX_FOLDER), "target", 10 * MIB)
    found = entries(site.tar_bytes)
    assert sorted(found) == ["six-1.17.0.dist-info", "six-1.17.0.dist-info/METADATA", "six.py"]
    assert all(info.uid == 0 and info.gid == 0 and not info.uname for info in found.values())
    assert found["six.py"].isreg() and found["six-1.17.0.dist-info"].isdir()
    assert contents(site.tar_bytes, "six.py") == b"# six\n"
    assert (site.files, site.directories, site.file_bytes, site.skipped) == (2, 1, 16, ())


def test_links_and_special_files_are_left_out_and_named() -> None:
    raw = tar_of(
        [
            *SIX_FOLDER,
            member("target/passwd", tarfile.SYMTYPE, linkname="/etc/passwd"),
            member("target/up", tarfile.SYMTYPE, linkname="../../.."),
            member("target/hard", tarfile.LNKTYPE, linkname="target/six.py"),
            member("target/fifo", tarfile.FIFOTYPE),
            member("target/tty", tarfile.CHRTYPE, devmajor=5, devminor=0),
            member("target/disk", tarfile.BLKTYPE, devmajor=8, devminor=0),
        ]
    )
    site = safe_site_tar(raw, "target", 10 * MIB)
    assert set(entries(site.tar_bytes)) == {
        "six.py",
        "six-1.17.0.dist-info",
        "six-1.17.0.dist-info/METADATA",
    }
    skipped = "\n".join(site.skipped)
    assert "passwd: a symbolic link to /etc/passwd" in skipped
    assert "up: a symbolic link to ../../.." in skipped
    assert "hard: a hard link to target/six.py" in skipped
    for name in ("fifo", "tty", "disk"):
        assert f"{name}: a device, FIFO or other special file" in skipped
    assert len(site.skipped) == 6


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("/etc/cron.d/evil", "an absolute name"),
        ("target/../../etc/evil", "a name with '..'"),
        ("../evil", "a name with '..'"),
        ("target/pkg/../../evil", "a name with '..'"),
        ("elsewhere/evil.py", "outside target/"),
        ("evil.py", "outside target/"),
        ("target/bad\x1bname", "control characters"),
    ],
)
def test_names_that_could_land_outside_the_folder_are_left_out(name: str, why: str) -> None:
    site = safe_site_tar(tar_of([*SIX_FOLDER, member(name, data=b"x")]), "target", 10 * MIB)
    assert not any("evil" in found or "bad" in found for found in entries(site.tar_bytes))
    assert len(site.skipped) == 1 and why in site.skipped[0]
    assert "\x1b" not in site.skipped[0]


def test_setuid_setgid_and_sticky_bits_are_stripped_and_the_owner_can_always_unpack() -> None:
    raw = tar_of(
        [
            member("target/bin", tarfile.DIRTYPE, mode=0o1777),
            member("target/bin/tool", data=b"#!/bin/sh\n", mode=0o4755),
            member("target/bin/group", data=b"x", mode=0o2750),
            member("target/locked", data=b"x", mode=0o000),
            member("target/closed", tarfile.DIRTYPE, mode=0o000),
        ]
    )
    found = entries(safe_site_tar(raw, "target", 10 * MIB).tar_bytes)
    assert found["bin"].mode == 0o777
    assert found["bin/tool"].mode == 0o755
    assert found["bin/group"].mode == 0o750
    assert found["locked"].mode == 0o600
    assert found["closed"].mode == 0o700


def test_a_repeat_and_a_name_under_a_file_are_left_out() -> None:
    raw = tar_of(
        [
            *SIX_FOLDER,
            member("target/six.py", data=b"second"),
            member("target/six.py/inside", data=b"x"),
        ]
    )
    site = safe_site_tar(raw, "target", 10 * MIB)
    assert contents(site.tar_bytes, "six.py") == b"# six\n"
    assert "six.py/inside" not in entries(site.tar_bytes)
    assert [s.split(": ", 1)[1] for s in site.skipped] == [
        "a second entry of that name",
        "its folder is a file",
    ]


def test_folders_the_tar_leaves_out_are_made_before_their_files() -> None:
    site = safe_site_tar(tar_of([member("target/a/b/c.py", data=b"x")]), "target", MIB)
    names = list(entries(site.tar_bytes))
    assert names == ["a", "a/b", "a/b/c.py"]
    assert entries(site.tar_bytes)["a"].isdir()
    assert site.skipped == ()


def test_files_over_the_size_limit_are_refused_naming_the_size_and_the_limit() -> None:
    raw = tar_of([member("target/big", data=b"x" * 3000), member("target/more", data=b"y" * 3000)])
    assert safe_site_tar(raw, "target", 6000).file_bytes == 6000
    with pytest.raises(LibraryInstallError) as refused:
        safe_site_tar(raw, "target", 5999)
    assert "5.9 KiB (6000 bytes), more than the limit of 5.9 KiB (5999 bytes)" in str(refused.value)


def test_a_tar_that_is_not_one_is_an_error() -> None:
    with pytest.raises(LibraryInstallError, match="could not be read as a tar"):
        safe_site_tar(b"not a tar" * 200, "target", MIB)


# -- pip's report, its failures, the box's own words -------------------------------


def pip_report(*installs: dict[str, Any]) -> dict[str, Any]:
    return {"version": "1", "pip_version": "26.3", "install": list(installs), "environment": {}}


def installed(name: str, version: str, archive_info: dict[str, Any] | None) -> dict[str, Any]:
    info: dict[str, Any] = {"url": f"https://index.invalid/{name}-{version}-py3-none-any.whl"}
    if archive_info is not None:
        info["archive_info"] = archive_info
    return {
        "download_info": info,
        "is_direct": False,
        "requested": True,
        "metadata": {"metadata_version": "2.1", "name": name, "version": version},
    }


def test_the_report_names_each_package_its_version_and_its_wheels_hash() -> None:
    report = pip_report(
        installed("six", "1.17.0", {"hash": f"sha256={SIX_SHA}", "hashes": {"sha256": SIX_SHA}}),
        installed("IDNA", "3.10", {"hash": f"sha256={IDNA_SHA}"}),
        installed("Zope.Interface", "7.0", {}),
        installed("nohash", "1.0", None),
        installed("md5only", "1.0", {"hash": "md5=" + "c" * 32}),
        installed("badhash", "1.0", {"hashes": {"sha256": "not-hex"}}),
    )
    assert packages_from_report(report) == (
        InstalledPackage("badhash", "1.0", None),
        InstalledPackage("idna", "3.10", IDNA_SHA),
        InstalledPackage("md5only", "1.0", None),
        InstalledPackage("nohash", "1.0", None),
        InstalledPackage("six", "1.17.0", SIX_SHA),
        InstalledPackage("zope-interface", "7.0", None),
    )


@pytest.mark.parametrize(
    "report",
    [
        [],
        {"version": "1"},
        {"install": "six"},
        pip_report({"metadata": {"name": "six"}}),
        pip_report({"metadata": {"name": "../evil", "version": "1"}}),
        pip_report({"metadata": {"name": "six", "version": "1 ; rm"}}),
        pip_report("six==1"),  # type: ignore[arg-type]
    ],
)
def test_a_report_without_names_and_versions_is_refused(report: Any) -> None:
    with pytest.raises(LibraryInstallError, match="pip's install report"):
        packages_from_report(report)


def test_the_report_is_read_out_of_the_engines_tar_of_it() -> None:
    raw = tar_of([member("report.json", data=b'{"install": []}')])
    assert read_member(raw) == b'{"install": []}'
    with pytest.raises(LibraryInstallError, match="pip wrote no install report"):
        read_member(tar_of([member("report.json", tarfile.SYMTYPE, linkname="/etc/passwd")]))


def test_a_pip_failure_quotes_pips_own_words_as_the_boxs() -> None:
    lines = [
        "Collecting six==0.0.1",
        "ERROR: Could not find a version that satisfies the requirement six==0.0.1",
        "ERROR: No matching distribution found for six==0.0.1 \x1b[31m",
    ]
    message, quote = pip_failure(1, lines, room_bytes=MIB, max_bytes=MIB)
    assert quote is not None
    said = quote.said(message)
    assert said.startswith("while installing six==0.0.1: no wheel of that version")
    assert "No matching distribution found for six==0.0.1" in said
    assert message.startswith("Installing the libraries failed (pip exit 1)")
    assert message.endswith("and try again.")
    assert "\x1b" not in message


def test_a_full_disk_is_the_size_limit_not_pips_words() -> None:
    lines = [
        "ERROR: Could not install packages due to an OSError: [Errno 28] No space left on device"
    ]
    message, quote = pip_failure(1, lines, room_bytes=2 * MIB, max_bytes=MIB)
    assert quote is None
    assert "over the limit of 1.0 MiB (1048576 bytes)" in message


def test_the_boxs_measure_is_checked_against_the_limit() -> None:
    ok = [json.dumps({"bytes": 1000, "entries": 3})]
    assert measured_size(0, ok, 1000) == 1000 + 3 * 2048 + MIB
    with pytest.raises(
        LibraryInstallError,
        match=r"1.0 KiB \(1000 bytes\), more than the limit of 1.0 KiB \(999 bytes\)",
    ):
        measured_size(0, ok, 999)
    with pytest.raises(LibraryInstallError, match="more than 200000"):
        measured_size(0, [json.dumps({"bytes": 1, "entries": 200_001})], MIB)
    with pytest.raises(LibraryInstallError, match="Measuring the installed files failed"):
        measured_size(1, ["Traceback"], MIB)


@pytest.mark.parametrize("site", ["/root/.local", "../.local", ".local/../..", "", 3, "a//b"])
def test_a_user_site_that_is_not_a_plain_relative_path_is_refused(site: object) -> None:
    assert site_relpath([json.dumps({"site": site})]) is None
