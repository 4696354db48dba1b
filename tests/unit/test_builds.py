"""Lock-built images with the fake engine: the build's steps, its network, its
failures, and the checks every run makes before it uses an image."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from pybox._adapters import piptool
from pybox._adapters.confinement import seccomp_profile
from pybox._adapters.piptool import PipSettings, parse_config_list, settings_from_values
from pybox._adapters.state import StateStore
from pybox._core.build_posture import build_box as sealed
from pybox._core.errors import ConfigError, ImageBuildError, ImageError, InvalidRequest
from pybox._core.pins import parse_pins
from pybox._core.request import RunRequest
from pybox._core.seccomp import Confinement
from pybox._engine.docker_seal import DOCKER_SEAL
from pybox._features.images import build_box, builds
from pybox._features.images.builds import BuildResult, build_lock_image
from pybox._features.images.checks import verify_for_run
from pybox._features.images.lock_plans import plan_lock_image
from pybox._features.images.pip_output import explain_pip_failure
from tests.unit.conftest import make_session
from tests.unit.fake_engine import FakeEngine, Script
from tests.unit.test_posture import apply, weakenings

HASH = "a" * 64
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def lock(tmp_path: Path) -> Path:
    path = tmp_path / "tools.lock"
    path.write_text(f"six==1.17.0 --hash=sha256:{HASH}\n")
    return path


@pytest.fixture(autouse=True)
def no_host_pip(monkeypatch: pytest.MonkeyPatch) -> None:
    """The host's pip is not asked in unit tests."""
    monkeypatch.setattr(builds, "download_pip_wheel", lambda lock, env: ("pip-1-py3.whl", b"w"))


def installed_ok(argv: list[str]) -> tuple[int, bytes]:
    if "-c" in argv and "importlib.metadata" in argv[-1]:
        report = {"interfaces": ["lo"], "packages": ["six==1.17.0"]}
        return 0, json.dumps(report).encode() + b"\n"
    return 0, b""


def build(engine: FakeEngine, state: StateStore, lock: Path) -> tuple[BuildResult, list[str]]:
    plan = plan_lock_image(engine, state, "tools", lock, {"PYBOX_LOCKS_DIR": str(REPO / "locks")})
    messages: list[str] = []
    result = build_lock_image(
        engine,
        state,
        plan,
        PipSettings(index_url="https://mirror.invalid/simple"),
        messages.append,
        owner="testhost:1:1",
        pybox_version="test",
        environ={},
    )
    return result, messages


def test_network_is_attached_only_for_the_install(
    engine: FakeEngine, state: StateStore, lock: Path
) -> None:
    engine.exec_script = installed_ok
    result, messages = build(engine, state, lock)
    assert result.built
    networks_per_exec = [target for name, target in engine.calls if name == "exec_networks"]
    execs = [target for name, target in engine.calls if name == "exec"]
    assert len(execs) == 4
    install = [i for i, argv in enumerate(execs) if " install " in argv]
    assert len(install) == 1
    assert networks_per_exec[install[0]] == "bridge"
    assert [n for i, n in enumerate(networks_per_exec) if i != install[0]] == ["", "", ""]
    assert "--require-hashes --only-binary=:all: --no-cache-dir" in execs[install[0]]
    assert "--index-url https://mirror.invalid/simple" in execs[install[0]]
    # The box was detached before it started, and is gone.
    operations = [name for name, _ in engine.calls]
    assert operations.index("disconnect") < operations.index("start")
    assert engine.containers == {}
    record = state.image("tools")
    assert record is not None and record.packages == ("six==1.17.0",)
    assert record.python_path == "/opt/venv/bin/python3"
    assert ("MPLBACKEND", "Agg") in record.env
    image = engine.images[record.image_id]
    assert image["Config"]["User"] == "1000:1000"
    assert image["Config"]["Labels"]["io.pybox.recipe"] == record.recipe_hash
    assert any("network attached for this step only" in m for m in messages)


