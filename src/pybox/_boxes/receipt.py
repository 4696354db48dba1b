"""The receipt of one run, built from its record (pure: no I/O, no clock).

Everything the box said is untrusted and is kept apart from what the engine,
the kernel and pybox observed; what nobody could observe is listed as unknown.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping
from typing import Any

from pybox._boxes.record import RunRecord
from pybox._core import wire
from pybox._core.boxquote import quoting
from pybox._core.display import plural
from pybox._core.posture import INPUT_DIR, OUTPUT_DIR, PYBOX_ROOT, TMP_DIR
from pybox._core.receipt import (
    Configured,
    ConfinementFacts,
    EngineObserved,
    FileDigest,
    ImageFacts,
    PostureMismatchFact,
    PreloadReport,
    ProgramFacts,
    ProgramReported,
    PyboxObserved,
    Receipt,
    SkippedFile,
    Unknown,
)
from pybox._core.runtime_limits import isolation_facts, kernel_scope
from pybox._core.seccomp import PROFILE_NAME
from pybox._core.status import Evidence, classify


def build_receipt(record: RunRecord) -> Receipt:
    sandbox_error = record.sandbox_error
    if record.removal_error is not None and sandbox_error is None:
        sandbox_error = (
            f"The box {record.spec.name} could not be confirmed removed: {record.removal_error}. "
            "Run `pybox sweep` once the engine answers."
        )
    engine_observed = _engine_observed(record)
    duration = run_duration_s(record.marks)
    exit_info = record.exit_info or {}
    ended_early = record.deadline_kill or record.cancelled
    status, cause, exit_code = classify(
        Evidence(
            sandbox_error=sandbox_error,
            sandbox_error_quote=record.sandbox_error_quote if record.sandbox_error else None,
            cancelled=record.cancelled,
            deadline_kill=record.deadline_kill,
            timeout_s=record.limits.timeout_s,
            run_duration_s=duration,
            engine_exit_code=engine_observed.exit_code,
            engine_oom_killed=engine_observed.oom_killed,
            kernel_oom_kills=record.kernel.oom_kill_count,
            backstop_claimed=_bool_or_none(exit_info.get("backstop")),
            reported_exit_code=_int_or_none(exit_info.get("exit_code")),
            box_kept=record.box_kept,
        )
    )
    unknown = list(record.unknown)
    # In a box kept for its next program, pybox ends the program, not the box.
    ended = "the program was" if record.box_kept else "the box was"
    if record.collect_outputs and ended_early:
        unknown.append(Unknown("returned files", f"not collected: {ended} ended early"))
    if record.exit_info is None and "code_sent" in record.marks and ended_early:
        unknown.append(Unknown("the program's own exit status", f"{ended} ended before it exited"))
    if record.box_kept and record.box_started:
        unknown.append(
            Unknown(
                "the engine's view of the program's end",
                "the box stays up for its next program; the engine reports an exit code "
                "only for a box that ended",
            )
        )
    unknown.extend(_files_unknown(record))
    skipped, more = _skipped(record)
    if more:
        unknown.append(
            Unknown(
                "the other skipped files",
                f"{more} more files were not returned; the receipt lists the first "
                f"{len(skipped)} (the box's part of the count is untrusted)",
            )
        )
    marks = record.marks
    return Receipt(
        run_id=record.run_id,
        status=status,
        exit_code=exit_code,
        cause=cause,
        configured=_configured(record),
        observed_by_engine=engine_observed,
        observed_by_kernel=dataclasses.replace(
            record.kernel, scope=kernel_scope(record.spec.isolation.lane)
        ),
        observed_by_pybox=PyboxObserved(
            started_at=record.started_at,
            create_s=_rounded(marks.get("created")),
            verify_s=_rounded(marks.get("verified")),
            start_s=_rounded(marks.get("started")),
            code_sent_s=_rounded(marks.get("code_sent")),
            program_ended_s=_rounded(marks.get("program_ended")),
            removed_s=_rounded(marks.get("removed")),
            run_duration_s=duration,
            deadline_kill=record.deadline_kill,
            cancelled=record.cancelled,
            leftovers_swept=record.leftovers_swept,
            box_source=record.box_source,
            box_created_at=record.box_created_at,
            box_waited_s=record.box_waited_s,
            pool_service=record.pool_service,
            box_kept=_box_kept(record),
        ),
        reported_by_program=ProgramReported(
            exit_code=_int_or_none(exit_info.get("exit_code")),
            backstop_fired=_bool_or_none(exit_info.get("backstop")),
            stdout=record.stdout,
            stderr=record.stderr,
            output_files=record.returned_files,
            output_files_skipped=tuple(skipped),
            preload=preload_report(record) if _preload_asked(record) else None,
            workspace_full_bytes=(
                _count_or_none(exit_info.get("workspace_full_bytes"))
                if record.protocol in wire.KEEPS_BOX
                else None
            ),
        ),
        unknown=tuple(unknown),
    )


def _box_kept(record: RunRecord) -> str | None:
    if not record.box_kept:
        return None
    return "sandbox" if record.protocol == wire.SANDBOX else "next_program"


def run_duration_s(marks: Mapping[str, float]) -> float | None:
    """From the code sent to the program's end (its exit report, pybox's kill or,
    failing both, the box's removal)."""
    code_sent = marks.get("code_sent")
    end = marks.get("program_ended") or marks.get("killed")
    if end is None and code_sent is not None:
        end = marks.get("removed")
    return None if code_sent is None or end is None else round(end - code_sent, 4)


