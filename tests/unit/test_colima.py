"""pybox's Colima code against a scripted fake `colima` that answers like 0.10.x.

The fake records every call, so these tests pin the exact argv, the
environment pybox gives Colima, the refusals, and that nothing in the user's
home changes beyond the profile's own folders.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from bench.fake_colima import FakeColima, install_fake_colima

from pybox._adapters.cgroups import location_of
from pybox._adapters.colima.profile import PROFILE, Colima, parse_colima_version
from pybox._adapters.colima.sampler import VMCgroupSampler, parse_read, read_command
from pybox._adapters.colima.tools import HostTool, find_tool, untrusted_reason
from pybox._adapters.config import load_settings
from pybox._core.errors import ConfigError, PlatformError
from pybox._frontends.cli import main
from pybox._orchestration.hosts import choose_platform

START_ARGV = [
    "start",
    "--profile",
    "pybox",
    "--runtime",
    "docker",
    "--mount",
    "none",
    "--port-forwarder",
    "none",
    "--activate=false",
    "--ssh-config=false",
    "--template=false",
    "--kubernetes=false",
    "--cpu",
    "2",
    "--memory",
    "2",
    "--disk",
    "20",
]
STATUS_ARGV = ["status", "--profile", "pybox", "--json"]


@pytest.fixture
def home(tmp_path: Path) -> Path:
    """A user's home with files pybox must never touch."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "config").write_text("Host example\n  User me\n")
    (home / ".docker").mkdir()
    (home / ".docker" / "config.json").write_text('{"currentContext": "default"}\n')
    (home / ".colima" / "_templates").mkdir(parents=True)
    (home / ".colima" / "_templates" / "default.yaml").write_text("cpu: 8\nmounts: []\n")
    (home / ".colima" / "default").mkdir()
    (home / ".colima" / "default" / "colima.yaml").write_text("cpu: 4\n")
    return home


@pytest.fixture
def fake(tmp_path: Path) -> FakeColima:
    return install_fake_colima(tmp_path / "trusted-bin")


@pytest.fixture
def colima_env(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, home: Path, fake: FakeColima
) -> Path:
    """The process environment of a Mac user, with the fake tools named explicitly."""
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("PYBOX_PLATFORM", "colima")
    monkeypatch.setenv("PYBOX_COLIMA", str(fake.colima))
    monkeypatch.setenv("PYBOX_DOCKER_CLI", str(fake.docker))
    state = tmp_path / "state"
    monkeypatch.setenv("PYBOX_STATE_DIR", str(state))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    # A writable folder first on PATH, holding impostors, must not matter.
    evil = tmp_path / "evil"
    evil.mkdir()
    evil.chmod(0o777)
    for name in ("colima", "docker", "limactl", "ssh", "grep"):
        impostor = evil / name
        impostor.write_text(f"#!/bin/sh\ntouch {tmp_path}/impostor-ran\n")
        impostor.chmod(0o755)
    monkeypatch.setenv("PATH", f"{evil}:{os.environ.get('PATH', '')}")
    for name in ("PYBOX_CONFIG", "COLIMA_HOME", "DOCKER_HOST"):
        monkeypatch.delenv(name, raising=False)
    return state


def record_image_and_program(state: Path, tmp_path: Path) -> Path:
    state.mkdir(exist_ok=True)
    record = {
        "name": "stdlib",
        "image_id": "sha256:" + "1" * 64,
        "recipe_hash": "sha256:" + "2" * 64,
        "python_path": "/usr/bin/python3",
        "built_at": "2026-01-01T00:00:00Z",
    }
    (state / "images.json").write_text(json.dumps({"version": 1, "images": {"stdlib": record}}))
    program = tmp_path / "p.py"
    program.write_text("print(1)\n")
    return program


def snapshot(root: Path) -> dict[str, str]:
    found: dict[str, str] = {}
    for path in sorted(root.rglob("*")):
        relative = str(path.relative_to(root))
        if path.is_file():
            found[relative] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            found[relative] = "dir"
    return found


