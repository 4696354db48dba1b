"""A Box against the fake engine: programs one after another (protocol 2), each
with its own receipt; removal confirmed on every path."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from pybox._adapters.cgroups import empty_observation
from pybox._adapters.state import StateStore
from pybox._boxes import program
from pybox._boxes.box import Box
from pybox._boxes.reattach import resync
from pybox._boxes.record import RunInterrupted
from pybox._boxes.spec import BoxContext, new_run_id
from pybox._core import wire
from pybox._core.errors import EngineError, InvalidRequest, PostureMismatch, SandboxError
from pybox._core.events import RunEvent, RunStarted
from pybox._core.limits import LimitRequest
from pybox._core.receipt import KernelObserved, Status, Unknown
from pybox._core.request import RunRequest
from pybox._orchestration.session import Session
from tests.unit.fake_engine import FakeEngine, Script


class CountingSampler:
    """Kernel counters that grow by 0.5 s of CPU and one period per sample."""

    def __init__(self) -> None:
        self.samples = 0
        self.closed = False

    def sample(self, *, force: bool = False) -> bool:
        self.samples += 1
        return True

    def observation(self) -> tuple[KernelObserved, list[Unknown]]:
        base = empty_observation(0.01)
        return dataclasses.replace(
            base, cgroup_version=2, samples=self.samples, cpu_usage_s=0.5 * self.samples,
            cpu_periods=self.samples, oom_kill_count=0,
        ), []  # fmt: skip

    def close(self) -> None:
        self.closed = True


def _context(session: Session, samplers: list[CountingSampler] | None = None) -> BoxContext:
    context = session._context()
    if samplers is None:
        return context

    def factory(container_id: str) -> CountingSampler:
        samplers.append(CountingSampler())
        return samplers[-1]

    return dataclasses.replace(context, sampler_factory=factory)


def many(session: Session, context: BoxContext | None = None, **limits: float) -> Box:
    request = RunRequest(code=b"", limits=LimitRequest(**limits))  # type: ignore[arg-type]
    return Box(
        context or _context(session),
        session.verified_image("stdlib"),
        session.resolve(request),
        "main.py",
        box_id=new_run_id(),
        expires_at=int(time.time() + 300),
        protocol=wire.MANY_PROGRAMS,
    )


@pytest.fixture
def box(session: Session) -> Iterator[Box]:
    with many(session, timeout_s=2) as opened:
        opened.open()
        yield opened


def code(text: str) -> RunRequest:
    return RunRequest(code=text.encode())


def assert_gone(engine: FakeEngine, state: StateStore, box: Box) -> None:
    assert box.removal is not None and box.removal.confirmed
    assert engine.containers == {}
    assert state.attempts() == {}
    assert all(attach.closed for attach in engine.attachments)


def test_programs_run_one_after_another_in_one_box(
    session: Session, engine: FakeEngine, state: StateStore
) -> None:
    outputs = {b"one": Script(stdout=b"1\n"), b"two": Script(stdout=b"2\n", exit_code=3)}
    engine.script_for = lambda sent: outputs[sent]
    with many(session) as box:
        box.open()
        first = box.run_program(code("one"), run_id="run-1")
        second = box.run_program(code("two"), run_id="run-2")
        assert box.removal is None  # kept until the end
    assert (first.stdout, second.stdout) == (b"1\n", b"2\n")
    one, two = first.receipt, second.receipt
    assert (one.run_id, two.run_id) == ("run-1", "run-2")
    assert one.status is Status.SUCCEEDED
    assert two.status is Status.FAILED and two.exit_code == 3
    assert one.observed_by_pybox.box_source == "fresh"
    assert one.observed_by_pybox.create_s is not None
    assert two.observed_by_pybox.box_source == "same_box"
    assert two.observed_by_pybox.create_s is None
    assert two.observed_by_pybox.box_waited_s is not None
    assert one.observed_by_engine.container_id == two.observed_by_engine.container_id
    for receipt in (one, two):
        assert receipt.observed_by_engine.posture_verified
        assert receipt.observed_by_engine.exit_code is None  # the box was still up
        assert not receipt.observed_by_engine.removal_confirmed
    operations = [name for name, _ in engine.calls]
    assert operations.count("create") == 1 and operations.count("start") == 1
    assert engine.attachments[0].programs == 2
    assert_gone(engine, state, box)


def test_the_protocol_is_part_of_the_entrypoint_read_back(
    session: Session, engine: FakeEngine, state: StateStore
) -> None:
    def one_program(document: dict[str, object]) -> None:
        config = document["Config"]
        assert isinstance(config, dict)
        config["Entrypoint"] = [*config["Entrypoint"][:-2], "1", config["Entrypoint"][-1]]

    engine.tamper = one_program
    with many(session) as box, pytest.raises(PostureMismatch, match="Entrypoint"):
        box.open()
    assert "start" not in [name for name, _ in engine.calls]
    assert_gone(engine, state, box)


def test_a_timeout_stops_the_program_and_keeps_the_box(
    box: Box, engine: FakeEngine, state: StateStore
) -> None:
    engine.script_for = lambda sent: (
        Script(hang=True) if sent == b"hang" else Script(stdout=b"ok\n")
    )
    timed_out = box.run_program(code("hang"), run_id=new_run_id()).receipt
    assert timed_out.status is Status.TIMED_OUT
    assert timed_out.observed_by_pybox.deadline_kill
    assert timed_out.reported_by_program.exit_code == -9
    assert "kill" not in [name for name, _ in engine.calls]  # the bootstrap stopped it
    assert engine.attachments[0].stops == 1
    after = box.run_program(code("next"), run_id=new_run_id())
    assert after.stdout == b"ok\n" and after.receipt.status is Status.SUCCEEDED


def test_cancel_stops_the_program_and_keeps_the_box(box: Box, engine: FakeEngine) -> None:
    engine.script = Script(hang=True)
    cancel = threading.Event()
    timer = threading.Timer(0.2, cancel.set)
    timer.start()
    receipt = box.run_program(code("x"), run_id=new_run_id(), cancel=cancel).receipt
    timer.cancel()
    assert receipt.status is Status.STOPPED and receipt.observed_by_pybox.cancelled
    engine.script = Script(stdout=b"again\n")
    assert box.run_program(code("y"), run_id=new_run_id()).stdout == b"again\n"


def test_a_bootstrap_that_ignores_the_stop_loses_its_box(
    box: Box, engine: FakeEngine, state: StateStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(program, "STOP_GRACE_S", 0.2)
    engine.script = Script(hang=True)
    engine.ignore_stop = True
    receipt = box.run_program(code("x"), run_id=new_run_id()).receipt
    assert receipt.status is Status.TIMED_OUT
    assert "kill" in [name for name, _ in engine.calls]
    assert receipt.observed_by_engine.removal_confirmed
    assert_gone(engine, state, box)
    with pytest.raises(SandboxError, match="takes no more programs: its bootstrap did not stop"):
        box.run_program(code("y"), run_id=new_run_id())


def test_a_box_that_ends_without_an_exit_report_is_removed(
    box: Box, engine: FakeEngine, state: StateStore
) -> None:
    engine.script = Script(vanish=True, exit_code=137, oom_killed=True)
    receipt = box.run_program(code("x"), run_id=new_run_id()).receipt
    assert receipt.status is Status.OUT_OF_MEMORY  # the engine's evidence, once it ended
    assert receipt.observed_by_engine.removal_confirmed
    assert_gone(engine, state, box)
    with pytest.raises(SandboxError, match="takes no more programs"):
        box.run_program(code("y"), run_id=new_run_id())


def test_a_bootstrap_that_fails_is_never_read_as_the_program_s_exit_code(
    box: Box, engine: FakeEngine, state: StateStore
) -> None:
    """The box ends with the bootstrap's 125 after its error report: the receipt says
    the box failed, in pybox's words with the box's quoted, never "the program
    exited with code 125" (issue 29: a full workspace did this)."""
    engine.script = Script(bootstrap_error="OSError: [Errno 28] No space left on device")
    receipt = box.run_program(code("x"), run_id=new_run_id()).receipt
    assert receipt.status is Status.SANDBOX_ERROR and receipt.exit_code is None
    assert receipt.cause.summary.startswith("The in-box bootstrap failed: OSError")
    assert "exited with code" not in receipt.cause.summary
    assert_gone(engine, state, box)


