"""A program's outcome: its receipt built from its record, the end event sent,
and Ctrl-C passed on (for one-shot runs and kept boxes alike)."""

from __future__ import annotations

from dataclasses import replace

from pybox._boxes.program import ProgramRun
from pybox._boxes.receipt import build_receipt
from pybox._boxes.record import RunInterrupted, RunOutcome
from pybox._core.egress import EgressObserved
from pybox._core.events import RunEnded


def finish(
    program: ProgramRun, interrupted: bool, egress: EgressObserved | None = None
) -> RunOutcome:
    """The receipt from the program's record; the end event; Ctrl-C passed on."""
    receipt = build_receipt(program.record())
    if egress is not None:
        observed = replace(receipt.observed_by_pybox, egress=egress)
        receipt = replace(receipt, observed_by_pybox=observed)
    files = program.files
    outcome = RunOutcome(
        receipt=receipt,
        stdout=program.stdout.kept(),
        stderr=program.stderr.kept(),
        output_files=tuple(files.files) if files is not None else (),
    )
    program.events.emit(RunEnded(receipt.run_id, receipt.status.value, receipt.exit_code))
    if interrupted:
        raise RunInterrupted(outcome)
    return outcome