def test_a_failed_install_names_the_package_and_removes_the_box(
    engine: FakeEngine, state: StateStore, lock: Path
) -> None:
    pip_says = (
        "Collecting six==1.17.0 (from -r /opt/pybox-build/requirements.txt (line 1))\n"
        "ERROR: THESE PACKAGES DO NOT MATCH THE HASHES FROM THE REQUIREMENTS FILE.\n"
        "    six==1.17.0 from https://files.invalid/six-1.17.0-py2.py3-none-any.whl:\n"
        f"        Expected sha256 {HASH}\n"
        f"             Got        {'f' * 64}\n"
    ).encode()
    engine.exec_script = lambda argv: (1, pip_says) if " install" in " ".join(argv) else (0, b"")
    with pytest.raises(ImageBuildError) as failed:
        build(engine, state, lock)
    message = str(failed.value)
    assert "while installing six==1.17.0" in message
    assert f"sha256 is {'f' * 64}" in message
    assert engine.containers == {}
    assert state.image("tools") is None
    assert [t for n, t in engine.calls if n == "disconnect"][-1] == "bridge"


def test_installed_packages_must_equal_the_lock(
    engine: FakeEngine, state: StateStore, lock: Path
) -> None:
    def extra(argv: list[str]) -> tuple[int, bytes]:
        if "-c" in argv and "importlib.metadata" in argv[-1]:
            report = {"interfaces": ["lo"], "packages": ["six==1.17.0", "evil==1"]}
            return 0, json.dumps(report).encode()
        return 0, b""

    engine.exec_script = extra
    with pytest.raises(ImageBuildError, match=r"not locked \['evil==1'\]"):
        build(engine, state, lock)
    assert engine.containers == {}


def test_explain_pip_failure_for_a_missing_version() -> None:
    package, why = explain_pip_failure(
        [
            "ERROR: Could not find a version that satisfies the requirement numpy==9.9 "
            "(from versions: none)",
            "ERROR: No matching distribution found for numpy==9.9",
        ]
    )
    assert package == "numpy==9.9"
    assert "no wheel of that version" in why


def test_explain_pip_failure_when_the_index_is_unreachable() -> None:
    package, why = explain_pip_failure(
        [
            "WARNING: Retrying (Retry(total=4)) after connection broken by "
            "'NewConnectionError(...: Failed to establish a new connection)': /simple/six/",
            "ERROR: Could not find a version that satisfies the requirement six==1.17.0",
        ]
    )
    assert package == "six==1.17.0"
    assert why.startswith("the index could not be reached")


def test_stdlib_takes_no_lock(engine: FakeEngine, state: StateStore, lock: Path) -> None:
    with pytest.raises(InvalidRequest, match="takes no lock"):
        plan_lock_image(engine, state, "stdlib", lock, {})


def test_a_run_refuses_an_image_with_other_labels(engine: FakeEngine, state: StateStore) -> None:
    record = state.image("stdlib")
    assert record is not None
    engine.images[record.image_id]["Config"]["Labels"]["io.pybox.recipe"] = "sha256:other"
    with pytest.raises(ImageError, match="Refusing to run image stdlib"):
        verify_for_run(engine, record)
    session = make_session(engine, state)
    with pytest.raises(ImageError, match="labelled 'stdlib' with recipe 'sha256:other'"):
        session.run(RunRequest(code=b"print(1)\n"))
    assert engine.names("create") == []


def test_a_run_refuses_an_image_whose_lock_changed(
    engine: FakeEngine, state: StateStore, lock: Path
) -> None:
    engine.exec_script = installed_ok
    build(engine, state, lock)
    engine.script = Script(stdout=b"ok\n")
    session = make_session(engine, state)
    assert session.run(RunRequest(code=b"print(1)\n", image="tools")).stdout == b"ok\n"
    lock.write_text(lock.read_text() + "# edited\n")
    with pytest.raises(ImageError, match=r"lock file .* changed since the image was built"):
        make_session(engine, state).run(RunRequest(code=b"print(1)\n", image="tools"))


