"""Images from lock files and registries, end to end on the real engine.

The data image is built once per machine (`.ci/run` builds it before the
tests); if it is not recorded yet, the fixture builds it. The other builds use
a one-package lock so they take seconds.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pybox._adapters.state import StateStore
from pybox._core.errors import ImageBuildError
from pybox._core.images import state_mark
from pybox._core.limits import Policy
from pybox._core.posture import LABEL_MANAGED
from pybox._engine import Engine
from pybox._orchestration.session import Session
from tests.integration.conftest import _unavailable, run_cli

SMALL_LOCK = Path(__file__).parent / "locks" / "small.lock"


def quiet(message: str) -> None:
    print(message)


@pytest.fixture
def private_state(tmp_path: Path, state_dir: Path) -> Path:
    """A state directory of one test's own, starting from the suite's records."""
    target = tmp_path / "state"
    target.mkdir()
    shutil.copy(state_dir / "images.json", target / "images.json")
    return target


def build_boxes(engine: Engine) -> list[str]:
    return [
        name
        for container in engine.list_containers({LABEL_MANAGED: "1"})
        for name in container.get("Names") or []
        if str(name).startswith("/pybox-build-")
    ]


@pytest.fixture(scope="session")
def data_image(engine: Engine, state_dir: Path) -> Iterator[str]:
    """The recorded data image; built from locks/data.lock (and removed after the
    suite) when this machine has not built it yet."""
    operations = Session(engine, StateStore(state_dir), Policy()).images()
    if StateStore(state_dir).image("data") is not None and operations.verify("data").ok:
        yield "data"
        return
    started = time.monotonic()
    operations.build(operations.plan_build("data", None), quiet)
    print(f"built the data image in {time.monotonic() - started:.1f} s")
    yield "data"
    operations.remove("data")


def test_data_image_plots_to_the_output_folder(
    data_image: str, cli_env: dict[str, str], tmp_path: Path
) -> None:
    program = tmp_path / "analysis.py"
    program.write_text(
        "import json, os\n"
        "import numpy as np, pandas as pd, matplotlib\n"
        "import matplotlib.pyplot as plt\n"
        "frame = pd.DataFrame({'x': np.arange(20), 'y': np.arange(20) ** 2})\n"
        "frame.plot(x='x', y='y')\n"
        "plt.savefig(os.path.join(os.environ['PYBOX_OUTPUT_DIR'], 'plot.png'))\n"
        "try:\n"
        "    open('/opt/venv/written', 'w')\n"
        "    root = 'writable'\n"
        "except OSError as exc:\n"
        "    root = exc.errno\n"
        "print(json.dumps({'backend': matplotlib.get_backend(), 'sum': int(frame.y.sum()),\n"
        "    'threads': os.environ.get('OMP_NUM_THREADS'), 'root': root,\n"
        "    'interfaces': sorted(os.listdir('/sys/class/net'))}))\n"
    )
    out = tmp_path / "out"
    result = run_cli(
        ["exec", str(program), "--image", data_image, "--output", str(out), "--json"], cli_env
    )
    assert result.returncode == 0, result.stderr.decode()
    record = json.loads(result.stdout)
    printed = json.loads(record["stdout"])
    assert printed == {
        "backend": "Agg",
        "sum": 2470,
        "threads": "1",
        "root": 30,  # EROFS: the data image runs with a read-only root like any other
        "interfaces": ["lo"],
    }
    assert (out / "plot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    receipt = record["receipt"]
    image = receipt["configured"]["image"]
    recorded = StateStore(Path(cli_env["PYBOX_STATE_DIR"])).image("data")
    assert recorded is not None
    assert image == {
        "name": "data",
        "id": recorded.image_id,
        "recipe_hash": recorded.recipe_hash,
        "digest": None,
    }
    assert receipt["configured"]["network"] == "none"
    assert receipt["observed_by_engine"]["posture_verified"] is True
    assert receipt["observed_by_engine"]["removal_confirmed"] is True


def test_lock_build_has_network_only_for_the_install_and_runs_sealed(
    engine: Engine, private_state: Path, tmp_path: Path
) -> None:
    session = Session(engine, StateStore(private_state), Policy())
    operations = session.images()
    lock = tmp_path / "tiny.lock"
    shutil.copy(SMALL_LOCK, lock)
    plan = operations.plan_build("tiny-test", str(lock))
    messages: list[str] = []
    result = operations.build(plan, messages.append)
    try:
        assert result.built
        # The build box was read back against its own posture table before start.
        assert any("posture read back before start" in m for m in messages), messages
        networks = {step.name.split(" (")[0]: step.networks for step in result.steps}
        install = [name for name in networks if name.startswith("install")]
        assert len(install) == 1
        # The engine's default bridge, by its name in the engine's own view of the
        # box: Docker's is `bridge`; Podman's compatible API takes `bridge` for its
        # default network and shows the box on it by its name, `podman`.
        assert networks[install[0]] == (("podman",) if engine.name == "podman" else ("bridge",))
        assert all(not nets for name, nets in networks.items() if name != install[0])
        assert result.interfaces_after_install == ("lo",)
        assert build_boxes(engine) == []
        record = result.record
        assert record.packages == ("six==1.17.0",)
        image = engine.inspect_image(record.image_id)
        assert image is not None
        assert image["Config"]["User"] == "1000:1000"
        labels = image["Config"]["Labels"]
        assert {key: value for key, value in labels.items() if value} == {
            "io.pybox.image": "tiny-test",
            "io.pybox.recipe": record.recipe_hash,
            "io.pybox.python": "/opt/venv/bin/python3",
            "io.pybox.state": state_mark(str(private_state)),
        }
        assert any(str(tag).endswith(plan.reference) for tag in image["RepoTags"])
        stdlib = StateStore(private_state).image("stdlib")
        assert stdlib is not None
        base = engine.inspect_image(stdlib.image_id)
        assert base is not None
        if engine.name == "podman":
            # An export of the build box imported with the configuration as changes:
            # one flat layer, exactly the configuration asked (no blanked labels).
            assert len(image["RootFS"]["Layers"]) == 1
            assert set(labels) == {key for key, value in labels.items() if value}
            assert image["Config"]["Env"] == [
                "PATH=/opt/venv/bin:/usr/local/bin:/usr/bin:/bin",
                "VIRTUAL_ENV=/opt/venv",
                "MPLBACKEND=Agg",
                "MPLCONFIGDIR=/tmp/matplotlib",
                "XDG_CACHE_HOME=/tmp/.cache",
                "LANG=C.UTF-8",
            ]
            assert image["Config"]["Cmd"] == ["/opt/venv/bin/python3"]
            assert image["Config"]["WorkingDir"] == "/pybox/work"
            assert any(
                step.name.endswith("(export and import: one flat layer)") for step in result.steps
            )
        else:
            # A commit: the stdlib image's layers and one more.
            assert image["RootFS"]["Layers"][:-1] == base["RootFS"]["Layers"]
        # The same lock again is up to date: nothing is built.
        again = operations.build(operations.plan_build("tiny-test", str(lock)), quiet)
        assert not again.built and again.record.image_id == record.image_id

        from pybox._core.request import RunRequest

        outcome = session.run(
            RunRequest(
                code=b"import os, six\n"
                b"print(six.__version__, sorted(os.listdir('/sys/class/net')))\n",
                image="tiny-test",
            )
        )
        assert outcome.stdout == b"1.17.0 ['lo']\n", outcome.stderr
        assert outcome.receipt.observed_by_engine.posture_verified
        assert outcome.receipt.configured.image.recipe_hash == record.recipe_hash

        assert operations.verify("tiny-test").ok
        # A changed lock file means a rebuild, never a silent mismatch.
        lock.write_text(lock.read_text() + "# changed\n")
        assert not operations.verify("tiny-test").ok
        fresh = Session(engine, StateStore(private_state), Policy())
        with pytest.raises(Exception, match=r"lock file .* changed since the image was built"):
            fresh.run(RunRequest(code=b"print(1)\n", image="tiny-test"))
    finally:
        removed = operations.remove("tiny-test")
    assert removed
    assert engine.inspect_image(record.image_id) is None
    assert StateStore(private_state).image("tiny-test") is None


def test_a_tampered_lock_fails_the_build_naming_the_package(
    engine: Engine, private_state: Path, tmp_path: Path
) -> None:
    text = SMALL_LOCK.read_text()
    good = text.split("--hash=sha256:")[1][:64]
    bad = text.replace(good, "0" * 64).replace(text.split("--hash=sha256:")[2][:64], "1" * 64)
    lock = tmp_path / "tampered.lock"
    lock.write_text(bad)
    operations = Session(engine, StateStore(private_state), Policy()).images()
    with pytest.raises(ImageBuildError) as failure:
        operations.build(operations.plan_build("tampered", str(lock)), quiet)
    message = str(failure.value)
    assert "while installing six==1.17.0" in message
    # pip's own report, read: which file, what it hashed to, what the lock allows.
    assert (
        f"the downloaded file's sha256 is {good}, but the lock allows only {'0' * 64} or "
        f"{'1' * 64}: the lock is wrong or the file was tampered with." in message
    )
    assert StateStore(private_state).image("tampered") is None
    assert build_boxes(engine) == []


def test_a_build_box_without_pybox_s_profile_is_refused_before_start(
    engine: Engine, private_state: Path, tmp_path: Path
) -> None:
    from pybox._features.verify.posture_case import WEAKENINGS, WeakenedCreateEngine

    (weakening,) = [w for w in WEAKENINGS if w.how == "seccomp unconfined"]
    hook = WeakenedCreateEngine(engine, str(tmp_path))
    hook.reset(weakening)
    lock = tmp_path / "tiny.lock"
    shutil.copy(SMALL_LOCK, lock)
    operations = Session(hook, StateStore(private_state), Policy()).images()
    with pytest.raises(ImageBuildError, match="refused before start") as failure:
        operations.build(operations.plan_build("unconfined-test", str(lock)), quiet)
    assert "HostConfig.SecurityOpt" in str(failure.value)
    assert hook.created and not hook.started
    assert hook.state_before_removal == "created"
    assert StateStore(private_state).image("unconfined-test") is None
    assert build_boxes(engine) == []


def test_an_image_whose_id_changed_is_refused(
    engine: Engine, private_state: Path, cli_env: dict[str, str], data_image: str
) -> None:
    store = StateStore(private_state)
    data = store.image(data_image)
    stdlib = store.image("stdlib")
    assert data is not None and stdlib is not None
    env = dict(cli_env, PYBOX_STATE_DIR=str(private_state))
    before = len(engine.list_containers({LABEL_MANAGED: "1"}))
    # The record now names an image the engine has, but not the one that was built.
    store.record_image(dataclasses.replace(data, image_id=stdlib.image_id))
    result = run_cli(["exec", "-", "--image", "data"], env, stdin=b"print(1)\n")
    assert result.returncode == 125
    assert "Refusing to run image data" in result.stderr.decode()
    assert "labelled 'stdlib'" in result.stderr.decode()
    # An image ID the engine no longer has.
    store.record_image(dataclasses.replace(data, image_id="sha256:" + "0" * 64))
    result = run_cli(["exec", "-", "--image", "data"], env, stdin=b"print(1)\n")
    assert result.returncode == 125
    assert "missing from the engine" in result.stderr.decode()
    assert len(engine.list_containers({LABEL_MANAGED: "1"})) == before


# -- registry -------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[str]:
    """Debian's docker-registry on 127.0.0.1 only, started and ended by this test."""
    binary = shutil.which("docker-registry")
    if binary is None:
        _unavailable("docker-registry is not installed (apt-get install docker-registry)")
    assert binary is not None
    port = _free_port()
    config = tmp_path / "registry.yml"
    config.write_text(
        "version: 0.1\n"
        "log:\n  level: warn\n"
        f"storage:\n  filesystem:\n    rootdirectory: {tmp_path / 'registry-data'}\n"
        "  delete:\n    enabled: true\n"
        f"http:\n  addr: 127.0.0.1:{port}\n"
    )
    log = (tmp_path / "registry.log").open("wb")
    process = subprocess.Popen([binary, "serve", str(config)], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    pytest.fail(
                        f"the test registry did not start: {(tmp_path / 'registry.log').read_text()}"
                    )
                time.sleep(0.1)
        yield f"127.0.0.1:{port}"
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def _tiny_image_tar() -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        data = b"pybox registry test\n"
        info = tarfile.TarInfo("hello.txt")
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def test_pull_by_digest_from_a_loopback_registry(
    engine: Engine, registry: str, private_state: Path, cli_env: dict[str, str], tmp_path: Path
) -> None:
    from pybox._core.images import ImageRecord

    recipe = "sha256:" + os.urandom(32).hex()  # a unique image, so it is surely new
    image_id = engine.import_image(
        [_tiny_image_tar()],
        repo="pybox-test/regtest",
        tag=recipe[7:19],
        changes=["LABEL io.pybox.image=regtest", f"LABEL io.pybox.recipe={recipe}"],
    )
    store = StateStore(private_state)
    store.record_image(
        ImageRecord("regtest", image_id, recipe, "/usr/bin/python3", "2026-01-01T00:00:00Z")
    )
    env = dict(cli_env, PYBOX_STATE_DIR=str(private_state))
    try:
        pushed = run_cli(["image", "push", "regtest", "--registry", registry], env)
        assert pushed.returncode == 0, pushed.stderr.decode()
        pin_text = pushed.stdout.decode()
        assert "[regtest]" in pin_text and 'repository = "pybox/regtest"' in pin_text
        assert 'platform = "linux/amd64"' in pin_text
        pins = tmp_path / "images.toml"
        pins.write_text(pin_text)
        digest = pin_text.split('digest = "')[1].split('"')[0]

        removed = run_cli(["image", "rm", "regtest"], env)
        assert removed.returncode == 0, removed.stderr.decode()
        assert engine.inspect_image(image_id) is None
        assert store.image("regtest") is None

        wrong = tmp_path / "wrong.toml"
        wrong.write_text(pin_text.replace(digest, "sha256:" + "e" * 64))
        refused = run_cli(
            ["image", "pull", "regtest", "--registry", registry, "--pins", str(wrong)], env
        )
        assert refused.returncode == 125
        assert "The registry refused" in refused.stderr.decode()
        assert store.image("regtest") is None
        assert engine.inspect_image(image_id) is None

        pulled = run_cli(
            ["image", "pull", "regtest", "--registry", registry, "--pins", str(pins)], env
        )
        assert pulled.returncode == 0, pulled.stderr.decode()
        record = store.image("regtest")
        assert record is not None
        assert record.image_id == image_id  # the same content, by ID
        assert record.digest == digest
        assert record.recipe_hash == recipe
        found = engine.inspect_image(image_id)
        assert found is not None and f"{registry}/pybox/regtest@{digest}" in found["RepoDigests"]
    finally:
        if store.image("regtest") is not None:
            run_cli(["image", "rm", "regtest"], env)
        if engine.inspect_image(image_id) is not None:
            for reference in (engine.inspect_image(image_id) or {}).get("RepoTags") or []:
                engine.remove_image(reference)
    assert engine.inspect_image(image_id) is None


def test_pull_stdlib_by_digest_and_the_receipt_names_it(
    engine: Engine, registry: str, private_state: Path, cli_env: dict[str, str], tmp_path: Path
) -> None:
    store = StateStore(private_state)
    stdlib = store.image("stdlib")
    assert stdlib is not None
    image = engine.inspect_image(stdlib.image_id) or {}
    if not image.get("RepoTags"):
        pytest.skip("the recorded stdlib image has no tag of its own; not touching it")
    env = dict(cli_env, PYBOX_STATE_DIR=str(private_state))
    pushed = run_cli(["image", "push", "stdlib", "--registry", registry], env)
    assert pushed.returncode == 0, pushed.stderr.decode()
    pins = tmp_path / "images.toml"
    pins.write_text(pushed.stdout.decode())
    digest = pushed.stdout.decode().split('digest = "')[1].split('"')[0]
    reference = f"{registry}/pybox/stdlib@{digest}"
    try:
        pulled = run_cli(
            ["image", "pull", "stdlib", "--registry", registry, "--pins", str(pins)], env
        )
        assert pulled.returncode == 0, pulled.stderr.decode()
        record = store.image("stdlib")
        assert record is not None
        assert record.image_id == stdlib.image_id and record.digest == digest
        ran = run_cli(["exec", "-", "--json"], env, stdin=b"print(6*7)\n")
        assert ran.returncode == 0, ran.stderr.decode()
        facts = json.loads(ran.stdout)["receipt"]["configured"]["image"]
        assert facts == {
            "name": "stdlib",
            "id": stdlib.image_id,
            "recipe_hash": stdlib.recipe_hash,
            "digest": digest,
        }
    finally:
        # Only the registry's reference goes; the image keeps its own tag.
        engine.remove_image(reference)
    assert engine.inspect_image(stdlib.image_id) is not None


def _pybox(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "pybox", *args],
        capture_output=True,
        env=env,
        cwd=cwd,
        timeout=600,
        check=False,
    )


