"""Building the stdlib image inside pybox's VM, against the scripted fake `colima`.

The fake's `ssh_answers` stand in for the VM's tools, so these tests pin the
exact argv of every step run in the VM, what is sent on stdin, that the build
folder is removed on every exit path, and the refusals (no mirror, odd values).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shlex
import subprocess
import sys
import tarfile
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest
from bench.fake_colima import FakeColima

from pybox._adapters import rootfs_prepare
from pybox._adapters.colima.profile import Colima
from pybox._adapters.colima.rootfs_build import (
    VM_DEBIAN_KEYRING,
    VMRootfsBuilder,
    check_build_source,
    prepare_program,
)
from pybox._adapters.colima.tools import HostTool
from pybox._adapters.state import StateStore
from pybox._core.errors import ConfigError, ImageBuildError
from pybox._core.images import ImageRecord
from pybox._core.posture import BOX_GID, BOX_UID
from pybox._features.images.records import build_stdlib, plan_stdlib
from pybox._frontends.cli import main
from tests.unit.fake_engine import FakeEngine

# The Mac-user environment and the fake tools, shared with the other Colima tests.
from tests.unit.test_colima import colima_env, fake, home  # noqa: F401

MIRROR = "http://127.0.0.1:9/debian"  # loopback: nothing is fetched in these tests
FOLDER = "/var/tmp/pybox-build-AbCdEf1234"
ROOT = f"{FOLDER}/rootfs"
SSH = ["ssh", "--profile", "pybox", "--"]
PROBE = [
    *SSH,
    "dpkg-query",
    "-W",
    "-f=${Package} ${db:Status-Abbrev}\\n",
    "debootstrap",
    "debian-archive-keyring",
    "python3",
]
UPDATE = [*SSH, "sudo", "-n", "apt-get", "update", "-q"]
INSTALL = [
    *SSH,
    "sudo",
    "-n",
    "env",
    "DEBIAN_FRONTEND=noninteractive",
    "apt-get",
    "install",
    "-y",
    "-q",
    "--no-install-recommends",
    "debian-archive-keyring",
]
MKTEMP = [*SSH, "sudo", "-n", "mktemp", "-d", "/var/tmp/pybox-build-XXXXXXXXXX"]
DEBOOTSTRAP = [
    *SSH,
    "sudo",
    "-n",
    "debootstrap",
    "--variant=minbase",
    "--include=python3",
    f"--keyring={VM_DEBIAN_KEYRING}",
    "bookworm",
    ROOT,
    MIRROR,
]
PREPARE = [
    *SSH,
    "sudo",
    "-n",
    "python3",
    "-",
    ROOT,
    "pybox",
    str(BOX_UID),
    str(BOX_GID),
    "/pybox",
    "/usr/bin/python3",
]
TAR = [*SSH, "sudo", "-n", "tar", "--numeric-owner", "-C", ROOT, "-cf", "-", "."]
REMOVE = [*SSH, "sudo", "-n", "rm", "-rf", "--one-file-system", "--", FOLDER]


class ReadingEngine(FakeEngine):
    """Reads the imported tar stream to the end, as the real engine does."""

    def __init__(self) -> None:
        super().__init__()
        self.imported = b""

    def import_image(
        self, tar_chunks: Iterable[bytes], repo: str, tag: str, changes: list[str]
    ) -> str:
        self.imported = b"".join(tar_chunks)
        self.changes = changes
        return super().import_image(iter(()), repo, tag, changes)


def _answers(tmp_path: Path, **overrides: Mapping[str, object]) -> list[dict[str, object]]:
    tree = io.BytesIO()
    with tarfile.open(fileobj=tree, mode="w") as archive:
        data = b"print(42)\n"
        info = tarfile.TarInfo("./usr/bin/python3")
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))
    (tmp_path / "tree.tar").write_bytes(tree.getvalue())
    facts = {"packages": ["base-files=12.4", "python3=3.11.2-1"], "python_found": True}
    answers: dict[str, dict[str, object]] = {
        "probe": {"argv": PROBE[4:], "stdout": "debootstrap ii \npython3 ii \n", "code": 1},
        "update": {"argv": UPDATE[4:]},
        "install": {"argv": INSTALL[4:7]},
        "mktemp": {"argv": MKTEMP[4:7], "stdout": FOLDER + "\n"},
        "debootstrap": {"argv": DEBOOTSTRAP[4:7], "stdout": "I: Base system installed\n"},
        "prepare": {
            "argv": PREPARE[4:8],
            "stdout": json.dumps(facts) + "\n",
            "stderr": "prepared the root filesystem (caches removed, 3 bits cleared)\n",
        },
        "tar": {"argv": TAR[4:7], "stdout_file": str(tmp_path / "tree.tar")},
        "remove": {"argv": REMOVE[4:7]},
    }
    for name, change in overrides.items():
        answers[name] = {**answers[name], **change}
    return list(answers.values())


def _colima(installed: FakeColima, state: Path) -> Colima:
    return Colima(
        HostTool("colima", str(installed.colima), "explicit path"),
        None,
        environ=dict(os.environ),
        docker_config_dir=state / "colima-docker-config",
    )


def stored_hash(record: object) -> str:
    assert isinstance(record, ImageRecord)
    return record.recipe_hash


def _build(installed: FakeColima, state: Path) -> tuple[ReadingEngine, list[str], object]:
    engine = ReadingEngine()
    store = StateStore(state)
    plan = plan_stdlib(engine, store, mirror=MIRROR, suite="bookworm", keyring=VM_DEBIAN_KEYRING)
    lines: list[str] = []
    record = build_stdlib(
        engine, store, plan, lines.append, builder=VMRootfsBuilder(_colima(installed, state))
    )
    return engine, lines, record


def test_the_image_is_built_in_the_vm_with_exactly_these_steps(
    colima_env: Path,  # noqa: F811
    fake: FakeColima,  # noqa: F811
    tmp_path: Path,
) -> None:
    fake.set(running=True, ssh_answers=_answers(tmp_path))
    engine, lines, record = _build(fake, colima_env)
    assert fake.argvs() == [PROBE, UPDATE, INSTALL, MKTEMP, DEBOOTSTRAP, PREPARE, TAR, REMOVE]
    # The preparation is pybox's own module, sent verbatim on stdin.
    prepare_call = fake.calls()[5]
    source = Path(rootfs_prepare.__file__).read_bytes()
    assert prepare_call["stdin_sha256"] == hashlib.sha256(source).hexdigest()
    assert all(call["stdin_sha256"] is None for i, call in enumerate(fake.calls()) if i != 5)
    # The tree streamed out of the VM is what the engine imported, and it was recorded.
    assert engine.imported == (tmp_path / "tree.tar").read_bytes()
    assert engine.names("import_image")[0].startswith("pybox/stdlib:")
    assert f"USER {BOX_UID}:{BOX_GID}" in engine.changes
    assert f"LABEL io.pybox.recipe={stored_hash(record)}" in engine.changes
    stored = StateStore(colima_env).image("stdlib")
    assert stored is not None and stored == record
    assert stored.packages == ("base-files=12.4", "python3=3.11.2-1")
    assert stored.recipe is not None and stored.recipe["mirror"] == MIRROR
    text = "\n".join(lines)
    assert "installing debian-archive-keyring in pybox's VM" in text
    assert "in the VM: prepared the root filesystem" in text
    assert f"removed the build folder {FOLDER}" in text
    # Every step is one `colima ssh` argument list run with pybox's small environment.
    assert all(call["env"]["DOCKER_CONFIG"] for call in fake.calls())


def test_the_recipe_is_the_same_as_on_linux(
    colima_env: Path,  # noqa: F811
) -> None:
    store = StateStore(colima_env)
    in_vm = plan_stdlib(
        FakeEngine(), store, mirror=MIRROR, suite="bookworm", keyring=VM_DEBIAN_KEYRING
    )
    local = plan_stdlib(FakeEngine(), store, mirror=MIRROR, suite="bookworm")
    assert in_vm.recipe.hash == local.recipe.hash
    assert in_vm.keyring == VM_DEBIAN_KEYRING and local.keyring is None


def test_tools_present_in_the_vm_are_not_installed(
    colima_env: Path,  # noqa: F811
    fake: FakeColima,  # noqa: F811
    tmp_path: Path,
) -> None:
    present = "debootstrap ii \ndebian-archive-keyring ii \npython3 ii \n"
    fake.set(running=True, ssh_answers=_answers(tmp_path, probe={"stdout": present, "code": 0}))
    _build(fake, colima_env)
    assert fake.argvs() == [PROBE, MKTEMP, DEBOOTSTRAP, PREPARE, TAR, REMOVE]


@pytest.mark.parametrize("failing", ["debootstrap", "prepare", "tar"])
def test_the_build_folder_is_removed_when_a_step_fails(
    colima_env: Path,  # noqa: F811
    fake: FakeColima,  # noqa: F811
    tmp_path: Path,
    failing: str,
) -> None:
    broken = {failing: {"code": 3, "stderr": f"{failing} broke\n"}}
    fake.set(running=True, ssh_answers=_answers(tmp_path, **broken))
    with pytest.raises(ImageBuildError) as raised:
        _build(fake, colima_env)
    assert "exit 3" in str(raised.value)
    assert fake.argvs()[-1] == REMOVE
    assert StateStore(colima_env).image("stdlib") is None


def test_a_tree_without_python_is_refused_and_removed(
    colima_env: Path,  # noqa: F811
    fake: FakeColima,  # noqa: F811
    tmp_path: Path,
) -> None:
    facts = json.dumps({"packages": [], "python_found": False})
    fake.set(running=True, ssh_answers=_answers(tmp_path, prepare={"stdout": facts}))
    with pytest.raises(ImageBuildError, match="has no /usr/bin/python3"):
        _build(fake, colima_env)
    assert fake.argvs()[-1] == REMOVE and TAR not in fake.argvs()


def test_an_unexpected_build_folder_is_refused_before_anything_runs_in_it(
    colima_env: Path,  # noqa: F811
    fake: FakeColima,  # noqa: F811
    tmp_path: Path,
) -> None:
    odd = {"mktemp": {"stdout": "/home/me; rm -rf /\n"}}
    fake.set(running=True, ssh_answers=_answers(tmp_path, **odd))
    with pytest.raises(ImageBuildError, match="not a folder like /var/tmp/pybox-build-"):
        _build(fake, colima_env)
    assert fake.argvs()[-1] == MKTEMP


@pytest.mark.parametrize(
    ("mirror", "suite", "message"),
    [
        (None, "bookworm", "pass --mirror URL"),
        (MIRROR, None, "pass --suite NAME"),
        (None, None, "pass --mirror URL and --suite NAME"),
        ("file:///srv/debian", "bookworm", "is not a plain http(s) URL"),
        ("http://127.0.0.1/debian $(id)", "bookworm", "is not a plain http(s) URL"),
        ("-http://127.0.0.1/debian", "bookworm", "is not a plain http(s) URL"),
        (MIRROR, "bookworm;id", "is not a Debian suite name"),
        (MIRROR, "--help", "is not a Debian suite name"),
    ],
)
def test_the_mirror_and_suite_must_be_named_and_plain(
    mirror: str | None, suite: str | None, message: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        check_build_source(mirror, suite)
    assert message in str(raised.value)
    assert check_build_source(MIRROR + "/", "bookworm") == (MIRROR, "bookworm")


def test_image_build_without_a_mirror_is_refused_before_the_vm_is_touched(
    colima_env: Path,  # noqa: F811
    fake: FakeColima,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["image", "build", "stdlib", "--suite", "bookworm"]) == 2
    err = capsys.readouterr().err
    assert "pass --mirror URL" in err and "a Mac has no apt sources" in err
    assert fake.argvs() == []


def test_setup_yes_without_a_mirror_starts_nothing(
    colima_env: Path,  # noqa: F811
    fake: FakeColima,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["setup", "--yes"]) == 2
    assert "pass --mirror URL and --suite NAME" in capsys.readouterr().err
    assert all(argv[0] in ("version", "status") for argv in fake.argvs())
    assert fake.state()["running"] is False


def test_setup_dry_run_lists_every_step_in_the_vm(
    colima_env: Path,  # noqa: F811
    fake: FakeColima,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["setup", "--mirror", MIRROR, "--suite", "bookworm"]) == 0
    err = capsys.readouterr().err
    # The build folder is named by `mktemp` in the VM, so the plan shows its template.
    for argv in (PROBE, UPDATE, MKTEMP, DEBOOTSTRAP, PREPARE, TAR, REMOVE):
        planned = [part.replace(FOLDER, "/var/tmp/pybox-build-XXXXXXXXXX") for part in argv]
        assert "would run: " + shlex.join(["colima", *planned]) in err, argv
    assert ", then " + shlex.join(["colima", *INSTALL[:-1], "debootstrap"]) in err
    assert "debootstrap debian-archive-keyring python3: only the missing ones" in err
    assert "never on your Mac" in err
    assert "would download: the VM's Ubuntu packages of debootstrap" in err
    assert f"would download: the Debian packages of python3 and a minimal base from {MIRROR}" in err
    assert "with pybox's rootfs_prepare.py on stdin" in err
    assert "then:   run print(6*7) in a fresh box, then stop the VM" in err
    assert all(argv[0] in ("version", "status") for argv in fake.argvs())
    # Without the flags the dry run still lists everything, and says what is missing.
    assert main(["setup"]) == 0
    assert "MISSING: Building the stdlib image in pybox's VM needs" in capsys.readouterr().err


def test_the_preparation_program_runs_as_python_stdin(tmp_path: Path) -> None:
    """What the VM runs: `python3 - ROOT ...` with the module on stdin, on a tiny tree."""
    root = tmp_path / "rootfs"
    for folder in ("etc", "usr/bin", "var/lib/dpkg", "var/log", "usr/share/doc/x"):
        (root / folder).mkdir(parents=True)
    (root / "etc/passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
    (root / "etc/group").write_text("root:x:0:\n")
    (root / "usr/bin/python3").write_text("")
    (root / "usr/bin/su").write_text("")
    (root / "usr/bin/su").chmod(0o4755)
    (root / "var/log/old.log").write_text("build machine\n")
    (root / "var/lib/dpkg/status").write_text(
        "Package: python3\nStatus: install ok installed\nVersion: 3.11\n\n"
        "Package: gone\nStatus: deinstall ok config-files\nVersion: 1\n"
    )
    argv = [sys.executable, "-", str(root), "pybox", "1000", "1000", "/pybox", "/usr/bin/python3"]
    result = subprocess.run(
        argv, input=prepare_program(), capture_output=True, text=True, check=True
    )
    assert json.loads(result.stdout) == {"packages": ["python3=3.11"], "python_found": True}
    assert "1 setuid/setgid bits and 0 file capabilities cleared" in result.stderr
    assert (root / "usr/bin/su").stat().st_mode & 0o7777 == 0o755
    assert list((root / "var/log").iterdir()) == []
    assert (
        (root / "etc/passwd")
        .read_text()
        .endswith("sandbox:x:1000:1000:pybox sandbox:/pybox/work:/usr/sbin/nologin\n")
    )
    assert (root / "pybox").is_dir() and (root / "etc/hostname").read_text() == "pybox\n"


def test_the_mirror_and_suite_can_come_from_the_config_file(
    colima_env: Path,  # noqa: F811
    fake: FakeColima,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = tmp_path / "pybox.toml"
    config.write_text(f'[colima]\nmirror = "{MIRROR}"\nsuite = "bookworm"\n')
    assert main(["--config", str(config), "setup"]) == 0
    err = capsys.readouterr().err
    assert f"Debian mirror {MIRROR} (from the config file's [colima] mirror), suite" in err
    assert "MISSING" not in err
    # With the source from the config file, the stopped VM is what ends the build.
    assert main(["--config", str(config), "image", "build", "stdlib"]) == 125
    assert "The pybox VM (Colima profile pybox) is not running" in capsys.readouterr().err
    config.write_text("[colima]\nmirror = 3\n")
    assert main(["--config", str(config), "setup"]) == 2
    assert "colima.mirror must be a string, not 3" in capsys.readouterr().err