def test_pip_config_list_precedence_and_host_paths() -> None:
    values = parse_config_list(
        "global.index-url='https://a.invalid/simple'\n"
        "install.index-url='https://b.invalid/simple'\n"
        ":env:.cert='/etc/ca.pem'\n"
        "global.cert='/other.pem'\n"
        "global.extra-index-url='file:///opt/simple https://c.invalid/simple'\n"
        "global.find-links='/opt/wheels'\n"
        ":env:.default-timeout='180'\n"
    )
    settings = settings_from_values(values, {}, "pip config list")
    assert settings.index_url == "https://b.invalid/simple"
    assert settings.cert_path == "/etc/ca.pem"
    assert settings.extra_index_urls == ("https://c.invalid/simple",)
    assert settings.timeout_s == "180"
    assert [option for option, _ in settings.skipped] == ["extra-index-url", "find-links"]
    assert settings.install_args("/box/ca.pem")[:2] == ["--index-url", "https://b.invalid/simple"]


def test_pip_files_are_read_when_pip_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    conf = tmp_path / "pip.conf"
    conf.write_text("[global]\nindex-url = https://d.invalid/simple\ncert = /ca.pem\n")
    monkeypatch.setattr(piptool, "_pip_command", lambda: ["/nonexistent/python", "-m", "pip"])
    environ = {"PIP_CONFIG_FILE": str(conf), "HOME": str(tmp_path), "XDG_CONFIG_DIRS": ""}
    settings = piptool.host_pip_settings(environ)
    assert settings.index_url == "https://d.invalid/simple"
    assert settings.cert_path == "/ca.pem"
    assert "pip.conf" in settings.found_by


def test_pins_are_checked() -> None:
    digest = "sha256:" + "c" * 64
    pins = parse_pins(
        f'[stdlib]\nrepository = "pybox/stdlib"\ndigest = "{digest}"\nplatform = "linux/amd64"\n',
        "images.toml",
    )
    assert pins["stdlib"].reference("127.0.0.1:5000") == f"127.0.0.1:5000/pybox/stdlib@{digest}"
    with pytest.raises(ConfigError, match="not a digest"):
        parse_pins(
            '[x]\nrepository = "pybox/x"\ndigest = "latest"\nplatform = "linux/amd64"\n', "f"
        )
    with pytest.raises(ConfigError, match="missing platform"):
        parse_pins(f'[x]\nrepository = "pybox/x"\ndigest = "{digest}"\n', "f")
    with pytest.raises(ConfigError, match="not a repository path"):
        parse_pins(
            f'[x]\nrepository = "host:5000/x"\ndigest = "{digest}"\nplatform = "linux/amd64"\n',
            "f",
        )
    assert parse_pins((REPO / "locks" / "images.toml").read_text(), "shipped") is not None


def test_pull_and_push_through_the_fake_registry(engine: FakeEngine, state: StateStore) -> None:
    from pybox._features.images import registry

    record = state.image("stdlib")
    assert record is not None
    engine.images[record.image_id].update({"Os": "linux", "Architecture": "amd64"})
    pin = registry.push(engine, state, record, "127.0.0.1:5999", lambda m: None)
    assert pin.platform == "linux/amd64"
    # The registry tag was the image's only tag: it is kept, so the image is too.
    assert engine.names("remove_image") == []
    engine.images[record.image_id]["RepoTags"].append("pybox/stdlib:local")
    registry.push(engine, state, record, "127.0.0.1:5999", lambda m: None)
    assert engine.names("remove_image") == ["127.0.0.1:5999/pybox/stdlib:343434343434"]
    state.forget_image("stdlib")
    wrong = dataclasses.replace(pin, digest="sha256:" + "0" * 64)
    with pytest.raises(ImageError, match="The registry refused"):
        registry.pull(engine, state, wrong, "127.0.0.1:5999", lambda m: None)
    assert state.image("stdlib") is None
    pulled = registry.pull(engine, state, pin, "127.0.0.1:5999", lambda m: None)
    assert pulled.image_id == record.image_id and pulled.digest == pin.digest


