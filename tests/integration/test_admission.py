"""Admission control on the real engine: a cap set in the operator's config is never
exceeded (boxes counted from the engine's own list), every admitted run completes with
its receipt, the excess beyond the queue hears Busy, and a CLI run in another process
respects a slot this one holds."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pybox import Client
from pybox._adapters.host_facts import current_owner
from pybox._core.admission import AdmissionSettings
from pybox._core.errors import Busy
from pybox._core.posture import LABEL_MANAGED, LABEL_OWNER
from pybox._engine import Engine, connect_engine, find_endpoint
from pybox._orchestration.admission import Admission
from tests.integration.conftest import engine_environ

SRC = Path(__file__).resolve().parents[2] / "src"


@pytest.fixture
def own_state(tmp_path: Path, state_dir: Path) -> Path:
    """A state directory of this test's own (its slots are its own), with the images."""
    state = tmp_path / "state"
    state.mkdir()
    shutil.copy(state_dir / "images.json", state / "images.json")
    return state


def config(tmp_path: Path, running: int, waiting: int, wait_s: float) -> str:
    path = tmp_path / "config.toml"
    path.write_text(
        f"max_running_boxes = {running}\nmax_waiting_runs = {waiting}\n"
        f"admission_wait_s = {wait_s}\n"
    )
    return str(path)


@pytest.fixture
def own_environ(own_state: Path, engine_name: str) -> dict[str, str]:
    """The environment pointed at this pass's engine and the test's own state directory
    (no other PYBOX_ setting of this process's: the test's config says the caps)."""
    env = {
        k: v
        for k, v in engine_environ(engine_name).items()
        if not k.startswith("PYBOX_") or k == "PYBOX_ENGINE"
    }
    env["PYBOX_STATE_DIR"] = str(own_state)
    return env


class BoxCounter:
    """Polls the engine every 20 ms for the boxes this process owns, in any state."""

    def __init__(self, owner: str, engine_name: str) -> None:
        # A connection of its own (it polls from a thread), to this pass's engine.
        env = engine_environ(engine_name)
        self.engine: Engine = connect_engine(find_endpoint(env, engine_name), engine_name)
        self.labels: dict[str, str | None] = {LABEL_MANAGED: "1", LABEL_OWNER: owner}
        self.peak = 0
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def count(self) -> int:
        return len(self.engine.list_containers(self.labels))

    def _watch(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.count())
            self.samples += 1
            self._stop.wait(0.02)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(10)
        return self.peak


def boxes_of(engine: Engine, pid: int) -> list[object]:
    """The boxes of the pybox process `pid` (its owner label is host:pid:start)."""
    return [
        c
        for c in engine.list_containers({LABEL_MANAGED: "1"})
        if (c.get("Labels") or {}).get(LABEL_OWNER, "").split(":")[1:2] == [str(pid)]
    ]


@pytest.fixture
def counter(engine_name: str) -> Iterator[BoxCounter]:
    watcher = BoxCounter(current_owner(), engine_name)
    yield watcher
    watcher.stop()
    # Nothing this process made is left: warm boxes and run boxes alike.
    deadline = time.monotonic() + 10
    while watcher.count() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert watcher.count() == 0


def test_twenty_runs_against_a_cap_of_two_never_exceed_it(
    tmp_path: Path, own_environ: dict[str, str], counter: BoxCounter
) -> None:
    results: dict[int, object] = {}
    errors: list[BaseException] = []
    # The warm pool is on (the default): its waiting boxes count against the cap too.
    with Client(environ=own_environ, config_path=config(tmp_path, 2, 32, 300)) as client:

        def one(number: int) -> None:
            try:
                code = f"import time\ntime.sleep(0.2)\nprint({number})\n"
                results[number] = client.run(code, timeout_s=30)
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=one, args=(n,)) for n in range(20)]
        started = time.monotonic()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(300)
        elapsed = time.monotonic() - started
    peak = counter.stop()
    assert errors == []
    assert sorted(results) == list(range(20))
    for number, result in results.items():
        assert result.ok, result.status  # type: ignore[attr-defined]
        assert result.stdout == f"{number}\n"  # type: ignore[attr-defined]
        receipt = result.receipt.to_dict()  # type: ignore[attr-defined]
        assert receipt["status"] == "succeeded"
        assert receipt["observed_by_engine"]["removal_confirmed"] is True
    assert len({r.receipt.run_id for r in results.values()}) == 20  # type: ignore[attr-defined]
    assert peak == 2, f"peak {peak} boxes over {counter.samples} samples"
    print(f"20 runs, cap 2: {elapsed:.2f} s, peak {peak} boxes, {counter.samples} samples")


def test_a_queue_of_three_behind_a_cap_of_one_refuses_the_excess(
    tmp_path: Path, own_environ: dict[str, str], counter: BoxCounter
) -> None:
    outcomes: list[object] = []
    lock = threading.Lock()
    path = config(tmp_path, 1, 3, 300)
    with Client(environ=own_environ, config_path=path, warm_pool=False) as client:

        def one(number: int) -> None:
            try:
                result: object = client.run(
                    f"import time\ntime.sleep(2)\nprint({number})\n", timeout_s=30
                )
            except Busy as exc:
                result = exc
            with lock:
                outcomes.append(result)

        threads = [threading.Thread(target=one, args=(n,)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
    peak = counter.stop()
    busy = [o for o in outcomes if isinstance(o, Busy)]
    done = [o for o in outcomes if not isinstance(o, Busy)]
    # One runs, three wait, four are refused at once; the admitted four all finish.
    assert len(busy) == 4 and len(done) == 4
    assert all(r.ok for r in done)  # type: ignore[attr-defined]
    for refusal in busy:
        assert "the queue is full" in str(refusal) and refusal.retry_after_s >= 1
        assert (refusal.max_running, refusal.max_waiting) == (1, 3)
    assert peak == 1


def test_a_cli_run_in_another_process_respects_this_processs_slot(
    own_state: Path, own_environ: dict[str, str], counter: BoxCounter
) -> None:
    gate = Admission(own_state, AdmissionSettings(1, 1, 30))
    env = {**own_environ, "PYTHONPATH": str(SRC), "PYBOX_MAX_RUNNING_BOXES": "1"}
    with gate.slot(what="this test"):
        refused = subprocess.run(
            [sys.executable, "-m", "pybox", "exec", "--json", "-"],
            input=b"print(1)\n",
            capture_output=True,
            env={**env, "PYBOX_MAX_WAITING_RUNS": "0"},
            timeout=60,
            check=False,
        )
        assert refused.returncode == 2, refused.stderr
        record = json.loads(refused.stdout)
        assert record["error"]["kind"] == "busy"
        assert "boxes running: 1 of at most 1" in record["error"]["message"]
        assert b"pybox: Busy:" in refused.stderr
        program = own_state.parent / "program.py"
        program.write_text("print(6*7)\n")
        waiting = subprocess.Popen(
            [sys.executable, "-m", "pybox", "exec", str(program)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**env, "PYBOX_MAX_WAITING_RUNS": "1", "PYBOX_ADMISSION_WAIT_S": "60"},
        )
        deadline = time.monotonic() + 30
        while gate.waiting() == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert gate.waiting() == 1  # it waits, and has created nothing
        time.sleep(0.5)
        assert boxes_of(counter.engine, waiting.pid) == []
    out, err = waiting.communicate(timeout=60)
    assert waiting.returncode == 0, err
    assert out == b"42\n"
