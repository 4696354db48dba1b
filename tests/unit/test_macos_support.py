"""The quarantine mark on returned files, and the YAML reader for Colima's files."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from pybox._adapters import simple_yaml
from pybox._adapters.quarantine import QUARANTINE_ATTR, mark_quarantined, quarantine_value
from pybox._boxes.outputs import prepare_destination, publish
from pybox._core.errors import PyboxError


def test_quarantine_value_format() -> None:
    assert quarantine_value(now_s=0x5F0E1C2A) == "0081;5f0e1c2a;pybox;"


def test_on_macos_the_mark_is_written_by_usr_bin_xattr(tmp_path: Path) -> None:
    log = tmp_path / "xattr-calls.json"
    tool = tmp_path / "xattr"
    tool.write_text(
        f"#!{sys.executable}\nimport json, sys\n"
        f"open({str(log)!r}, 'w').write(json.dumps(sys.argv[1:]))\n"
    )
    tool.chmod(0o755)
    files = [tmp_path / "a.txt", tmp_path / "b.txt"]
    mark_quarantined(files, system="darwin", xattr_tool=str(tool))
    argv = json.loads(log.read_text())
    assert argv[:2] == ["-w", QUARANTINE_ATTR]
    assert argv[2].startswith("0081;") and argv[2].endswith(";pybox;")
    assert argv[3:] == [str(f) for f in files]


def test_a_failing_xattr_is_an_error(tmp_path: Path) -> None:
    tool = tmp_path / "xattr"
    tool.write_text(f"#!{sys.executable}\nimport sys\nsys.exit('no such xattr')\n")
    tool.chmod(0o755)
    with pytest.raises(PyboxError, match="could not quarantine"):
        mark_quarantined([tmp_path / "a"], system="darwin", xattr_tool=str(tool))


@pytest.mark.skipif(not hasattr(os, "setxattr"), reason="no extended attributes here")
def test_published_files_carry_the_mark_and_are_written_at_once(tmp_path: Path) -> None:
    destination = tmp_path / "results"
    staging = prepare_destination(destination)
    (staging / "sub").mkdir()
    (staging / "sub" / "report.txt").write_text("42")
    (staging / "top.bin").write_bytes(b"\0")
    publish(staging, destination, lambda paths: mark_quarantined(paths, system="linux"))
    assert not staging.exists()
    for path in (destination / "sub" / "report.txt", destination / "top.bin"):
        assert os.getxattr(path, f"user.{QUARANTINE_ATTR}").startswith(b"0081;")


def test_a_marking_failure_keeps_the_files_and_publishes_nothing(tmp_path: Path) -> None:
    destination = tmp_path / "results"
    staging = prepare_destination(destination)
    (staging / "keep.txt").write_text("mine")

    def refuse(paths: list[Path]) -> None:
        raise PyboxError("xattr broke.")

    with pytest.raises(PyboxError, match="kept, unmarked, in"):
        publish(staging, destination, refuse)
    assert not destination.exists()
    assert (staging / "keep.txt").read_text() == "mine"


# -- the YAML reader ------------------------------------------------------------------------

COLIMA_YAML = """\
# Number of CPUs to be allocated to the virtual machine.
# Default: 2
cpu: 2
disk: 100 # GiB
memory: 2
arch: host
runtime: docker
hostname: ""
kubernetes:
  enabled: false
  version: v1.33.4+k3s1
  k3sArgs:
    - --disable=traefik
autoActivate: false
network:
  address: false
  dns: []
  dnsHosts:
    host.docker.internal: host.lima.internal
forwardAgent: false
docker: {}
vmType: vz
portForwarder: none
mountType: virtiofs
mounts: []
provision:
  - mode: system
    script: |
      #!/bin/sh
      echo "a: b"
sshConfig: false
env: {}
"""


def test_reads_a_colima_profile() -> None:
    data = simple_yaml.load(COLIMA_YAML)
    assert data["portForwarder"] == "none"
    assert data["mounts"] == []
    assert data["kubernetes"] == {
        "enabled": False,
        "version": "v1.33.4+k3s1",
        "k3sArgs": ["--disable=traefik"],
    }
    assert data["hostname"] == ""
    assert data["network"]["dnsHosts"] == {"host.docker.internal": "host.lima.internal"}
    assert data["provision"][0]["mode"] == "system"
    assert data["sshConfig"] is False


def test_reads_lima_sequences_at_the_key_indent() -> None:
    data = simple_yaml.load(
        "mounts:\n- location: '~'\n  writable: true\n- location: /tmp/colima\n"
        "portForwards:\n- guestIP: 0.0.0.0\n  ignore: true\n  guestPortRange: [1, 65535]\n"
    )
    assert data["mounts"] == [
        {"location": "~", "writable": True},
        {"location": "/tmp/colima"},
    ]
    assert data["portForwards"][0]["guestPortRange"] == [1, 65535]


@pytest.mark.parametrize(
    "text",
    [
        "a: &anchor 1\n",
        "mounts: [{location: x}]\n",
        "a: 1\n  b: 2\n",
        "a: 1\na: 2\n",
        "just text\n",
        'a: "unterminated\n',
        "a:\n\t- tab\n",
    ],
)
def test_anything_unusual_is_refused_not_guessed(text: str) -> None:
    with pytest.raises(ValueError):
        simple_yaml.load(text)