def test_a_program_the_box_had_no_room_for_is_refused_and_the_box_stays(
    box: Box, engine: FakeEngine
) -> None:
    refusal = {
        "exit_code": None,
        "backstop": False,
        "stopped": True,
        "not_started": "workspace_full",
        "needed_bytes": 8192,
        "free_bytes": 0,
        "workspace_bytes": 1048576,
    }
    engine.script = Script(refused=refusal)
    receipt = box.run_program(code("x"), run_id=new_run_id()).receipt
    assert receipt.status is Status.SANDBOX_ERROR and receipt.exit_code is None
    summary = receipt.cause.summary
    assert (
        "workspace is full: this run's files need 8192 bytes and 0 bytes of its 1048576" in summary
    )
    assert "the sandbox is kept" in summary and receipt.cause.quote is None
    assert box.broken is None and box.removal is None
    engine.script = Script(stdout=b"again\n")
    assert box.run_program(code("y"), run_id=new_run_id()).stdout == b"again\n"


def test_ctrl_c_removes_the_box_and_keeps_the_receipt(
    box: Box, engine: FakeEngine, state: StateStore
) -> None:
    engine.script = Script(hang=True)
    reads = 0

    def interrupt() -> None:
        nonlocal reads
        reads += 1
        if reads == 5:
            raise KeyboardInterrupt

    engine.on_read = interrupt
    with pytest.raises(RunInterrupted) as caught:
        box.run_program(code("x"), run_id="run-x")
    engine.on_read = None
    assert caught.value.outcome.receipt.run_id == "run-x"
    assert caught.value.outcome.receipt.status is Status.STOPPED
    assert_gone(engine, state, box)


