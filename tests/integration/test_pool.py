"""The warm pool on the real engine: same sealed box, single use, nothing outlives its owner."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pybox import Client
from pybox._core.posture import LABEL_OWNER
from pybox._core.request import RunRequest
from pybox._engine import Engine
from pybox._orchestration.session import Session
from tests.integration.conftest import boxes

SEALED_CHECK = """
import json, os, time
time.sleep(0.5)  # after 2.5 s of waiting, over a 2 s limit: only the run counts
try:
    open("/probe", "w")
    root_writable = True
except OSError:
    root_writable = False
with open("/proc/net/dev") as f:
    interfaces = sorted(line.split(":")[0].strip() for line in f.readlines()[2:])
print(json.dumps({"uid": os.getuid(), "interfaces": interfaces, "root_writable": root_writable}))
"""


@pytest.fixture(autouse=True)
def private_state(monkeypatch: pytest.MonkeyPatch, state_dir: Path) -> None:
    monkeypatch.setenv("PYBOX_STATE_DIR", str(state_dir))
    monkeypatch.delenv("PYBOX_CONFIG", raising=False)
    monkeypatch.setenv("PYBOX_POOL_BOXES", "1")
    # warm_up() prepares the default run, so the default is the limit under test.
    monkeypatch.setenv("PYBOX_DEFAULT_TIMEOUT_S", "2")


def owned_by(engine: Engine, pid: int) -> list[dict[str, object]]:
    found = []
    for box in boxes(engine):
        labels = box["Labels"]
        assert isinstance(labels, dict)
        if str(labels[LABEL_OWNER]).split(":")[1] == str(pid):
            found.append(box)
    return found


def test_a_warm_box_is_the_same_sealed_box_and_is_used_once(engine: Engine) -> None:
    with Client() as client:
        assert client.warm_up(wait_s=60)
        time.sleep(2.5)  # longer than the run's own limit: waiting must not count
        first = client.run(SEALED_CHECK)
        seen = json.loads(first.stdout)
        receipt = first.receipt
        assert first.status == "succeeded", receipt.cause.summary
        uid = int(receipt.configured.user.split(":")[0])
        assert seen == {"uid": uid, "interfaces": ["lo"], "root_writable": False}
        assert receipt.observed_by_pybox.box_source == "warm_pool"
        assert receipt.observed_by_pybox.box_waited_s is not None
        assert receipt.observed_by_pybox.box_waited_s >= 2.5
        assert receipt.observed_by_engine.posture_verified
        assert receipt.observed_by_engine.removal_confirmed
        assert receipt.observed_by_kernel.counters_since == "code_arrival"
        assert receipt.observed_by_kernel.peaks_include_idle_wait
        assert engine.inspect_container(str(receipt.observed_by_engine.container_id)) is None
        assert client.warm_up(wait_s=60)
        second = client.run(SEALED_CHECK)
        assert second.receipt.observed_by_pybox.box_source == "warm_pool"
        assert second.receipt.observed_by_engine.container_id != (
            receipt.observed_by_engine.container_id
        )
    # Leaving the block removed the replacement box that was waiting.
    assert owned_by(engine, os.getpid()) == []


def test_a_crashed_owners_pool_is_swept_like_any_leftover(
    engine: Engine, session: Session, cli_env: dict[str, str]
) -> None:
    script = (
        "import sys, time\n"
        "from pybox import Client\n"
        "client = Client()\n"
        "assert client.warm_up(wait_s=60)\n"
        "print('ready', flush=True)\n"
        "time.sleep(120)\n"
    )
    env = dict(cli_env, PYBOX_POOL_BOXES="2")
    owner = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    try:
        assert owner.stdout is not None
        assert owner.stdout.readline() == b"ready\n", owner.stderr.read() if owner.stderr else b""
        waiting = owned_by(engine, owner.pid)
        assert len(waiting) == 2
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.wait()
    # With its owner gone, each waiting box's bootstrap sees its stdin close and exits...
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        states = [engine.inspect_container(str(b["Id"])) for b in waiting]
        if all(s is None or s["State"]["Status"] == "exited" for s in states):
            break
        time.sleep(0.2)
    # ...and the next session sweeps them.
    fresh = Session(engine, session.state, session.policy)
    receipt = fresh.run(RunRequest(code=b"print(1)")).receipt
    assert receipt.observed_by_pybox.leftovers_swept >= 2
    assert all(engine.inspect_container(str(b["Id"])) is None for b in waiting)


def test_a_waiting_box_killed_by_someone_else_is_never_handed_out(engine: Engine) -> None:
    with Client() as client:
        assert client.warm_up(wait_s=60)
        (waiting,) = owned_by(engine, os.getpid())
        engine.kill_container(str(waiting["Id"]))
        deadline = time.monotonic() + 10
        while True:  # wait until the engine has it as stopped
            found = engine.inspect_container(str(waiting["Id"]))
            if found is None or found["State"]["Status"] != "running":
                break
            assert time.monotonic() < deadline
            time.sleep(0.05)
        time.sleep(0.2)
        result = client.run("print(6*7)")
        assert result.stdout == "42\n" and result.status == "succeeded"
        assert result.receipt.observed_by_engine.container_id != waiting["Id"]
        deadline = time.monotonic() + 15
        while engine.inspect_container(str(waiting["Id"])) is not None:
            assert time.monotonic() < deadline, "the dead waiting box was not removed"
            time.sleep(0.1)
