"""Facts about this machine: apt sources, the OS codename, and who owns a box."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

import pytest

from pybox._adapters.host_facts import (
    AptSource,
    _start_ticks,
    apt_sources,
    base_mirror,
    current_owner,
    os_codename,
    owner_alive,
)
from pybox._core.errors import ConfigError

MIRROR = "http://mirror.invalid/debian"
SECURITY = "http://security.mirror.invalid/debian-security"
KEYRING = "/usr/share/keyrings/example-archive-keyring.gpg"


@pytest.fixture
def etc(tmp_path: Path) -> Path:
    path = tmp_path / "apt"
    (path / "sources.list.d").mkdir(parents=True)
    return path


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


# --- deb822 .sources files ------------------------------------------------------------------


def test_deb822_sources(etc: Path) -> None:
    path = write(
        etc / "sources.list.d" / "debian.sources",
        f"""\
# The main archive.
Types: deb
URIs: {MIRROR}/
Suites: bookworm bookworm-updates
Components: main contrib
Signed-By: {KEYRING}

Types: deb deb-src
URIs: {SECURITY}
Suites: bookworm-security
Components: main
""",
    )
    assert apt_sources(etc) == [
        AptSource(MIRROR, "bookworm", ("main", "contrib"), KEYRING, str(path)),
        AptSource(MIRROR, "bookworm-updates", ("main", "contrib"), KEYRING, str(path)),
        AptSource(SECURITY, "bookworm-security", ("main",), None, str(path)),
    ]


def test_deb822_several_uris_times_several_suites(etc: Path) -> None:
    write(
        etc / "sources.list.d" / "multi.sources",
        "Types: deb\nURIs: http://a.invalid/x http://b.invalid/y\n"
        "Suites: s1 s2\nComponents: main\n",
    )
    found = [(s.uri, s.suite) for s in apt_sources(etc)]
    assert found == [
        ("http://a.invalid/x", "s1"),
        ("http://a.invalid/x", "s2"),
        ("http://b.invalid/y", "s1"),
        ("http://b.invalid/y", "s2"),
    ]


def test_deb822_skips_deb_src_only_and_disabled_stanzas(etc: Path) -> None:
    write(
        etc / "sources.list.d" / "mixed.sources",
        f"""\
Types: deb-src
URIs: {MIRROR}
Suites: bookworm
Components: main

Types: deb
URIs: http://disabled.invalid/debian
Suites: bookworm
Components: main
Enabled: no

Types: deb
URIs: http://enabled.invalid/debian
Suites: bookworm
Components: main
Enabled: yes
""",
    )
    assert [s.uri for s in apt_sources(etc)] == ["http://enabled.invalid/debian"]


@pytest.mark.parametrize("value", ["No", "false", "off"])
def test_deb822_enabled_is_read_as_a_boolean(etc: Path, value: str) -> None:
    write(
        etc / "sources.list.d" / "off.sources",
        f"Types: deb\nURIs: {MIRROR}\nSuites: bookworm\nComponents: main\nEnabled: {value}\n",
    )
    assert apt_sources(etc) == []


def test_deb822_field_names_are_case_insensitive_and_comments_ignored(etc: Path) -> None:
    write(
        etc / "sources.list.d" / "case.sources",
        f"""\
# Types: deb-src
types: deb
uris: {MIRROR}
# Suites: wrong
SUITES: trixie
components: main non-free-firmware
signed-by: {KEYRING}
""",
    )
    assert apt_sources(etc) == [
        AptSource(
            MIRROR,
            "trixie",
            ("main", "non-free-firmware"),
            KEYRING,
            str(etc / "sources.list.d" / "case.sources"),
        )
    ]


def test_deb822_inline_key_is_not_taken_as_a_keyring_path(etc: Path) -> None:
    write(
        etc / "sources.list.d" / "inline.sources",
        f"""\
Types: deb
URIs: {MIRROR}
Suites: bookworm
Components: main
Signed-By:
 -----BEGIN PGP PUBLIC KEY BLOCK-----
 .
 mDMEZ...
 -----END PGP PUBLIC KEY BLOCK-----
""",
    )
    [source] = apt_sources(etc)
    assert source.keyring is None
    assert source.components == ("main",)


def test_deb822_stanzas_separated_by_whitespace_only_lines(etc: Path) -> None:
    write(
        etc / "sources.list.d" / "ws.sources",
        "Types: deb\nURIs: http://one.invalid/d\nSuites: a\nComponents: main\n   \n"
        "Types: deb\nURIs: http://two.invalid/d\nSuites: b\nComponents: main\n",
    )
    assert [(s.uri, s.suite) for s in apt_sources(etc)] == [
        ("http://one.invalid/d", "a"),
        ("http://two.invalid/d", "b"),
    ]


# --- one-line sources.list ----------------------------------------------------------------------


def test_one_line_sources(etc: Path) -> None:
    path = write(
        etc / "sources.list",
        f"""\
# A comment
#deb {MIRROR} sid main
deb {MIRROR}/ bookworm main contrib non-free
   deb [arch=amd64 signed-by={KEYRING}] {SECURITY} bookworm-security main
deb-src {MIRROR} bookworm main