def _rounded(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 4)


def _engine_observed(record: RunRecord) -> EngineObserved:
    inspected = record.final_inspect or {}
    state: Mapping[str, Any] = inspected.get("State") or {}
    posture = record.posture
    started = record.box_started
    # A box kept for its next program has not ended: the engine reports no exit for it.
    # Nor has one still running at the final inspect, whatever ExitCode says (0 until it
    # ends): pybox stopped waiting for its returned files (issue 12).
    ended = started and bool(state) and not record.box_kept and not state.get("Running")
    return EngineObserved(
        container_id=record.container_id,
        container_name=record.spec.name if record.create_sent else None,
        posture_verified=bool(posture and posture.ok),
        posture_fields_checked=len(posture.checked) if posture else 0,
        posture_mismatches=tuple(
            PostureMismatchFact(m.field, m.expected, m.actual)
            for m in (posture.mismatches if posture else ())
        ),
        state=state.get("Status"),
        exit_code=state.get("ExitCode") if ended else None,
        oom_killed=state.get("OOMKilled") if state and not record.box_kept else None,
        created_at=inspected.get("Created"),
        started_at=state.get("StartedAt") if started else None,
        finished_at=state.get("FinishedAt") if started and not record.box_kept else None,
        removal_confirmed=record.removal_confirmed,
    )


def _files_unknown(record: RunRecord) -> list[Unknown]:
    """What was lost of the returned files after the program's exit report."""
    exit_info = record.exit_info
    if not record.collect_outputs or exit_info is None or _no_files_follow(record, exit_info):
        return []
    received = len(record.returned_files)
    if record.files_lost is not None:
        return [
            Unknown(
                "returned files",
                f"{record.files_lost}; {_kept(received, ' before that')}",
                record.files_lost_quote,  # at the same place: the message starts with it
            )
        ]
    report = record.files_report
    if report is None:
        return [
            Unknown(
                "returned files",
                # Said for a box that ended and for one pybox stopped waiting on alike.
                f"the box did not report the end of the transfer; {_kept(received)}",
            )
        ]
    problem = report.get("problem")
    if isinstance(problem, str):
        reason, quote = quoting("", problem[:300], " (the box's report)")
        return [Unknown("returned files", reason, quote)]
    return []


def _kept(received: int, when: str = "") -> str:
    if received == 0:
        return f"no file was received{when}"
    verb = "is" if received == 1 else "are"
    return f"the {plural(received, 'file')} received{when} {verb} kept"


def _no_files_follow(record: RunRecord, exit_info: Mapping[str, Any]) -> bool:
    """The backstop fired, or (protocol 2) the program was stopped: no files follow."""
    stopped = record.protocol in wire.KEEPS_BOX and exit_info.get("stopped") is True
    return bool(exit_info.get("backstop")) or stopped


