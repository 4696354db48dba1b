"""Building the stdlib tree without root: the choice, the needs, the command and the hook."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from pybox._adapters import rootfs_unshare
from pybox._adapters.rootfs import LocalRootfsBuilder
from pybox._adapters.rootfs_unshare import (
    FACTS_MARKER,
    UnshareRootfsBuilder,
    build_access,
    has_subordinate_ids,
    hook_script,
    local_builder,
    mmdebstrap_command,
)
from pybox._core.errors import ImageBuildError


def test_root_uses_debootstrap_and_anyone_else_mmdebstrap(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert isinstance(local_builder(), LocalRootfsBuilder)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert isinstance(local_builder(), UnshareRootfsBuilder)


def test_the_command_is_an_argument_list_in_unshare_mode() -> None:
    argv = mmdebstrap_command(
        "/tmp/w/rootfs.tar",
        suite="bookworm",
        mirror="http://mirror.invalid/debian",
        packages=("python3",),
        keyring=None,
        hook="/tmp/w/prepare-hook",
    )
    assert argv[:4] == ["mmdebstrap", "--mode=unshare", "--variant=minbase", "--include=python3"]
    assert "--customize-hook=/tmp/w/prepare-hook" in argv
    assert argv[-3:] == ["bookworm", "/tmp/w/rootfs.tar", "http://mirror.invalid/debian"]


def test_subordinate_ids_need_a_whole_range(tmp_path: Path) -> None:
    subuid = tmp_path / "subuid"
    subuid.write_text(
        "other:100000:65536\nada:165536:65536\nshort:231072:1000\n1005:300000:65536\n"
    )
    assert has_subordinate_ids(subuid, "ada", 1001)
    assert has_subordinate_ids(subuid, "bob", 1005)  # listed by number
    assert not has_subordinate_ids(subuid, "short", 1002)
    assert not has_subordinate_ids(subuid, "nobody-here", 1003)
    assert not has_subordinate_ids(tmp_path / "missing", "ada", 1001)


def test_a_user_without_the_tools_is_told_each_missing_need_and_its_fix(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setattr(shutil, "which", lambda name: None)
    access = build_access()
    assert not access.is_root and "mmdebstrap --mode=unshare" in access.method
    fixes = {need.what.split(" (")[0]: need.fix for need in access.missing}
    assert fixes["mmdebstrap"] == "sudo apt-get install mmdebstrap"
    assert fixes["newuidmap and newgidmap"] == "sudo apt-get install uidmap"
    with pytest.raises(ImageBuildError) as raised:
        UnshareRootfsBuilder().require_tools(lambda line: None)
    message = str(raised.value)
    assert "not root" in message and "sudo apt-get install mmdebstrap" in message
    assert "needs root" not in message


def test_root_needs_only_debootstrap_and_tar(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    access = build_access()
    assert access.is_root and access.method == "debootstrap, as root"
    assert [need.what for need in access.needs] == ["debootstrap", "tar"]


def test_the_hook_prepares_the_tree_it_is_given_and_reports_the_packages(
    tmp_path: Path,
) -> None:
    tree = tmp_path / "tree"
    for folder in ("etc", "var/lib/dpkg", "usr/bin", "usr/share/doc/x"):
        (tree / folder).mkdir(parents=True)
    (tree / "etc/passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
    (tree / "etc/group").write_text("root:x:0:\n")
    (tree / "var/lib/dpkg/status").write_text(
        "Package: python3\nStatus: install ok installed\nVersion: 3.11\n"
    )
    setuid = tree / "usr/bin/su"
    setuid.write_text("")
    setuid.chmod(0o4755)
    hook = tmp_path / "prepare-hook"
    hook.write_text(hook_script(shutil.which("python3") or "/usr/bin/python3"))
    hook.chmod(0o755)
    ran = subprocess.run([str(hook), str(tree)], capture_output=True, text=True, check=True)
    facts_line = ran.stdout.strip().splitlines()[-1]
    assert facts_line.startswith(FACTS_MARKER)
    assert json.loads(facts_line[len(FACTS_MARKER) :]) == {"packages": ["python3=3.11"]}
    assert "1 setuid/setgid bits" in ran.stderr
    assert not stat.S_IMODE(setuid.stat().st_mode) & stat.S_ISUID
    assert "sandbox:x:" in (tree / "etc/passwd").read_text()
    assert list((tree / "usr/share/doc").iterdir()) == []


def test_the_hook_carries_the_preparation_and_names_no_file_of_this_user() -> None:
    script = hook_script("/usr/bin/python3")
    assert script.startswith("#!/usr/bin/python3 -I\n")
    assert "def prepare_tree(" in script  # the source travels inside the hook
    assert str(Path(rootfs_unshare.__file__).parent) not in script


def test_a_refused_user_namespace_names_the_switch_that_refused_it() -> None:
    assert rootfs_unshare.userns_fix("kernel.unprivileged_userns_clone is 0").startswith(
        "sudo sysctl -w kernel.unprivileged_userns_clone=1"
    )
    assert "kernel.apparmor_restrict_unprivileged_userns=0" in rootfs_unshare.userns_fix(
        "kernel.apparmor_restrict_unprivileged_userns is 1"
    )
    assert "sudo pybox" not in rootfs_unshare.userns_fix("unshare --user failed: denied")