def test_a_changed_lock_is_rebuilt_as_printed_and_the_old_image_goes(
    engine: Engine, private_state: Path, cli_env: dict[str, str], tmp_path: Path
) -> None:
    name = f"rebuild-{os.urandom(3).hex()}"  # one of this test's own
    env = dict(cli_env, PYBOX_STATE_DIR=str(private_state))
    project = tmp_path / "my project"
    project.mkdir()
    shutil.copy(SMALL_LOCK, project / "tiny.lock")
    store = StateStore(private_state)
    built = _pybox(["image", "build", name, "--lock", "tiny.lock"], env, project)
    assert built.returncode == 0, built.stderr.decode()
    first = store.image(name)
    assert first is not None and first.lock_path == str(project / "tiny.lock")
    new_id = first.image_id
    try:
        (project / "tiny.lock").write_text(SMALL_LOCK.read_text() + "# changed\n")
        verified = _pybox(["image", "verify", name], env, tmp_path)
        assert verified.returncode == 125
        printed = verified.stdout.decode()
        assert "rebuild it with `" in printed, printed
        command = printed.split("rebuild it with `")[1].split("`")[0]
        assert command == f"pybox image build {name} --lock '{project / 'tiny.lock'}'"
        # As printed, from another folder.
        rebuilt = _pybox(shlex.split(command)[1:], env, tmp_path)
        assert rebuilt.returncode == 0, rebuilt.stderr.decode()
        second = store.image(name)
        assert second is not None and second.image_id != first.image_id
        new_id = second.image_id
        assert f"removed the replaced {name} image {first.image_id[:19]}" in rebuilt.stderr.decode()
        # Which Python the packages were installed for: in the output and the record.
        assert second.python is not None
        assert re.fullmatch(r"CPython 3\.\d+\.\d+ \(cp3\d+\) on \w+", second.python)
        assert f"installing for the image's Python: {second.python}" in rebuilt.stderr.decode()
        assert engine.inspect_image(first.image_id) is None
        assert _pybox(["image", "verify", name], env, tmp_path).returncode == 0
    finally:
        removed = _pybox(["image", "rm", name], env, tmp_path)
        assert removed.returncode == 0, removed.stderr.decode()
        for image_id in {first.image_id, new_id}:
            leftover = engine.inspect_image(image_id) or {}
            for tag in leftover.get("RepoTags") or []:
                if str(tag).startswith(f"pybox/{name}:"):
                    engine.remove_image(str(tag))
    assert engine.inspect_image(new_id) is None
    assert engine.inspect_image(first.image_id) is None
