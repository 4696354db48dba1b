"""How each case of `pybox verify` runs its hostile program, and what the host sees.

Beside the run itself a case may set up what only the host can observe: a
canary file, listeners of its own on this machine's bridge, a `pybox exec`
controller to kill mid-run, a hook that weakens the box on purpose. The cases
whose run is just "run the program, judge it" are built in `suite`.
"""

from __future__ import annotations

import json
import secrets
import signal
import socket
import time
from collections.abc import Mapping
from typing import Any

from pybox._adapters.host_facts import (
    bridge_gateway,
    mount_devices,
    peak_rss_bytes,
    reset_peak_rss,
    rss_bytes,
)
from pybox._core.display import plural
from pybox._core.errors import EngineAPIError
from pybox._core.limits import LimitRequest
from pybox._core.posture import (
    LABEL_MANAGED,
    LABEL_OWNER,
    LABEL_RUN_ID,
    box_environment,
)
from pybox._core.receipt import Status
from pybox._core.request import InputFile, RunRequest
from pybox._engine import Engine, JSONObject
from pybox._features.verify.escape_judges import (
    ListenerReport,
    judge_host_files,
    judge_network,
    judge_privilege,
    judge_seccomp,
    judge_secrets,
)
from pybox._features.verify.harness import Suite
from pybox._features.verify.limit_judges import judge_output_flood
from pybox._features.verify.posture_case import (
    WEAKENINGS,
    WeakenedCreateEngine,
    judge_weakened,
)
from pybox._features.verify.verdict import Verdict, case_source, judge_gone
from pybox._orchestration.session import Session

CONTROLLER_WAIT_S = 30.0


def _verify_json(values: Mapping[str, Any]) -> tuple[InputFile, ...]:
    return (InputFile("verify.json", json.dumps(values).encode()),)


def run_host_files(suite: Suite, verdict: Verdict) -> None:
    secret = secrets.token_hex(16)
    canary = suite.workdir / "host-canary.txt"
    canary.write_text(f"pybox verify host canary {secret}\n")
    state_file = suite.session.state.images_file
    inputs = _verify_json({"host_files": [str(canary), str(state_file)]})
    outcome = suite.run_program("host_files", verdict, LimitRequest(timeout_s=30), inputs)
    judge_host_files(outcome, verdict, canary_secret=secret, host_devices=mount_devices())
    suite.gone(verdict, outcome.receipt)


def _drain_listener(tcp: socket.socket, udp: socket.socket) -> tuple[int, int]:
    """Connections and datagrams that reached the listener (it never blocks)."""
    tcp.setblocking(False)
    udp.setblocking(False)
    connections = datagrams = 0
    while True:
        try:
            tcp.accept()[0].close()
            connections += 1
        except BlockingIOError:
            break
    while True:
        try:
            udp.recvfrom(65536)
            datagrams += 1
        except BlockingIOError:
            break
    return connections, datagrams


def run_network(suite: Suite, verdict: Verdict) -> None:
    gateway = bridge_gateway()
    limits = LimitRequest(timeout_s=30)
    if gateway is None:
        outcome = suite.run_program("network", verdict, limits, _verify_json({}))
        judge_network(outcome, verdict, ListenerReport(None, 0, 0, 0, 0))
        suite.gone(verdict, outcome.receipt)
        return
    # Listeners of this suite's own, on this machine's bridge: the only address tried.
    with (
        socket.socket(socket.AF_INET, socket.SOCK_STREAM) as tcp,
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp,
    ):
        tcp.bind((gateway, 0))
        tcp.listen(8)
        udp.bind((gateway, 0))
        ports = {"tcp_port": tcp.getsockname()[1], "udp_port": udp.getsockname()[1]}
        target = {"listener": {"host": gateway, **ports}}
        outcome = suite.run_program("network", verdict, limits, _verify_json(target))
        connections, datagrams = _drain_listener(tcp, udp)
    judge_network(
        outcome,
        verdict,
        ListenerReport(gateway, **ports, tcp_connections=connections, udp_datagrams=datagrams),
    )
    suite.gone(verdict, outcome.receipt)


def run_output_flood(suite: Suite, verdict: Verdict) -> None:
    before = rss_bytes()
    exact = reset_peak_rss()
    baseline = before if exact else peak_rss_bytes()
    outcome = suite.run_program("output_flood", verdict, LimitRequest(timeout_s=120))
    peak = peak_rss_bytes()
    growth = None if peak is None or baseline is None else max(peak - baseline, 0)
    how = "kernel peak RSS, reset before the run" if exact else "lifetime peak RSS"
    judge_output_flood(outcome, verdict, growth, how)
    suite.gone(verdict, outcome.receipt)


def run_secrets(suite: Suite, verdict: Verdict) -> None:
    name = f"PYBOX_VERIFY_CANARY_{secrets.token_hex(4).upper()}"
    value = secrets.token_hex(16)
    with suite.controller({name: value}, "-", "--json", "--timeout", "30") as controller:
        out, err = controller.communicate(case_source("secrets"), timeout=120)
    try:
        record = json.loads(out)
        receipt = record["receipt"]
        stdout, stderr = record["stdout"].encode(), record["stderr"].encode()
    except (ValueError, KeyError, TypeError, AttributeError):
        verdict.check(False, f"`pybox exec --json` gave no record: {err.decode()[-300:]!r}")
        return
    verdict.run_ids.append(str(receipt["run_id"]))
    verdict.saw("pybox", f"ran by `pybox exec --json` in a process whose environment has {name}")
    image = suite.session.image("stdlib")
    judge_secrets(
        verdict,
        stdout=stdout,
        stderr=stderr,
        truncated=bool(record["stdout_truncated"] or record["stderr_truncated"]),
        canary=(name, value),
        host_hostname=socket.gethostname(),
        expected_env=frozenset(box_environment(image.env)),
    )
    engine = receipt["observed_by_engine"]
    judge_gone(
        verdict,
        suite.engine,
        engine["container_id"],
        bool(engine["removal_confirmed"]),
        suite.cgroup_exists,
    )


