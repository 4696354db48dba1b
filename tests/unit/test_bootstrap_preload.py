"""The bootstrap's preload path over real pipes: a warm box's pre-started
interpreter imports the image's modules (through the image's `.pth` hook)
before the code arrives, and the program still sees a plain `python3 NAME.py`.

The image's Python is a virtual environment made here, with the hook pybox's
build writes (pointed at this test's folder instead of /pybox)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pybox._core import preload, wire
from pybox._inbox import bootstrap_source
from tests.unit.test_bootstrap_programs import DRIVER, Bootstrap

NAMESPACE: dict[str, Any] = {"__name__": "pybox_bootstrap_under_test"}
exec(compile(bootstrap_source(), "bootstrap.py", "exec"), NAMESPACE)

PROBE = b"""
import json, os, sys
import __main__
print(json.dumps({
    "preloaded": sorted(
        m for m in ("decimal", "fractions", "noisy", "broken", "nofreeze") if m in sys.modules
    ),
    "argv": sys.argv, "file": __file__, "path0": sys.path[0], "cwd": os.getcwd(),
    "main_spec": repr(__main__.__spec__), "orig_argv": sys.orig_argv[1:],
    "leftovers": sorted(n for n in os.listdir("..") if n.startswith(".pre")),
}))
"""


def test_the_bootstrap_and_core_agree_on_the_request_path() -> None:
    assert NAMESPACE["PRELOAD_REQUEST"] == preload.PRELOAD_REQUEST


def make_image_python(tmp_path: Path, root: Path) -> str:
    venv = tmp_path / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", "--symlinks", str(venv)], check=True
    )
    site = venv / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    (site / preload.HOOK_FILE).write_text(preload.hook_line(str(root / ".preload")))
    (site / "noisy.py").write_text("print('hello from an import')\n")
    (site / "broken.py").write_text("raise ImportError('not here')\n")
    # An interpreter whose collector cannot freeze: the preload falls back.
    (site / "nofreeze.py").write_text("import gc\ndel gc.freeze\n")
    return str(venv / "bin" / "python3")


class PreloadBox(Bootstrap):
    def __init__(self, tmp_path: Path, modules: tuple[str, ...]) -> None:
        self.tmp = tmp_path
        super().__init__(tmp_path, wire.ONE_PROGRAM, pid1=False, extra_args=(",".join(modules),))

    def run(self, code: bytes = PROBE, **kwargs: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        started = None
        ready = self.frame()
        assert ready.kind == wire.K_READY, ready
        self.program(code, **kwargs)
        out = bytearray()
        while True:
            frame = self.frame(30)
            if frame.kind == wire.K_STARTED:
                started = frame.json()
            elif frame.kind == wire.K_STDOUT:
                out += frame.data
            elif frame.kind == wire.K_EXIT:
                self.send(wire.ACK)
                assert started is not None
                return json.loads(bytes(out)), started
            elif frame.kind == wire.K_ERROR:
                raise AssertionError(frame.json())


@pytest.fixture
def make_box(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    boxes: list[PreloadBox] = []
    python = make_image_python(tmp_path, tmp_path / "box")
    # The driver runs the box's Python as the test's; this one has the hook.
    monkeypatch.setattr("tests.unit.test_bootstrap_programs.PYTHON", python)
    import tests.unit.test_bootstrap_programs as programs

    driver = DRIVER.replace(
        'sys.argv = ["bootstrap"',
        'namespace["PRELOAD_REQUEST"] = os.path.join(root, ".preload")\n'
        'namespace["PRELOAD_RESULT"] = os.path.join(root, ".preloaded")\n'
        'sys.argv = ["bootstrap"',
    )
    monkeypatch.setattr(programs, "DRIVER", driver)

    def make(modules: tuple[str, ...]) -> PreloadBox:
        box = PreloadBox(tmp_path, modules)
        boxes.append(box)
        return box

    yield make
    for box in boxes:
        box.close()


def test_modules_are_imported_before_the_code_and_the_program_sees_a_plain_run(
    make_box: Any,
) -> None:
    seen, started = make_box(("decimal", "fractions")).run()
    assert seen["preloaded"] == ["decimal", "fractions"]
    assert seen["argv"] == ["main.py"]
    assert seen["orig_argv"] == ["main.py"]
    assert seen["file"].endswith("/work/main.py") and seen["path0"].endswith("/work")
    assert seen["cwd"].endswith("/work") and seen["main_spec"] == "None"
    assert seen["leftovers"] == []  # neither the request nor the report is left
    report = started["preload"]
    assert report["modules"] == ["decimal", "fractions"] and report["fallback"] is None
    assert report["rss_bytes"] >= report["rss_before_bytes"] > 0
    assert report["printed_bytes"] == 0


def test_without_a_preload_nothing_is_imported(make_box: Any) -> None:
    seen, started = make_box(()).run()
    assert seen["preloaded"] == [] and "preload" not in started


@pytest.mark.parametrize(
    ("modules", "kwargs", "why"),
    [
        (("decimal", "noisy"), {}, "the preload printed"),
        (("decimal", "broken"), {}, "a preload failed: broken: ImportError"),
        (("decimal", "nofreeze"), {}, "a preload failed: gc.freeze: AttributeError"),
        (("decimal",), {"args": ("x",)}, "arguments, environment variables or stdin"),
        (
            ("decimal",),
            {"inputs": (wire.PayloadFile("decimal.py", b"X = 1\n"),)},
            "the file decimal.py",
        ),
        (
            ("decimal",),
            {"inputs": (wire.PayloadFile("matplotlibrc", b""),)},
            "the file matplotlibrc",
        ),
    ],
)
def test_anything_a_fresh_interpreter_would_do_differently_falls_back(
    make_box: Any, modules: tuple[str, ...], kwargs: dict[str, Any], why: str
) -> None:
    seen, started = make_box(modules).run(**kwargs)
    # A fresh interpreter ran it: nothing preloaded, nothing printed by an import.
    assert seen["preloaded"] == []
    assert why in started["preload"]["fallback"]
    assert started["preload"]["modules"] == []


# A fresh interpreter's collector, as the program sees it: its own cycles are
# collected (a finalizer and a __del__ mark them), the collector is on with the
# default thresholds, and the preload took no gc or time module of its own into
# sys.modules. What it can tell apart is gc.get_freeze_count() (and that
# gc.get_objects() leaves out the frozen objects).
GC_PROBE = b"""
import sys
loaded = {name: name in sys.modules for name in ("gc", "time")}
import gc, json, weakref
marks = []
class Node:
    def __del__(self):
        marks.append("del")
