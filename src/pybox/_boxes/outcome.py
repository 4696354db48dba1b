"""After a program: its observers closed, what happened frozen into a record,
its receipt built from that, the end event sent, and Ctrl-C passed on (for
one-shot runs and kept boxes alike)."""

from __future__ import annotations

from dataclasses import replace

from pybox._boxes.program import ProgramRun
from pybox._boxes.receipt import build_receipt
from pybox._boxes.record import RunInterrupted, RunOutcome, RunRecord
from pybox._core.egress import EgressObserved
from pybox._core.events import RunEnded
from pybox._core.receipt import EngineFacts, Unknown, rebase_kernel


def close_observers(program: ProgramRun) -> None:
    """Fold in the kernel samples and close any half-received file."""
    box = program.box
    if box.sampler is not None:
        program.kernel, unknown = box.sampler.observation()
        if program.kernel_baseline is not None:
            program.kernel = rebase_kernel(program.kernel, program.kernel_baseline)
        program.unknown.extend(unknown)
    elif box.started:
        program.unknown.append(
            Unknown(
                "kernel counters",
                "the box's cgroup was not found (engine cgroup layout not recognised)",
            )
        )
    if program.files is not None and not program.files.close():
        program.unknown.append(Unknown("returned files", "the last file arrived incomplete"))


def program_record(program: ProgramRun) -> RunRecord:
    """What happened in the run, frozen for the receipt."""
    box = program.box
    engine = box.context.engine
    marks = dict(program.marks)
    if program.first_in_fresh_box:
        marks.update(
            (k, box.marks[k]) for k in ("created", "verified", "started") if k in box.marks
        )
    if "removed" in box.marks:
        marks["removed"] = box.marks["removed"]
    files = program.files
    return RunRecord(
        run_id=program.run_id,
        started_at=program.started_at,
        pybox_version=box.context.pybox_version,
        engine=EngineFacts(
            endpoint=engine.endpoint.url,
            api_version=engine.api_version,
            server_version=engine.server_version,
            name=engine.name,
        ),
        spec=box.spec,
        image=box.image,
        limits=program.limits,
        request=program.request,
        collect_outputs=files is not None,
        box_source=program.source,
        box_created_at=box.created_at,
        box_waited_s=program.waited_s,
        create_sent=box.create_sent,
        container_id=box.container_id,
        posture=box.posture,
        box_started=box.started,
        box_kept=program.many and box.removal is None,
        protocol=box.protocol,
        final_inspect=box.final_inspect,
        removal_confirmed=box.removal is not None and box.removal.confirmed,
        removal_error=None if box.removal is None else box.removal.error,
        marks={name: at - program.t0 for name, at in marks.items()},
        exit_info=program.exit_info,
        files_report=program.files_report,
        files_lost=program.files_lost,
        files_lost_quote=program.files_lost_quote,
        sandbox_error=program.sandbox_error,
        sandbox_error_quote=program.sandbox_error_quote,
        deadline_kill=program.deadline_kill,
        cancelled=program.cancelled,
        kernel=program.kernel,
        unknown=tuple(program.unknown),
        stdout=program.stdout.report(),
        stderr=program.stderr.report(),
        returned_files=files.digests() if files is not None else (),
        skipped_files=tuple(files.skipped) if files is not None else (),
        skipped_more=files.skipped_more if files is not None else 0,
        leftovers_swept=program.leftovers_swept,
        pool_service=box.context.pool_service,
        preload_report=program.preload_report,
    )


def finish(
    program: ProgramRun, interrupted: bool, egress: EgressObserved | None = None
) -> RunOutcome:
    """The receipt from the program's record; the end event; Ctrl-C passed on."""
    receipt = build_receipt(program_record(program))
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
