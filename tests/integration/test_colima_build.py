"""`pybox setup --yes` on macOS builds the stdlib image inside the VM: end to end here.

The fake `colima` is the only stand-in: its `status --json` names this
machine's engine, and its `ssh -- ARGV` runs ARGV on this Debian machine (as
root, which has debootstrap) in place of pybox's VM. Everything else is real:
the Colima code path of setup, debootstrap from this machine's mirror, pybox's
preparation sent to `python3 -`, the tar stream out over `colima ssh`, the
engine's image import, the record, and a print(6*7) box in the new image.

The image goes into a private state folder under its own tag (the mirror is
named with its default port spelled out, an equivalent URL, so the recipe and
the tag differ from the machine's recorded stdlib image), and is removed.
"""

from __future__ import annotations

import glob
import json
import subprocess
import urllib.parse
from pathlib import Path

from bench.fake_colima import install_fake_colima

from pybox._adapters.host_facts import apt_sources, base_mirror, os_codename
from pybox._adapters.state import StateStore
from pybox._engine import Engine
from tests.integration.conftest import colima_runs_docker, run_cli

BUILD_FOLDERS = "/var/tmp/pybox-build-*"


def _mirror_with_default_port(suite: str) -> str:
    """This machine's mirror, spelled with its default port: the same server, a new recipe."""
    parts = urllib.parse.urlsplit(base_mirror(apt_sources(), suite).uri)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    host = parts.hostname or ""
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{host}:{port}"))


def test_setup_builds_the_image_in_the_vm_and_runs_a_box(
    engine: Engine,
    engine_name: str,
    cli_env: dict[str, str],
    state_dir: Path,
    tmp_path: Path,
) -> None:
    colima_runs_docker(engine_name)
    suite = os_codename()
    assert suite, "this machine's Debian suite is needed for the build"
    mirror = _mirror_with_default_port(suite)
    shared = StateStore(state_dir).image("stdlib")
    shared_images = (state_dir / "images.json").read_bytes()
    fake = install_fake_colima(
        tmp_path / "bin", docker_socket=f"unix://{engine.endpoint.socket_path}"
    )
    home = tmp_path / "home"
    home.mkdir()
    state = tmp_path / "state"
    env = dict(
        cli_env,
        HOME=str(home),
        PYBOX_PLATFORM="colima",
        PYBOX_COLIMA=str(fake.colima),
        PYBOX_DOCKER_CLI=str(fake.docker),
        PYBOX_STATE_DIR=str(state),
    )
    env.pop("DOCKER_HOST", None)
    folders_before = set(glob.glob(BUILD_FOLDERS))

    setup = run_cli(["setup", "--yes", "--mirror", mirror, "--suite", suite], env, timeout_s=600)
    record = StateStore(state).image("stdlib")
    try:
        assert setup.returncode == 0, setup.stderr.decode()[-3000:]
        text = setup.stderr.decode()
        assert record is not None
        assert shared is None or record.image_id != shared.image_id
        assert record.recipe is not None and record.recipe["mirror"] == mirror
        assert any(package.startswith("python3=") for package in record.packages)
        assert "print(6*7) -> 42 in a fresh box" in text
        assert "stopped the VM" in text
        assert fake.state()["running"] is False

        # Every build step went through `colima ssh`, in this order, as argument lists.
        steps = [argv[4:] for argv in fake.argvs() if argv[0] == "ssh" and argv[4] != "grep"]
        assert [step[:3] for step in steps] == [
            ["dpkg-query", "-W", "-f=${Package} ${db:Status-Abbrev}\\n"],
            ["sudo", "-n", "mktemp"],
            ["sudo", "-n", "debootstrap"],
            ["sudo", "-n", "python3"],
            ["sudo", "-n", "tar"],
            ["sudo", "-n", "rm"],
        ]
        assert steps[2][-1] == mirror
        # The image runs what the box runs: the engine has it under the recorded ID,
        # with pybox's labels; the build folder is gone; the shared record is untouched.
        found = engine.inspect_image(record.image_id)
        assert found is not None
        labels = found["Config"]["Labels"]
        assert labels["io.pybox.recipe"] == record.recipe_hash
        assert set(glob.glob(BUILD_FOLDERS)) == folders_before
        assert (state_dir / "images.json").read_bytes() == shared_images
        listed = run_cli(["image", "list", "--json"], dict(env, PYBOX_PLATFORM="linux"))
        assert [item["problem"] for item in json.loads(listed.stdout)] == [None]
    finally:
        if record is not None and (shared is None or record.image_id != shared.image_id):
            removed = run_cli(["image", "rm", "stdlib"], dict(env, PYBOX_PLATFORM="linux"))
            assert removed.returncode == 0, removed.stderr.decode()
            assert engine.inspect_image(record.image_id) is None
        for folder in set(glob.glob(BUILD_FOLDERS)) - folders_before:
            # as pybox does: never into a mount debootstrap may have left behind
            subprocess.run(["rm", "-rf", "--one-file-system", "--", folder], check=False)