def test_vm_start_runs_colima_with_exactly_pybox_settings(
    colima_env: Path, fake: FakeColima, home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["vm", "start"]) == 0
    assert fake.argvs() == [
        ["version"],
        STATUS_ARGV,
        START_ARGV,
        STATUS_ARGV,
    ]
    for call in fake.calls():
        env = call["env"]
        assert env["PATH"] == f"{fake.folder}:/usr/bin:/bin:/usr/sbin:/sbin"
        assert env["DOCKER_CONFIG"] == str(colima_env / "colima-docker-config")
        assert env["HOME"] == str(home)
        assert env["PYBOX_PLATFORM"] is None  # only a short list of variables is passed on
    out = capsys.readouterr()
    assert "checked: no host folders mounted, no ports forwarded, docker runtime" in out.out
    # Colima's docker context landed in pybox's own folder, not ~/.docker.
    assert (colima_env / "colima-docker-config" / "contexts" / "meta" / "x" / "meta.json").exists()
    assert sorted(p.name for p in (home / ".docker").iterdir()) == ["config.json"]
    assert not (colima_env.parent / "impostor-ran").exists()


def test_the_vm_size_comes_from_the_config_file(
    colima_env: Path, fake: FakeColima, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "pybox.toml"
    config.write_text("[colima]\ncpus = 4\nmemory_gib = 6\ndisk_gib = 40\n")
    assert main(["--config", str(config), "vm", "start"]) == 0
    start = next(argv for argv in fake.argvs() if argv[0] == "start")
    assert start[-6:] == ["--cpu", "4", "--memory", "6", "--disk", "40"]


def test_no_user_file_is_touched(colima_env: Path, fake: FakeColima, home: Path) -> None:
    before = snapshot(home)
    assert main(["setup"]) == 0
    assert main(["doctor", "--json"]) == 125  # the VM is absent: a problem
    assert main(["vm", "status"]) == 3
    assert snapshot(home) == before  # dry runs and checks change nothing at all
    assert main(["vm", "start"]) == 0
    assert main(["vm", "stop"]) == 0
    after = snapshot(home)
    # Only the profile's own folders appear; nothing that existed changed.
    assert {k: v for k, v in after.items() if k in before} == before
    created = sorted(set(after) - set(before))
    allowed = (f".colima/{PROFILE}", f".colima/_lima/colima-{PROFILE}", ".colima/_lima")
    assert created and all(name.startswith(allowed) for name in created), created


def test_old_colima_is_refused_with_the_upgrade_command(
    colima_env: Path, fake: FakeColima, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.set(version="0.9.1")
    assert main(["vm", "start"]) == 125
    err = capsys.readouterr().err
    assert "Colima 0.9.1 is too old: pybox needs 0.10.0 or newer" in err
    assert "brew upgrade colima" in err
    assert fake.argvs() == [["version"]]  # nothing was started


def test_mounts_present_are_refused_and_the_vm_stopped(
    colima_env: Path, fake: FakeColima, home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.set(mounts=[str(home)])
    assert main(["vm", "start"]) == 125
    err = capsys.readouterr().err
    assert f"mounts the host folder '{home}'" in err
    assert "pybox vm delete" in err
    assert fake.argvs()[-1] == ["stop", "--profile", "pybox"]
    assert fake.state()["running"] is False


def test_port_forwarder_on_is_refused(
    colima_env: Path, fake: FakeColima, capsys: pytest.CaptureFixture[str]
) -> None:
    fake.set(port_forwarder="ssh")
    assert main(["vm", "start"]) == 125
    err = capsys.readouterr().err
    assert "sets portForwarder 'ssh', not 'none'" in err
    assert "a port-forward rule is active" in err
    assert fake.state()["running"] is False


def test_a_vm_changed_after_start_is_refused_for_runs(
    colima_env: Path,
    fake: FakeColima,
    home: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    program = record_image_and_program(colima_env, tmp_path)
    assert main(["vm", "start"]) == 0
    profile = home / ".colima" / PROFILE / "colima.yaml"
    profile.write_text(profile.read_text().replace("mounts: []", "mounts:\n  - location: ~/src"))
    capsys.readouterr()
    assert main(["exec", str(program)]) == 125
    err = capsys.readouterr().err
    assert "pybox refuses to use the Colima profile pybox" in err
    assert "mounts the host folder '~/src'" in err


def test_a_stopped_vm_is_an_error_with_the_next_step(
    colima_env: Path, fake: FakeColima, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    program = record_image_and_program(colima_env, tmp_path)
    assert main(["exec", str(program)]) == 125
    err = capsys.readouterr().err
    assert "The pybox VM (Colima profile pybox) is not running" in err
    assert "colima [profile=pybox] is not running" in err
    assert "pybox vm start" in err
    assert ["start", *START_ARGV[1:]] not in fake.argvs()


def test_vm_status_when_stopped(
    colima_env: Path, fake: FakeColima, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["vm", "status", "--json"]) == 3
    status = json.loads(capsys.readouterr().out)
    assert status["state"] == "absent"
    assert status["isolation_verified"] is False
    assert fake.argvs() == [["version"], STATUS_ARGV]


def test_setup_dry_run_lists_everything_and_runs_nothing(
    colima_env: Path, fake: FakeColima, home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["setup"]) == 0
    err = capsys.readouterr().err
    assert "dry run" in err
    assert f"would create: {home}/.colima/pybox: the profile's settings" in err
    assert f"would create: {home}/.colima/_lima/colima-pybox" in err
    assert f"would create: {colima_env}/colima-docker-config" in err
    assert "would download: Colima's VM disk image" in err
    assert "would run: colima " + " ".join(START_ARGV) in err
    assert f"would create {colima_env} (0700)" in err
    assert "Run `pybox setup --yes` to do this." in err
    assert all(argv[0] in ("version", "status") for argv in fake.argvs())
    assert not colima_env.exists()


def test_setup_without_tools_prints_the_install_command(
    colima_env: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("PYBOX_COLIMA")
    assert main(["setup"]) == 125
    err = capsys.readouterr().err
    assert "colima was not found in /opt/homebrew/bin, /usr/local/bin" in err
    assert "pybox does not search $PATH" in err
    assert "brew install colima docker" in err


def test_doctor_is_read_only_and_names_the_next_step(
    colima_env: Path, fake: FakeColima, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["doctor", "--json"]) == 125
    report = json.loads(capsys.readouterr().out)
    assert report["platform"]["pybox_platform"] == "colima"
    assert report["platform"]["chosen_by"] == "PYBOX_PLATFORM"
    assert report["colima"]["colima"]["path"] == str(fake.colima)
    assert report["colima"]["version"] == "0.10.0"
    assert report["vm"]["state"] == "absent"
    assert report["next"] == ["pybox setup --yes"]
    assert fake.argvs() == [["version"], STATUS_ARGV]
    fake.set(running=True, docker_socket="unix:///nonexistent/docker.sock")
    assert main(["doctor"]) == 125
    out = capsys.readouterr().out
    assert "vm:     Colima profile pybox: running" in out
    assert "next:   pybox vm delete --yes && pybox setup --yes" in out  # no profile files


def test_vm_delete_is_a_dry_run_without_yes(
    colima_env: Path, fake: FakeColima, home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["vm", "start"]) == 0
    assert main(["vm", "delete"]) == 0
    assert "would run: colima delete --profile pybox --force --data" in capsys.readouterr().err
    assert (home / ".colima" / PROFILE).exists()
    assert main(["vm", "delete", "--yes"]) == 0
    assert ["delete", "--profile", "pybox", "--force", "--data"] in fake.argvs()
    assert not (home / ".colima" / PROFILE).exists()
    assert (home / ".colima" / "default" / "colima.yaml").read_text() == "cpu: 4\n"


def test_vm_commands_on_linux_say_there_is_no_vm(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PYBOX_PLATFORM", "linux")
    assert main(["vm", "status"]) == 2
    assert "There is no pybox VM here (platform linux" in capsys.readouterr().err


# -- trusted tools ----------------------------------------------------------------------


def test_tools_are_found_only_in_trusted_folders(fake: FakeColima, tmp_path: Path) -> None:
    found = find_tool("colima", None, [str(tmp_path / "nothing"), str(fake.folder)])
    assert found == HostTool("colima", str(fake.colima), f"trusted folder {fake.folder}")
    with pytest.raises(PlatformError, match="does not search \\$PATH"):
        find_tool("colima", None, [str(tmp_path / "nothing")])


def test_writable_files_and_folders_are_not_trusted(fake: FakeColima, tmp_path: Path) -> None:
    assert untrusted_reason(str(fake.colima)) is None
    fake.folder.chmod(0o775)
    assert "is writable by group or others (mode 775)" in str(untrusted_reason(str(fake.colima)))
    with pytest.raises(PlatformError, match="not in a trusted state"):
        find_tool("colima", None, [str(fake.folder)])
    fake.folder.chmod(0o755)
    fake.colima.chmod(0o757)
    assert "writable by group or others" in str(untrusted_reason(str(fake.colima)))
    fake.colima.chmod(0o755)
    assert untrusted_reason("colima") == "it is not an absolute path"
    other_owner = untrusted_reason(str(fake.colima), uid=4242) if os.getuid() != 0 else None
    assert other_owner is None or "not by root or you" in other_owner


def test_a_group_writable_folder_is_trusted_only_for_a_trusted_group(fake: FakeColima) -> None:
    fake.folder.chmod(0o775)  # as Homebrew leaves its folders, group admin on macOS
    group = fake.folder.stat().st_gid
    assert untrusted_reason(str(fake.colima), trusted_gids=frozenset({group})) is None
    assert untrusted_reason(str(fake.colima), trusted_gids=frozenset()) is not None
    fake.folder.chmod(0o777)
    assert "writable by group or others (mode 777)" in str(
        untrusted_reason(str(fake.colima), trusted_gids=frozenset({group}))
    )
    fake.folder.chmod(0o755)


def test_a_symlink_is_judged_by_both_ends(fake: FakeColima, tmp_path: Path) -> None:
    open_folder = tmp_path / "open"
    open_folder.mkdir()
    open_folder.chmod(0o777)  # not sticky: anyone could swap the link
    link = open_folder / "colima"
    link.symlink_to(fake.colima)
    assert f"the folder {open_folder} is writable" in str(untrusted_reason(str(link)))


def test_version_parsing() -> None:
    assert parse_colima_version("colima version 0.10.1\ngit commit: abc\n") == (0, 10, 1)
    assert parse_colima_version("colima version v0.9.0") == (0, 9, 0)
    assert parse_colima_version("colima version HEAD-e674521") is None


def test_unreadable_version_is_refused(colima_env: Path, fake: FakeColima) -> None:
    fake.set(version="HEAD-e674521")
    with pytest.raises(PlatformError, match="Cannot read Colima's version"):
        _colima(fake, colima_env).require_version()


# -- platform choice ----------------------------------------------------------------------


def test_platform_is_chosen_from_the_os_unless_overridden(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = {"PYBOX_STATE_DIR": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path)}
    settings = load_settings(env)
    assert choose_platform(settings, "darwin").name == "colima"
    assert choose_platform(settings, "linux").name == "linux"
    override = load_settings({**env, "PYBOX_PLATFORM": "colima"})
    assert choose_platform(override, "linux").chosen_by == "PYBOX_PLATFORM"
    config = tmp_path / "c.toml"
    config.write_text('platform = "linux"\n')
    assert choose_platform(load_settings(env, str(config)), "darwin").name == "linux"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('platform = "windows"\n', "platform must be one of auto, linux, colima"),
        ("[colima]\ncpus = 0\n", "colima.cpus must be a positive whole number"),
        ("[colima]\nmemory = 4\n", "unknown [colima] setting memory"),
        ("[colima]\ncolima = 3\n", "colima.colima must be a path string"),
    ],
)
def test_bad_platform_settings_are_rejected(tmp_path: Path, text: str, message: str) -> None:
    config = tmp_path / "c.toml"
    config.write_text(text)
    with pytest.raises(ConfigError) as raised:
        load_settings({"PYBOX_STATE_DIR": str(tmp_path)}, str(config))
    assert message in str(raised.value)


# -- kernel counters inside the VM ---------------------------------------------------------


def _colima(fake: FakeColima, state: Path) -> Colima:
    return Colima(
        HostTool("colima", str(fake.colima), "explicit path"),
        None,
        environ=dict(os.environ),
        docker_config_dir=state / "colima-docker-config",
    )


def test_vm_sampler_reads_counters_through_colima_ssh(
    colima_env: Path, fake: FakeColima, tmp_path: Path
) -> None:
    fake.set(running=True)
    container_id = "c" * 64
    root = tmp_path / "cgroup"
    memory = root / "memory" / "docker" / container_id
    memory.mkdir(parents=True)
    (memory / "memory.max_usage_in_bytes").write_text("5000\n")
    (memory / "memory.limit_in_bytes").write_text("67108864\n")
    (memory / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 0\n")
    pids = root / "pids" / "docker" / container_id
    pids.mkdir(parents=True)
    (pids / "pids.current").write_text("3\n")
    location = location_of(1, f"docker/{container_id}", str(root))
    sampler = VMCgroupSampler(_colima(fake, colima_env), location, gap_s=60.0)
    assert sampler.sample(force=True)
    assert sampler.sample()  # rationed: no second read within the gap
    (pids / "pids.current").write_text("7\n")
    assert sampler.sample(force=True)
    observed, unknown = sampler.observation()
    assert sampler.samples == 2
    assert observed.memory_peak_bytes == 5000
    assert observed.memory_limit_bytes == 64 * 1024 * 1024
    assert observed.oom_kill_count == 0
    assert observed.pids_peak == 7
    assert observed.sample_interval_s == 60.0
    assert any(u.fact == "kernel counters between samples" for u in unknown)
    assert not (tmp_path / "impostor-ran").exists()  # grep in the "VM" came from /usr/bin
    ssh_calls = [argv for argv in fake.argvs() if argv[0] == "ssh"]
    assert len(ssh_calls) == 2
    assert ssh_calls[0][:6] == ["ssh", "--profile", "pybox", "--", "grep", "-H"]
    assert ssh_calls[0][6:8] == ["-s", "^"]
    assert sorted(ssh_calls[0][8:]) == sorted(location.files.values())


def test_read_output_is_split_by_file() -> None:
    paths = ["/a/memory.stat", "/a/pids.current"]
    assert read_command(paths) == ["grep", "-H", "-s", "^", *paths]
    output = "/a/memory.stat:cache 1\n/a/memory.stat:rss 2\n/a/pids.current:4\nnoise\n"
    assert parse_read(output, paths) == {
        "/a/memory.stat": "cache 1\nrss 2\n",
        "/a/pids.current": "4\n",
    }


def test_a_failed_vm_read_stops_sampling_and_is_reported(
    colima_env: Path, fake: FakeColima, tmp_path: Path
) -> None:
    location = location_of(2, "system.slice/docker-" + "d" * 64 + ".scope", str(tmp_path))
    sampler = VMCgroupSampler(_colima(fake, colima_env), location, gap_s=0.0)
    assert sampler.sample(force=True) is False  # the fake VM is not running
    assert sampler.sample(force=True) is False
    observed, unknown = sampler.observation()
    assert observed.samples == 0
    assert [argv[0] for argv in fake.argvs()] == ["ssh"]  # no second attempt
    failures = [u.reason for u in unknown if u.fact == "some kernel samples"]
    assert failures and "colima [profile=pybox] not running" in failures[0]


def test_a_long_lived_session_rechecks_the_profile_before_every_box(
    colima_env: Path, fake: FakeColima, home: Path
) -> None:
    from pybox._core.errors import VMIsolationError
    from pybox._orchestration.hosts import open_host

    assert main(["vm", "start"]) == 0
    host = open_host(load_settings(os.environ), os.environ)
    host.check_before_run()
    calls = len(fake.calls())
    host.check_before_run()
    assert len(fake.calls()) == calls  # only the profile's files are read again
    lima = home / ".colima" / "_lima" / f"colima-{PROFILE}" / "lima.yaml"
    lima.write_text(lima.read_text().replace("mounts: []", "mounts:\n- location: /Users/me"))
    with pytest.raises(VMIsolationError, match="mounts the host folder '/Users/me'"):
        host.check_before_run()
