"""Which Pythons a lock serves: the shipped data lock covers every supported
CPython, scripts/lock writes what the parser checks, and a build says which
Python it installed for (and refuses one the lock leaves out)."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest

from pybox._adapters.piptool import PipSettings
from pybox._adapters.state import StateStore
from pybox._core.errors import ImageBuildError, InvalidRequest
from pybox._core.locks import parse_lock, wheel_fits, wheel_pythons, wheels_missing
from pybox._features.images import builds
from pybox._features.images.builds import build_lock_image
from pybox._features.images.lock_plans import plan_lock_image
from pybox._features.images.pip_output import explain_pip_failure
from tests.unit.fake_engine import ExecScript, FakeEngine

REPO = Path(__file__).resolve().parents[2]
SUPPORTED = ("cp311", "cp312", "cp313")
A, B, C = "a" * 64, "b" * 64, "c" * 64


def load_lock_script() -> ModuleType:
    path = REPO / "scripts" / "lock"
    loader = importlib.machinery.SourceFileLoader("pybox_scripts_lock", str(path))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
@pytest.mark.parametrize("tag", SUPPORTED)
def test_the_shipped_data_lock_has_a_wheel_for_every_supported_python(
    tag: str, machine: str
) -> None:
    lock = parse_lock((REPO / "locks" / "data.lock").read_text(), "locks/data.lock")
    assert all(r.wheels for r in lock.requirements), "every package names its wheels"
    assert wheels_missing(lock, tag, machine) == ()
    assert wheel_pythons(lock) == SUPPORTED
    header = (REPO / "locks" / "data.lock").read_text().splitlines()[1]
    assert "CPython 3.11, 3.12, 3.13" in header


def test_the_lock_script_writes_what_the_parser_checks() -> None:
    script = load_lock_script()
    six = ("1.17.0", "six-1.17.0-py2.py3-none-any.whl", C)
    targets = {
        ("3.11", "x86_64"): {
            "numpy": ("2.4.6", "numpy-2.4.6-cp311-cp311-manylinux_2_28_x86_64.whl", A),
            "six": six,
        },
        ("3.12", "x86_64"): {
            "numpy": ("2.4.6", "numpy-2.4.6-cp312-cp312-manylinux_2_28_x86_64.whl", B),
            "six": six,
        },
    }
    lock = parse_lock(script.lock_text("data", targets), "data.lock")
    assert lock.pins == ("numpy==2.4.6", "six==1.17.0")
    numpy = lock.requirements[0]
    assert numpy.hashes == (f"sha256:{A}", f"sha256:{B}")
    assert len(numpy.wheels) == 2
    assert wheels_missing(lock, "cp312", "x86_64") == ()
    assert wheels_missing(lock, "cp313", "x86_64") == ("numpy==2.4.6",)
    # Versions that differ per target cannot share one lock: the script stops.
    targets[("3.12", "x86_64")]["numpy"] = ("2.3.0", "numpy-2.3.0-cp312-cp312-x.whl", B)
    with pytest.raises(SystemExit, match="resolves differently"):
        script.lock_text("data", targets)


def test_a_wheel_comment_the_hashes_do_not_back_is_refused() -> None:
    text = (
        f"numpy==2.4.6 --hash=sha256:{A}\n"
        f"    # wheel: numpy-2.4.6-cp311-cp311-manylinux_2_28_x86_64.whl sha256:{B}\n"
    )
    with pytest.raises(InvalidRequest, match="line 2: a wheel comment"):
        parse_lock(text, "x.lock")


@pytest.mark.parametrize(
    ("wheel", "tag", "machine", "fits"),
    [
        ("numpy-2.4.6-cp311-cp311-manylinux_2_28_x86_64.whl", "cp311", "x86_64", True),
        ("numpy-2.4.6-cp311-cp311-manylinux_2_28_x86_64.whl", "cp312", "x86_64", False),
        ("numpy-2.4.6-cp311-cp311-manylinux_2_28_x86_64.whl", "cp311", "aarch64", False),
        ("x-1-cp39-abi3-manylinux2014_x86_64.manylinux_2_17_x86_64.whl", "cp313", "x86_64", True),
        ("x-1-cp314-abi3-manylinux_2_17_x86_64.whl", "cp313", "x86_64", False),
        ("six-1.17.0-py2.py3-none-any.whl", "cp313", "aarch64", True),
        ("x-1-cp311-cp311-musllinux_1_2_x86_64.whl", "cp311", "x86_64", False),
    ],
)
def test_wheel_fits(wheel: str, tag: str, machine: str, fits: bool) -> None:
    assert wheel_fits(wheel, tag, machine) is fits


def box_reports(python: dict[str, str]) -> ExecScript:
    def script(argv: list[str]) -> tuple[int, bytes]:
        if "-c" in argv and "venv.create" in argv[-1]:
            return 0, json.dumps(python).encode() + b"\n"
        if "-c" in argv and "importlib.metadata" in argv[-1]:
            report = {"interfaces": ["lo"], "packages": ["numpy==2.4.6"]}
            return 0, json.dumps(report).encode() + b"\n"
        return 0, b""

    return script


def lock_for_cp311(tmp_path: Path) -> Path:
    path = tmp_path / "tools.lock"
    path.write_text(
        f"numpy==2.4.6 --hash=sha256:{A}\n"
        f"    # wheel: numpy-2.4.6-cp311-cp311-manylinux_2_28_x86_64.whl sha256:{A}\n"
    )
    return path


def build(engine: FakeEngine, state: StateStore, lock: Path, messages: list[str]) -> object:
    plan = plan_lock_image(engine, state, "tools", lock, {"PYBOX_LOCKS_DIR": str(REPO / "locks")})
    return build_lock_image(
        engine,
        state,
        plan,
        PipSettings(),
        messages.append,
        owner="testhost:1:1",
        pybox_version="test",
        environ={},
    )


@pytest.fixture(autouse=True)
def no_host_pip(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(builds, "download_pip_wheel", lambda lock, env: ("pip-1-py3.whl", b"w"))


def test_the_build_says_and_records_which_python_it_installed_for(
    engine: FakeEngine, state: StateStore, tmp_path: Path
) -> None:
    engine.exec_script = box_reports(
        {"implementation": "CPython", "version": "3.11.2", "tag": "cp311", "machine": "x86_64"}
    )
    messages: list[str] = []
    build(engine, state, lock_for_cp311(tmp_path), messages)
    record = state.image("tools")
    assert record is not None and record.python == "CPython 3.11.2 (cp311) on x86_64"
    assert any(
        "installing for the image's Python: CPython 3.11.2 (cp311) on x86_64" in m for m in messages
    )
    assert any("packages for CPython 3.11.2 (cp311) on x86_64" in m for m in messages)
    assert StateStore(state.root).image("tools") == record  # it survives the round trip


def test_a_lock_without_a_wheel_for_the_image_python_is_refused_before_the_network(
    engine: FakeEngine, state: StateStore, tmp_path: Path
) -> None:
    engine.exec_script = box_reports(
        {"implementation": "CPython", "version": "3.13.5", "tag": "cp313", "machine": "x86_64"}
    )
    with pytest.raises(ImageBuildError) as refused:
        build(engine, state, lock_for_cp311(tmp_path), [])
    message = str(refused.value)
    assert "no wheel for the image's Python, CPython 3.13.5 (cp313) on x86_64" in message
    assert "numpy==2.4.6" in message and "its wheels are for cp311" in message
    assert engine.names("connect") == []
    assert not any(" install " in argv for argv in engine.names("exec"))
    assert engine.containers == {}
    assert state.image("tools") is None


def test_explain_pip_failure_reads_pips_current_hash_mismatch_report() -> None:
    # pip 26's lines, as a real build printed them (the index host left out).
    lines = [
        "Collecting six==1.17.0 (from -r /opt/pybox-build/requirements.txt (line 1))",
        "  Downloading six-1.17.0-py2.py3-none-any.whl (11 kB)",
        "ERROR: THESE PACKAGES DO NOT MATCH THE HASHES FROM THE REQUIREMENTS FILE. If you "
        "have updated the package versions, please update the hashes. Otherwise, examine the "
        "package contents carefully; someone may have tampered with them.",
        "    six==1.17.0 from https://files.invalid/packages/six-1.17.0-py2.py3-none-any.whl "
        "(from -r /opt/pybox-build/requirements.txt (line 1)):",
        f"        Expected sha256 {'0' * 64}",
        f"        Expected     or {'1' * 64}",
        f"             Got        {C}",
        "",
    ]
    package, why = explain_pip_failure(lines)
    assert package == "six==1.17.0"
    assert why == (
        f"the downloaded file's sha256 is {C}, but the lock allows only {'0' * 64} or "
        f"{'1' * 64}: the lock is wrong or the file was tampered with"
    )