def test_an_engine_failure_mid_program_removes_the_box(
    box: Box, engine: FakeEngine, state: StateStore
) -> None:
    engine.script = Script(hang=True)

    def fail() -> None:
        raise EngineError("the engine went away")

    engine.on_read = fail
    receipt = box.run_program(code("x"), run_id=new_run_id()).receipt
    engine.on_read = None
    assert receipt.status is Status.SANDBOX_ERROR
    assert "the engine went away" in receipt.cause.summary
    assert_gone(engine, state, box)


def test_kernel_counters_are_each_programs_own(
    session: Session, engine: FakeEngine, state: StateStore
) -> None:
    samplers: list[CountingSampler] = []
    with many(session, _context(session, samplers)) as box:
        box.open()
        first = box.run_program(code("a"), run_id=new_run_id()).receipt.observed_by_kernel
        second = box.run_program(code("b"), run_id=new_run_id()).receipt.observed_by_kernel
    assert first.counters_since == "box_start" and not first.peaks_include_idle_wait
    assert second.counters_since == "code_arrival" and second.peaks_include_idle_wait
    (sampler,) = samplers
    # The second program's totals count its own samples only, not the box's.
    assert second.cpu_periods is not None and first.cpu_periods is not None
    assert second.cpu_periods < sampler.samples
    assert second.cpu_usage_s == pytest.approx(0.5 * second.cpu_periods)
    assert sampler.closed


def test_events_name_the_box_source(box: Box, engine: FakeEngine) -> None:
    events: list[RunEvent] = []
    box.run_program(code("a"), run_id="a", on_event=events.append)
    box.run_program(code("b"), run_id="b", on_event=events.append)
    started = [e for e in events if isinstance(e, RunStarted)]
    assert started == [RunStarted("a", "fresh"), RunStarted("b", "same_box")]