deb [ signed-by={KEYRING} ]  http://other.invalid/ubuntu   jammy   main   universe
""",
    )
    assert apt_sources(etc) == [
        AptSource(MIRROR, "bookworm", ("main", "contrib", "non-free"), None, str(path)),
        AptSource(SECURITY, "bookworm-security", ("main",), KEYRING, str(path)),
        AptSource("http://other.invalid/ubuntu", "jammy", ("main", "universe"), KEYRING, str(path)),
    ]


def test_one_line_without_components(etc: Path) -> None:
    write(etc / "sources.list", "deb http://flat.invalid/repo ./\n")
    [source] = apt_sources(etc)
    assert source.suite == "./"
    assert source.components == ()


def test_reading_order_is_sources_list_then_sorted_directory(etc: Path) -> None:
    write(etc / "sources.list", "deb http://first.invalid/d s main\n")
    write(
        etc / "sources.list.d" / "b.sources",
        "Types: deb\nURIs: http://third.invalid/d\nSuites: s\nComponents: main\n",
    )
    write(etc / "sources.list.d" / "a.list", "deb http://second.invalid/d s main\n")
    write(etc / "sources.list.d" / "c.list.save", "deb http://ignored.invalid/d s main\n")
    write(etc / "sources.list.d" / "d.disabled", "deb http://ignored.invalid/d s main\n")
    assert [s.uri for s in apt_sources(etc)] == [
        "http://first.invalid/d",
        "http://second.invalid/d",
        "http://third.invalid/d",
    ]


def test_no_apt_configuration_at_all(tmp_path: Path) -> None:
    assert apt_sources(tmp_path / "missing") == []


# --- base_mirror ----------------------------------------------------------------------------------


def source(uri: str, suite: str, *components: str) -> AptSource:
    return AptSource(uri, suite, components, None, "test")


def test_base_mirror_picks_the_suite_with_main() -> None:
    sources = [
        source(SECURITY, "bookworm-security", "main"),
        source("http://contrib-only.invalid/d", "bookworm", "contrib"),
        source(MIRROR, "bookworm-updates", "main"),
        source(MIRROR, "bookworm", "contrib", "main"),
        source("http://later.invalid/d", "bookworm", "main"),
    ]
    assert base_mirror(sources, "bookworm") == sources[3]


def test_base_mirror_from_parsed_files(etc: Path) -> None:
    write(
        etc / "sources.list.d" / "debian.sources",
        f"Types: deb\nURIs: {MIRROR}\nSuites: bookworm bookworm-updates\nComponents: main\n",
    )
    chosen = base_mirror(apt_sources(etc), "bookworm")
    assert chosen.uri == MIRROR
    assert chosen.suite == "bookworm"


def test_base_mirror_missing_names_mirror_flag_and_what_was_found() -> None:
    sources = [source(MIRROR, "bookworm-updates", "main"), source(MIRROR, "trixie", "contrib")]
    with pytest.raises(ConfigError) as info:
        base_mirror(sources, "trixie")
    message = str(info.value)
    assert "--mirror" in message
    assert "'trixie'" in message
    assert f"{MIRROR} bookworm-updates" in message


def test_base_mirror_with_no_sources_at_all() -> None:
    with pytest.raises(ConfigError) as info:
        base_mirror([], "bookworm")
    assert "found: none" in str(info.value)
    assert "--mirror" in str(info.value)


# --- os_codename ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('NAME="Debian GNU/Linux"\nVERSION_CODENAME=bookworm\nID=debian\n', "bookworm"),
        ('VERSION_CODENAME="trixie"\n', "trixie"),
        ("VERSION_CODENAME= jammy \n", "jammy"),
        ("VERSION_CODENAME=\n", None),
        ('NAME="Arch"\nID=arch\n', None),
        ("", None),
        ("UBUNTU_CODENAME=noble\n", None),
    ],
)
def test_os_codename(tmp_path: Path, text: str, expected: str | None) -> None:
    assert os_codename(write(tmp_path / "os-release", text)) == expected


def test_os_codename_of_a_missing_file(tmp_path: Path) -> None:
    assert os_codename(tmp_path / "missing") is None


# --- box owners -----------------------------------------------------------------------------------


def test_current_owner_names_this_host_and_process() -> None:
    host, pid, ticks = current_owner().rsplit(":", 2)
    assert host == socket.gethostname()
    assert int(pid) == os.getpid()
    assert ticks.isdigit()
    assert ticks != "0"


def test_current_owner_is_alive() -> None:
    assert owner_alive(current_owner()) is True


def test_current_owner_is_stable() -> None:
    assert current_owner() == current_owner()


def test_reused_pid_with_other_start_ticks_is_not_alive() -> None:
    host, pid, ticks = current_owner().rsplit(":", 2)
    assert owner_alive(f"{host}:{pid}:{int(ticks) + 1}") is False


def test_dead_process_is_not_alive() -> None:
    child = subprocess.Popen(["true"])
    child.wait()
    assert owner_alive(f"{socket.gethostname()}:{child.pid}:1") is False


def test_owner_on_another_host_cannot_be_told() -> None:
    _, pid, ticks = current_owner().rsplit(":", 2)
    assert owner_alive(f"not-{socket.gethostname()}:{pid}:{ticks}") is None


@pytest.mark.parametrize("owner", ["", "garbage", "host:1"])
def test_malformed_owner_cannot_be_told(owner: str) -> None:
    assert owner_alive(owner) is None


def test_non_numeric_pid_cannot_be_told() -> None:
    assert owner_alive(f"{socket.gethostname()}:abc:123") is None


def test_start_ticks_survive_a_command_name_with_spaces_and_parentheses() -> None:
    comm = Path(f"/proc/{os.getpid()}/comm")
    before = _start_ticks(os.getpid())
    assert before is not None
    original = comm.read_text().rstrip("\n")
    try:
        comm.write_text("x) (y z")
    except OSError:
        pytest.skip("cannot rename this process")
    try:
        assert _start_ticks(os.getpid()) == before
    finally:
        comm.write_text(original)


def test_start_ticks_of_a_missing_process() -> None:
    child = subprocess.Popen(["true"])
    child.wait()
    assert _start_ticks(child.pid) is None
