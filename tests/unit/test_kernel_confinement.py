"""The kernel's own word on a box's confinement, before any program runs.

The read-back checks what the engine says it applied (SecurityOpt, by the seccomp
profile's hash); the box's PID 1 also reads what the kernel applied to it
(/proc/self/status: `Seccomp: 2`, a filter, and `NoNewPrivs: 1`) before it hands
the code over, and pybox checks the same report. A box the kernel did not filter
never runs a program, under runc; gVisor's Sentry shows neither, and requires neither.
"""

from __future__ import annotations

from typing import Any

import pytest

from pybox._adapters.state import StateStore
from pybox._core import wire
from pybox._core.receipt import Status
from pybox._core.request import RunRequest
from pybox._core.runtimes import GVISOR, RUNC_CHOICE, RuntimeChoice
from pybox._inbox import bootstrap_source
from pybox._orchestration.session import Session
from tests.unit.fake_engine import FakeEngine, Script

NAMESPACE: dict[str, Any] = {"__name__": "bootstrap_under_test"}
exec(compile(bootstrap_source(), "bootstrap.py", "exec"), NAMESPACE)


def test_runc_requires_a_seccomp_filter_and_no_new_privileges() -> None:
    assert RUNC_CHOICE.kernel_status_required == (("Seccomp", "2"), ("NoNewPrivs", "1"))
    assert RuntimeChoice(GVISOR, "runsc").kernel_status_required == ()


def test_the_requirement_travels_in_the_payload_header() -> None:
    chunks = list(
        wire.encode_payload(
            argv=["/usr/bin/python3", "main.py"],
            code_name="main.py",
            code=b"",
            inputs=(),
            backstop_s=3.0,
            collect_outputs=False,
            max_files=1,
            max_file_bytes=1,
            require_status=RUNC_CHOICE.kernel_status_required,
        )
    )
    size = int.from_bytes(chunks[0][4:8], "big")
    header = NAMESPACE["parse_header"](chunks[0][8 : 8 + size])
    assert header["require_status"] == [("Seccomp", "2"), ("NoNewPrivs", "1")]


@pytest.mark.parametrize(
    "observed",
    [{"Seccomp": "0", "NoNewPrivs": "1"}, {"Seccomp": "2", "NoNewPrivs": "0"}, {}],
)
def test_the_bootstrap_refuses_what_the_kernel_did_not_apply(observed: dict[str, str]) -> None:
    with pytest.raises(ValueError, match="the program was not run"):
        NAMESPACE["check_kernel_status"](RUNC_CHOICE.kernel_status_required, observed)


def test_the_bootstrap_reads_its_own_status() -> None:
    status = NAMESPACE["kernel_status"]()
    assert set(status) <= {"Seccomp", "NoNewPrivs"}
    assert status.get("Seccomp") in {"0", "1", "2"}  # this test process's own mode


def test_a_box_the_kernel_did_not_filter_never_runs_the_program(
    session: Session, engine: FakeEngine, state: StateStore
) -> None:
    engine.script = Script(stdout=b"ran\n", kernel_status={"Seccomp": "0", "NoNewPrivs": "1"})
    outcome = session.run(RunRequest(code=b"print('ran')\n"))
    receipt = outcome.receipt
    assert receipt.status is Status.SANDBOX_ERROR
    assert "Seccomp '0'" in receipt.cause.summary
    assert "requires '2'" in receipt.cause.summary
    assert outcome.stdout == b""
    assert engine.containers == {}


def test_a_filtered_box_runs(session: Session, engine: FakeEngine) -> None:
    engine.script = Script(stdout=b"42\n")
    outcome = session.run(RunRequest(code=b"print(6*7)\n"))
    assert outcome.receipt.status is Status.SUCCEEDED
    assert outcome.stdout == b"42\n"
