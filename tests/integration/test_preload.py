"""Preloaded warm boxes on the real engine: the program sees a fresh
interpreter's state (argv, __file__, sys.path, working folder, __main__,
matplotlib's rcParams, numpy's random state of its own, a collector that
collects its cycles with the default thresholds), and the receipt says what
was preloaded, what it cost and how many objects the preload froze."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from pybox import Client
from pybox._adapters.state import StateStore

PROBE = """
import json, os, sys
import __main__
preloaded = sorted(m for m in ("numpy", "pandas", "matplotlib", "matplotlib.pyplot")
                   if m in sys.modules)
import numpy, matplotlib
print(json.dumps({
    "preloaded": preloaded,
    "argv": sys.argv, "orig_argv": sys.orig_argv, "file": __file__, "path": sys.path,
    "cwd": os.getcwd(), "main": sorted(vars(__main__)), "spec": repr(__main__.__spec__),
    "rc": {key: repr(value) for key, value in sorted(matplotlib.rcParams.items())},
    "random": numpy.random.random(4).tolist(),
    "leftovers": sorted(os.listdir("/pybox")),
}))
"""


@pytest.fixture(autouse=True)
def private_state(monkeypatch: pytest.MonkeyPatch, state_dir: Path) -> None:
    monkeypatch.setenv("PYBOX_STATE_DIR", str(state_dir))
    monkeypatch.delenv("PYBOX_CONFIG", raising=False)
    monkeypatch.setenv("PYBOX_POOL_BOXES", "1")
    record = StateStore(state_dir).image("data")
    if record is None or not record.preload:
        pytest.skip(
            "the data image is not recorded with modules to preload: `pybox image build data`"
        )


def warm_run(client: Client, code: str = PROBE) -> Any:
    """A run in a warm box of the data image (the first run of a profile warms it)."""
    for _ in range(10):
        result = client.run(code, image="data", timeout_s=60)
        assert result.ok, result.stderr
        if result.receipt.observed_by_pybox.box_source == "warm_pool":
            return result
        time.sleep(3)  # the pool starts one for this profile; its preload takes a while
    raise AssertionError("no warm box of the data image in ten runs")


def test_a_preloaded_box_runs_the_program_as_a_fresh_interpreter_would() -> None:
    with Client(warm_pool=False) as cold_client:
        cold = cold_client.run(PROBE, image="data", timeout_s=60)
    assert cold.ok, cold.stderr
    fresh = json.loads(cold.stdout)
    assert fresh["preloaded"] == []
    assert (
        cold.receipt.configured.preload == () and cold.receipt.reported_by_program.preload is None
    )
    with Client() as client:
        first = warm_run(client)
        time.sleep(3)
        second = warm_run(client)
    seen = [json.loads(result.stdout) for result in (first, second)]
    for warm in seen:
        assert warm["preloaded"] == ["matplotlib", "matplotlib.pyplot", "numpy", "pandas"]
        for key in ("argv", "orig_argv", "file", "path", "cwd", "main", "spec", "leftovers"):
            assert warm[key] == fresh[key], key
        # Agg comes from the image's MPLBACKEND, the same for both.
        assert warm["rc"] == fresh["rc"]
    # Each box's numpy seeded itself when its interpreter imported it.
    assert len({tuple(s["random"]) for s in [*seen, fresh]}) == 3
    receipt = first.receipt
    assert receipt.configured.preload[:4] == ("numpy", "pandas", "matplotlib", "matplotlib.pyplot")
    report = receipt.reported_by_program.preload
    assert report is not None and report.fallback is None
    assert report.modules == receipt.configured.preload
    assert report.added_rss_bytes is not None and report.added_rss_bytes > 20 * 2**20
    # No comparison with the kernel's peak: resident pages of the image's files
    # that another box read first are charged to that box's cgroup, not this one.
    summary = "\n".join(receipt.summary_lines())
    assert "of which the preload" in summary and "preload: numpy, pandas" in summary


def test_a_run_with_arguments_gets_a_fresh_interpreter_and_says_so() -> None:
    with Client() as client:
        warm_run(client)
        time.sleep(3)
        for _ in range(10):
            result = client.run(PROBE, image="data", timeout_s=60, argv=["x"])
            if result.receipt.observed_by_pybox.box_source == "warm_pool":
                break
            time.sleep(3)
    assert result.receipt.observed_by_pybox.box_source == "warm_pool"
    assert json.loads(result.stdout)["preloaded"] == []
    report = result.receipt.reported_by_program.preload
    assert report is not None and report.modules == ()
    assert "arguments" in (report.fallback or "")


GC_PROBE = """
import gc, json, weakref
marks = []
class Node:
    def __del__(self):
        marks.append("del")
def make_cycles():
    for _ in range(100):
        a, b = Node(), Node()
        a.other, b.other = b, a
    ring = [Node()]
    ring.append(ring)
    weakref.finalize(ring[0], marks.append, "finalized")
make_cycles()
gc.collect()
print(json.dumps({
    "dels": marks.count("del"), "finalized": "finalized" in marks,
    "enabled": gc.isenabled(), "threshold": gc.get_threshold(),
    "freeze_count": gc.get_freeze_count(), "garbage": len(gc.garbage),
}))
"""


def test_the_program_collects_its_own_cycles_beside_the_frozen_preload() -> None:
    with Client(warm_pool=False) as cold_client:
        cold = cold_client.run(GC_PROBE, image="data", timeout_s=60)
    assert cold.ok, cold.stderr
    fresh = json.loads(cold.stdout)
    with Client() as client:
        warm = warm_run(client, GC_PROBE)
    seen = json.loads(warm.stdout)
    assert seen["dels"] == fresh["dels"] == 201 and seen["finalized"] and fresh["finalized"]
    # (Whether gc is in sys.modules is not compared: numpy imports it, and the
    # cold probe imports no numpy; the unit tests check the freeze adds none.)
    for key in ("enabled", "threshold", "garbage"):
        assert seen[key] == fresh[key], key
    assert seen["enabled"] is True and seen["garbage"] == 0
    # What the program can tell apart (docs/images.md): the frozen preload.
    report = warm.receipt.reported_by_program.preload
    assert report is not None and report.fallback is None
    assert report.frozen_objects is not None and report.frozen_objects > 50_000
    assert report.freeze_s is not None and report.freeze_s < 5
    assert fresh["freeze_count"] == 0
    assert 0 < seen["freeze_count"] <= report.frozen_objects
    summary = "\n".join(warm.receipt.summary_lines())
    assert "objects frozen by gc.freeze()" in summary