# -- the build box's posture, read back before start ------------------------------------

BUILD_SPEC = build_box.build_box_spec(
    "sha256:" + "12" * 32,
    run_id="0123456789abcdef",
    owner="testhost:1:1",
    pybox_version="test",
    cpus=2,
    confinement=Confinement(seccomp_profile(), None, "no AppArmor (test)"),
)
BUILD_REQUIREMENTS = DOCKER_SEAL.requirements(sealed(BUILD_SPEC))


def test_the_build_box_body_is_its_table_and_carries_pybox_s_profile() -> None:
    body = DOCKER_SEAL.create_request(sealed(BUILD_SPEC))
    assert body["HostConfig"]["SecurityOpt"] == [
        "no-new-privileges",
        "seccomp=" + seccomp_profile(),
    ]
    assert body["HostConfig"]["CapDrop"] == ["ALL"]
    assert body["HostConfig"]["NetworkMode"] == "bridge"
    for requirement in BUILD_REQUIREMENTS:
        if requirement.create_path is not None:
            target: Any = body
            for key in requirement.create_path:
                target = target[key]
            assert target == requirement.expected
    names = [r.name for r in BUILD_REQUIREMENTS]
    assert len(names) == len(set(names))


def test_a_faithful_engine_passes_the_build_box() -> None:
    engine = FakeEngine()
    container_id = build_box.create_build_box(engine, "b", BUILD_SPEC)
    report = build_box.read_back_build_box(engine, BUILD_SPEC, container_id)
    assert report.ok and len(report.checked) == len(BUILD_REQUIREMENTS)


@pytest.mark.parametrize(
    ("requirement", "how", "value"),
    [
        pytest.param(req, how, value, id=f"{req.name}-{how}")
        for req in BUILD_REQUIREMENTS
        for how, value in weakenings(req)
    ],
)
def test_a_weakened_build_box_is_refused_before_start(
    engine: FakeEngine, state: StateStore, lock: Path, requirement: Any, how: str, value: Any
) -> None:
    engine.exec_script = installed_ok
    engine.tamper = lambda document: apply(document, requirement, how, value)
    with pytest.raises(ImageBuildError, match="refused before start") as caught:
        build(engine, state, lock)
    assert requirement.name in str(caught.value)
    operations = [name for name, _ in engine.calls]
    assert "start" not in operations and "exec" not in operations
    assert engine.containers == {}
    assert state.image("tools") is None


def test_a_build_box_without_pybox_s_profile_is_refused(
    engine: FakeEngine, state: StateStore, lock: Path
) -> None:
    def unconfined(document: dict[str, Any]) -> None:
        document["HostConfig"]["SecurityOpt"] = ["no-new-privileges", "seccomp=unconfined"]

    engine.tamper = unconfined
    with pytest.raises(ImageBuildError, match=r"HostConfig\.SecurityOpt"):
        build(engine, state, lock)
    assert "start" not in [name for name, _ in engine.calls]
    assert engine.containers == {}


def test_the_shipped_locks_are_found_inside_the_package_by_default() -> None:
    """Without PYBOX_LOCKS_DIR the locks are pybox/_locks, wherever the module lives."""
    from pybox._features.images.lock_plans import locks_dir

    found = locks_dir({})
    assert found == Path(pybox_package_dir()) / "_locks"
    assert (found / "pip.lock").is_file()


def pybox_package_dir() -> str:
    import pybox

    return str(Path(pybox.__file__).resolve().parent)