def run_seccomp(suite: Suite, verdict: Verdict) -> None:
    outcome, host = suite.run_program_probed("seccomp", verdict, LimitRequest(timeout_s=30))
    judge_seccomp(outcome, verdict, suite.session.confinement().seccomp_sha256, host)
    suite.gone(verdict, outcome.receipt)


def _box_of(engine: Engine, pid: int) -> JSONObject | None:
    host = socket.gethostname()
    for box in engine.list_containers({LABEL_MANAGED: "1"}):
        owner = str((box.get("Labels") or {}).get(LABEL_OWNER, "")).rsplit(":", 2)
        if owner[:2] == [host, str(pid)] and box.get("State") == "running":
            return box
    return None


def run_leftovers(suite: Suite, verdict: Verdict) -> None:
    box: JSONObject | None = None
    with suite.controller({}, "-", "--timeout", "60") as controller:
        assert controller.stdin is not None
        controller.stdin.write(case_source("leftovers"))
        controller.stdin.close()
        controller.stdin = None  # closed; communicate() must not flush it
        deadline = time.monotonic() + CONTROLLER_WAIT_S
        while box is None and time.monotonic() < deadline and controller.poll() is None:
            box = _box_of(suite.engine, controller.pid)
            time.sleep(0.05)
        if not verdict.check(box is not None, "the controller never started its box"):
            return
        assert box is not None
        time.sleep(0.2)  # mid-run: the program is working
        controller.send_signal(signal.SIGKILL)
        controller.wait(timeout=30)
    box_id = str(box["Id"])
    run_id = str((box.get("Labels") or {}).get(LABEL_RUN_ID, ""))
    verdict.run_ids.append(run_id)
    left = suite.engine.inspect_container(box_id)
    state = ((left or {}).get("State") or {}).get("Status")
    verdict.check(left is not None, "the killed controller's box was already gone")
    recorded = run_id in suite.session.state.attempts()
    verdict.saw(
        "engine",
        f"controller SIGKILLed mid-run; its box {box_id[:12]} was left {state}"
        + ("; its attempt record stayed" if recorded else ""),
    )
    fresh = Session(suite.engine, suite.session.state, suite.session.policy)
    next_run = RunRequest(code=b"print('the next run')\n", code_name="next_run.py")
    outcome = fresh.run(fresh.prepare(next_run))
    verdict.run_ids.append(outcome.receipt.run_id)
    swept = outcome.receipt.observed_by_pybox.leftovers_swept
    verdict.check(outcome.receipt.status is Status.SUCCEEDED, "the next run did not succeed")
    verdict.check(swept >= 1, f"the next run swept {swept} boxes")
    verdict.check(run_id not in suite.session.state.attempts(), "the attempt record stayed")
    # Gone means: the engine has no such container and its cgroup is gone.
    judge_gone(verdict, suite.engine, box_id, True, suite.cgroup_exists)
    verdict.saw(
        "pybox",
        f"the next run swept {plural(swept, 'leftover box', 'leftover boxes')} before it started",
    )
    suite.gone(verdict, outcome.receipt, say=False)


def run_posture(suite: Suite, verdict: Verdict) -> None:
    host_dir = suite.workdir / "never-mounted"
    host_dir.mkdir()
    hook = WeakenedCreateEngine(suite.engine, str(host_dir))
    weak = Session(hook, suite.session.state, suite.session.policy, owner=suite.session.owner)
    refused: list[str] = []
    engine_refused: list[str] = []
    code = case_source("posture")
    for weakening in WEAKENINGS:
        hook.reset(weakening)
        try:
            outcome = weak.run(weak.prepare(RunRequest(code=code, code_name="posture.py")))
        except EngineAPIError as exc:
            # Another engine may refuse a weakened create itself: no box, nothing started.
            if verdict.check(not hook.created, f"{weakening.field}: {exc}"):
                engine_refused.append(f"{weakening.field} ({exc.engine_message})")
            continue
        finally:
            verdict.check(hook.discard_donor(), f"{weakening.field}: the donor box stayed")
        verdict.run_ids.append(outcome.receipt.run_id)
        if judge_weakened(outcome, verdict, weakening, hook):
            refused.append(weakening.field.split(".")[-1])
        suite.gone(verdict, outcome.receipt, say=False)
    verdict.saw(
        "engine",
        f"{len(refused)} of {len(WEAKENINGS)} weakened boxes refused before start: the engine "
        f"had each only as created, then no such container: {', '.join(refused)}",
    )
    if engine_refused:
        verdict.saw(
            "engine", "refused at create by the engine itself: " + "; ".join(engine_refused)
        )


def run_privilege(suite: Suite, verdict: Verdict) -> None:
    outcome, host = suite.run_program_probed("privilege", verdict, LimitRequest(timeout_s=30))
    judge_privilege(outcome, verdict, host)
    suite.gone(verdict, outcome.receipt)