def test_returned_files_per_program(box: Box, engine: FakeEngine, tmp_path: Path) -> None:
    engine.script = Script(files=[("a.txt", b"A")])
    for name in ("first", "second"):
        folder = tmp_path / name
        folder.mkdir()
        request = RunRequest(code=b"x", collect_outputs=True)
        outcome = box.run_program(request, run_id=new_run_id(), files_dir=folder)
        assert [f.path for f in outcome.output_files] == ["a.txt"]
        assert (folder / "a.txt").read_bytes() == b"A"
        assert "returned files" not in [u.fact for u in outcome.receipt.unknown]


def test_only_a_protocol_2_box_takes_programs_and_its_first_is_named(
    session: Session, engine: FakeEngine
) -> None:
    image = session.verified_image("stdlib")
    limits = session.resolve(code(""))
    with (
        Box(
            _context(session), image, limits, "main.py", box_id=new_run_id(), expires_at=0
        ) as single,
        pytest.raises(ValueError, match="protocol-2"),
    ):
        single.run_program(code("x"), run_id="x")
    with many(session) as box:
        with pytest.raises(ValueError, match="open"):
            box.run_program(code("x"), run_id="x")
        box.open()
        with pytest.raises(InvalidRequest, match=r"'main\.py'"):
            box.run_program(RunRequest(code=b"x", code_name="job.py"), run_id="x")
        # Later programs may name their file freely.
        box.run_program(code("x"), run_id="x")
        later = box.run_program(RunRequest(code=b"x", code_name="job.py"), run_id="y")
        assert later.receipt.configured.code.name == "job.py"


class PingAnswerer:
    """A sandbox's stream whose answer to each ping is `answer(nonce)`: PID 1's,
    or a program's that read the ping off PID 1's stdin (gVisor lets it)."""

    def __init__(self, answer: Callable[[bytes], bytes]) -> None:
        self.answer = answer
        self.replies: list[bytes] = []

    def send(self, data: bytes) -> None:
        nonce = data.split(wire.PING, 1)[1]
        self.replies.append(self.answer(nonce))

    def read(self, timeout_s: float) -> tuple[int, bytes] | None:
        if self.replies:
            return 1, self.replies.pop(0)
        time.sleep(min(timeout_s, 0.01))
        return None


KEY = "5a" * 32


def _ready(nonce: bytes, proof: bytes | None) -> bytes:
    tail = b"" if proof is None else b',"proof":"' + proof + b'"'
    body = b'{"version":3,"ping":"' + nonce + b'"' + tail + b"}"
    return wire.K_READY + len(body).to_bytes(4, "big") + body


def _sandbox_box(stream: PingAnswerer) -> SimpleNamespace:
    return SimpleNamespace(
        stream=stream, spec=SimpleNamespace(name="pybox-sbx"), link_key=KEY, decoder=None
    )


def test_a_sandbox_answer_to_a_ping_must_prove_it_is_pid_1s() -> None:
    """The nonce alone proves nothing under gVisor: a program reads it off PID 1's
    stdin. Only PID 1 holds the link key the proof needs."""
    forged = PingAnswerer(lambda nonce: _ready(nonce, None))
    with pytest.raises(SandboxError, match="did not answer"):
        resync(_sandbox_box(forged), 1.0)  # type: ignore[arg-type]
    wrong = PingAnswerer(lambda nonce: _ready(nonce, wire.ping_proof(b"\0" * 32, nonce)))
    with pytest.raises(SandboxError, match="did not answer"):
        resync(_sandbox_box(wrong), 1.0)  # type: ignore[arg-type]
    genuine = PingAnswerer(lambda nonce: _ready(nonce, wire.ping_proof(bytes.fromhex(KEY), nonce)))
    box = _sandbox_box(genuine)
    resync(box, 5.0)  # type: ignore[arg-type]
    assert isinstance(box.decoder, wire.FrameDecoder)