def _skipped(record: RunRecord) -> tuple[list[SkippedFile], int]:
    """The skipped files, pybox's and the box's, the first few listed; and how
    many more there were. A box may skip (or send) any number of files."""
    skipped = list(record.skipped_files)
    report = record.files_report or {}
    items = report.get("files_skipped")
    for item in items if isinstance(items, list) else []:
        if isinstance(item, dict):
            skipped.append(
                SkippedFile(str(item.get("path", ""))[:1024], str(item.get("reason", ""))[:200])
            )
    more = max(_int_or_none(report.get("files_skipped_more")) or 0, 0)
    more += max(len(skipped) - wire.MAX_SKIPPED_LISTED, 0)
    if record.collect_outputs:
        more += record.skipped_more
    return skipped[: wire.MAX_SKIPPED_LISTED], more


def _configured(record: RunRecord) -> Configured:
    spec, image, request = record.spec, record.image, record.request
    return Configured(
        pybox_version=record.pybox_version,
        engine=record.engine,
        runtime=spec.runtime,
        image=ImageFacts(image.name, image.image_id, image.recipe_hash, image.digest),
        limits=record.limits.to_dict(),
        network=spec.egress.mode,
        user=spec.user,
        confinement=ConfinementFacts(
            seccomp_profile=PROFILE_NAME,
            seccomp_profile_sha256=spec.confinement.seccomp_sha256,
            apparmor_profile=spec.confinement.apparmor_profile,
            apparmor=spec.confinement.apparmor_basis,
        ),
        writable_paths=(PYBOX_ROOT, TMP_DIR, "/dev/shm"),
        input_dir=INPUT_DIR,
        output_dir=OUTPUT_DIR,
        code=FileDigest(request.code_name, len(request.code), _sha256(request.code)),
        inputs=tuple(FileDigest(i.name, len(i.data), _sha256(i.data)) for i in request.inputs),
        collect_outputs=record.collect_outputs,
        isolation=isolation_facts(spec.isolation, record.limits),
        preload=record.spec.preload if _preload_asked(record) else (),
        executable_paths=spec.executable_paths,
        program=ProgramFacts(
            request.program,
            (image.python_path, *request.interpreter_flags, request.code_name),
        ),
    )


def _preload_asked(record: RunRecord) -> bool:
    """The box's first program ran in the interpreter that was asked to preload."""
    return bool(record.spec.preload) and record.box_source != "same_box"


def preload_report(record: RunRecord) -> PreloadReport:
    """The bootstrap's word on the preload, kept only in the shapes it may take:
    modules only those asked for, numbers only numbers, the reason bounded."""
    raw = record.preload_report or {}
    asked = record.spec.preload
    said = raw.get("modules")
    modules = tuple(m for m in asked if isinstance(said, list) and m in said)
    fallback = raw.get("fallback")
    if record.preload_report is None:
        fallback = "the box sent no preload report"
    elif not isinstance(fallback, str | None):
        fallback = "the box's reason was not text"
    rss, before = _count_or_none(raw.get("rss_bytes")), _count_or_none(raw.get("rss_before_bytes"))
    return PreloadReport(
        modules=modules,
        fallback=None if fallback is None else fallback[:500],
        seconds=_seconds_or_none(raw.get("seconds")),
        waited_s=_seconds_or_none(raw.get("waited_s")),
        rss_bytes=rss,
        added_rss_bytes=None if rss is None or before is None else max(rss - before, 0),
        peak_rss_bytes=_count_or_none(raw.get("peak_rss_bytes")),
        frozen_objects=0 if not modules else _count_or_none(raw.get("frozen_objects")),
        freeze_s=_seconds_or_none(raw.get("freeze_s")),
    )


def _count_or_none(value: object) -> int | None:
    number = _int_or_none(value)
    return number if number is not None and 0 <= number < 2**63 else None


def _seconds_or_none(value: object) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value < 1e9:
        return round(float(value), 4)
    return None


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _int_or_none(value: object) -> int | None:
    """An exit code from inside the box, if it is one (it is untrusted)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _bool_or_none(value: object) -> bool | None:
    """A yes/no from inside the box, if it is one (it is untrusted)."""
    return value if isinstance(value, bool) else None
