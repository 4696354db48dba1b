"""Preloaded warm boxes on the real engine: the program sees a fresh
interpreter's state (argv, __file__, sys.path, working folder, __main__,
matplotlib's rcParams, numpy's random state of its own), and the receipt says
what was preloaded and what it cost."""

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


def warm_run(client: Client) -> Any:
    """A run in a warm box of the data image (the first run of a profile warms it)."""
    for _ in range(10):
        result = client.run(PROBE, image="data", timeout_s=60)
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