def make_cycles():
    for _ in range(100):
        a, b = Node(), Node()
        a.other, b.other = b, a
    holder = []
    holder.append(holder)
    weakref.finalize(Node(), marks.append, "plain")
    ring = [Node()]
    ring.append(ring)
    weakref.finalize(ring[0], marks.append, "finalized")
make_cycles()
collected = gc.collect()
print(json.dumps({
    "loaded": loaded, "collected": collected, "marks": sorted(set(marks)),
    "dels": marks.count("del"), "enabled": gc.isenabled(),
    "threshold": gc.get_threshold(), "freeze_count": gc.get_freeze_count(),
    "garbage": len(gc.garbage),
}))
"""


def fresh_run(tmp_path: Path, code: bytes) -> dict[str, Any]:
    """`python3 main.py` in the image's Python, with no request left: a fresh interpreter."""
    import tests.unit.test_bootstrap_programs as programs

    folder = tmp_path / "fresh"
    folder.mkdir()
    (folder / "main.py").write_bytes(code)
    done = subprocess.run(
        [programs.PYTHON, "main.py"], cwd=folder, capture_output=True, check=True, timeout=60
    )
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_the_preload_freezes_what_it_made_and_the_program_still_collects_its_own(
    make_box: Any, tmp_path: Path
) -> None:
    fresh = fresh_run(tmp_path, GC_PROBE)
    seen, started = make_box(("decimal", "fractions")).run(GC_PROBE)
    report = started["preload"]
    assert report["fallback"] is None
    assert report["frozen_objects"] > 1000 and report["freeze_s"] >= 0
    # The program's own cyclic garbage is collected, finalizers and __del__ included.
    assert seen["marks"] == fresh["marks"] == ["del", "finalized", "plain"]
    assert seen["dels"] == fresh["dels"] == 202
    assert seen["collected"] > 0 and seen["garbage"] == fresh["garbage"] == 0
    for key in ("loaded", "enabled", "threshold"):
        assert seen[key] == fresh[key], key
    assert seen["enabled"] is True
    # The difference a program can see: the frozen objects (some freed since).
    assert fresh["freeze_count"] == 0
    assert 0 < seen["freeze_count"] <= report["frozen_objects"]


def test_a_fallback_runs_an_interpreter_that_froze_nothing(make_box: Any) -> None:
    seen, started = make_box(("decimal",)).run(GC_PROBE, args=("x",))
    report = started["preload"]
    assert "arguments" in report["fallback"]
    assert report["frozen_objects"] == 0 and seen["freeze_count"] == 0


def test_a_failed_preload_freezes_nothing(make_box: Any) -> None:
    seen, started = make_box(("decimal", "broken")).run(GC_PROBE)
    report = started["preload"]
    assert report["frozen_objects"] == 0 and report["freeze_s"] == 0
    assert seen["freeze_count"] == 0
