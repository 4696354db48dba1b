"""Bytes from a box written into host folders: never through a planted name."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from pybox._adapters.host_files import create_new_file, new_file_mode, replace_file
from pybox._features.experiments import workspace


def test_replace_file_replaces_a_link_and_leaves_its_referent(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"host")
    target = tmp_path / "target"
    target.symlink_to(victim)
    replace_file(target, b"box", 0o640)
    assert victim.read_bytes() == b"host"
    assert not target.is_symlink() and target.read_bytes() == b"box"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["target", "victim"]  # no leftovers


def test_replace_file_gives_the_mode_a_new_file_gets(tmp_path: Path) -> None:
    replace_file(tmp_path / "new", b"x")
    assert stat.S_IMODE((tmp_path / "new").stat().st_mode) == new_file_mode()
    umask = os.umask(0o022)
    os.umask(umask)
    assert new_file_mode() == 0o666 & ~umask


def test_create_new_file_refuses_any_existing_name_even_a_dangling_link(tmp_path: Path) -> None:
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "nowhere")
    with pytest.raises(FileExistsError):
        create_new_file(link, b"box")
    assert not (tmp_path / "nowhere").exists()
    create_new_file(tmp_path / "fresh", b"box", 0o600)
    assert (tmp_path / "fresh").read_bytes() == b"box"


def test_a_collected_artifact_is_not_steered_by_a_link_at_the_old_temporary_name(
    tmp_path: Path,
) -> None:
    """Experiment artifacts were written through `NAME.tmp`: a link there stopped the
    collect (or, without O_NOFOLLOW, would have been written through)."""
    victim = tmp_path / "victim"
    victim.write_bytes(b"host")
    target = tmp_path / ("0" * 64)
    (tmp_path / (target.name + ".tmp")).symlink_to(victim)
    workspace._write_private(target, b"artifact")
    assert target.read_bytes() == b"artifact" and victim.read_bytes() == b"host"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
