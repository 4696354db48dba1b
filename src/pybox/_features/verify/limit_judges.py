"""The judges of the limit cases: memory, processes, CPU, disk, output and time.

Each judge takes one run's outcome and checks that the cap held. What the
program printed came from inside the box and is untrusted: where the kernel,
the engine or pybox can see a fact (a peak, a counter, the deadline kill), the
judge relies on that.
"""

from __future__ import annotations

from typing import Any

from pybox._boxes.record import RunOutcome
from pybox._core.cpu_budget import CFS_PERIOD_S, cpu_budget
from pybox._core.limits import MIB
from pybox._core.receipt import Status
from pybox._core.runtime_limits import (
    GVISOR_HOST_THREADS_BASE,
    GVISOR_HOST_THREADS_PER_PROCESS,
    KERNEL_SCOPE_GVISOR,
)
from pybox._features.verify.lanes import lane_terms
from pybox._features.verify.verdict import Verdict, judge_posture_read_back, program_report

FLOOD_STDOUT_BYTES = 256 * MIB
FLOOD_STDERR_BYTES = 128 * MIB
# pybox keeps head and tail of each stream; its own memory may grow by this much at most.
FLOOD_RSS_GROWTH_LIMIT_BYTES = 64 * MIB
# A deadline kill lands within this much of the deadline.
DEADLINE_SLACK_S = 1.5

TRUNCATION_MARK = b"[pybox: output truncated"


def judge_memory_bomb(outcome: RunOutcome, verdict: Verdict) -> None:
    receipt = outcome.receipt
    kernel, engine = receipt.observed_by_kernel, receipt.observed_by_engine
    cap = int(receipt.configured.limits["memory_bytes"])
    verdict.check(
        receipt.status is Status.OUT_OF_MEMORY,
        f"status {receipt.status.value}, not out_of_memory ({receipt.cause.summary})",
    )
    if verdict.check(
        bool(kernel.oom_kill_count) or engine.oom_killed is True,
        "no kernel or engine evidence of an OOM kill",
    ):
        if kernel.oom_kill_count:
            verdict.saw("kernel", f"the cgroup's OOM-kill counter is {kernel.oom_kill_count}")
        if engine.oom_killed:
            verdict.saw("engine", "State.OOMKilled is true")
    verdict.check(
        kernel.memory_limit_bytes == cap,
        f"the kernel's memory limit is {kernel.memory_limit_bytes}, not {cap}",
    )
    peak = kernel.memory_peak_bytes
    verdict.check(
        peak is not None and peak >= cap * 0.9, f"memory peak {peak} never came near the cap {cap}"
    )
    # Under gVisor the kernel's forced charge of the dying sandbox was measured one
    # page over the limit (67112960 for 67108864); under runc never.
    over = lane_terms(receipt).memory_over_bytes
    if verdict.check(
        peak is not None and peak <= cap + over,
        f"memory peak {peak} is not within the cap {cap}" + (" plus one page" if over else ""),
    ):
        verdict.saw(
            "kernel",
            f"limit {cap // MIB} MiB; peak {(peak or 0) / MIB:.1f} MiB ({peak} bytes, "
            f"{kernel.memory_peak_source}, {kernel_scope_words(kernel.scope)}); the host gave "
            "the box no more"
            + (" than the cap and one page of the OOM kill's forced charge" if over else ""),
        )
    held = [line for line in outcome.stdout.decode("ascii", "replace").splitlines() if line]
    verdict.saw("program", f"last words: {held[-1] if held else 'none'!r}")


def judge_fork_bomb(outcome: RunOutcome, verdict: Verdict) -> None:
    receipt = outcome.receipt
    if not lane_terms(receipt).kernel_is_host:
        _judge_fork_bomb_in_gvisor(outcome, verdict)
        return
    kernel = receipt.observed_by_kernel
    cap = int(receipt.configured.limits["pids"])
    verdict.check(kernel.pids_limit == cap, f"the kernel's pids limit is {kernel.pids_limit}")
    # A sample of pids.current may read cap + 1: the kernel counts a fork before
    # it checks the cap and takes it back when it refuses. Its own peak counter
    # (pids.peak) counts only forks it let through.
    sampled = kernel.pids_peak_source != "kernel peak counter"
    allowed = (cap, cap + 1) if sampled else (cap,)
    verdict.check(
        kernel.pids_peak in allowed,
        f"the processes peak is {kernel.pids_peak}, not the cap {cap}"
        + (" (or one more, a refused fork counted for an instant)" if sampled else ""),
    )
    verdict.check(
        bool(kernel.pids_limit_hits), f"the kernel counted {kernel.pids_limit_hits} refused forks"
    )
    verdict.check(
        receipt.status is Status.TIMED_OUT and receipt.observed_by_pybox.deadline_kill,
        f"status {receipt.status.value}: the bomb was not ended at the deadline",
    )
    verdict.saw(
        "kernel",
        f"pids limit {kernel.pids_limit}; peak {kernel.pids_peak} ({kernel.pids_peak_source}); "
        f"{kernel.pids_limit_hits} forks refused at the cap",
    )
    verdict.saw("pybox", f"ended at the {receipt.configured.limits['timeout_s']:g} s deadline")
    verdict.saw("program", outcome.stdout.decode("utf-8", "replace").strip()[:80] or "silent")


def _judge_fork_bomb_in_gvisor(outcome: RunOutcome, verdict: Verdict) -> None:
    """The Sentry holds the program's processes (RLIMIT_NPROC = the cap); the host's
    pids cgroup holds the sandbox's host threads at the backstop derived from it. A
    bomb drives the Sentry's threads to the backstop, where the sandbox may end
    before the deadline: contained when the host's count stayed at the backstop and
    the run ended by the deadline either way (docs/isolation.md)."""
    receipt = outcome.receipt
    kernel, pybox = receipt.observed_by_kernel, receipt.observed_by_pybox
    limits = receipt.configured.limits
    cap, timeout_s = int(limits["pids"]), float(limits["timeout_s"])
    backstop = GVISOR_HOST_THREADS_BASE + GVISOR_HOST_THREADS_PER_PROCESS * cap
    verdict.check(
        kernel.pids_limit == backstop,
        f"the kernel's pids limit is {kernel.pids_limit}, not gVisor's backstop {backstop}",
    )
    peak = kernel.pids_peak
    verdict.check(
        peak is not None and peak <= backstop,
        f"the host threads peak {peak} is not within the backstop {backstop}",
    )
    duration = pybox.run_duration_s
    timed_out = receipt.status is Status.TIMED_OUT and pybox.deadline_kill
    # The sandbox's end must be the backstop's doing: the host refused a thread.
    ended = (
        receipt.status is Status.FAILED and not pybox.deadline_kill and bool(kernel.pids_limit_hits)
    )
    verdict.check(
        (timed_out or ended) and duration is not None and duration < timeout_s + DEADLINE_SLACK_S,
        f"status {receipt.status.value} after {duration} s: the bomb was neither ended at the "
        f"{timeout_s:g} s deadline nor by the sandbox's end",
    )
    verdict.saw(
        "kernel",
        f"host pids limit {kernel.pids_limit} (gVisor's backstop for {cap} processes); peak "
        f"{peak} host threads ({kernel.pids_peak_source}); {kernel.pids_limit_hits} host "
        f"thread creations refused ({kernel_scope_words(kernel.scope)})",
    )
    verdict.saw(
        "pybox",
        f"ended at the {timeout_s:g} s deadline"
        if timed_out
        else f"the sandbox ended at its backstop after {duration} s ({receipt.cause.summary})",
    )
    verdict.saw(
        "program",
        (outcome.stdout.decode("utf-8", "replace").strip()[:80] or "silent")
        + f" (the Sentry's RLIMIT_NPROC is {cap})",
    )


def judge_cpu_spin(outcome: RunOutcome, verdict: Verdict) -> None:
    """The quota held: the kernel's CPU time within the quota of every period it
    counted and within `cpus` times the box's life by pybox's clock (the counter
    covers the box's whole life, its start and teardown included: pybox._core.cpu_budget)."""
    receipt = outcome.receipt
    kernel = receipt.observed_by_kernel
    cpus = float(receipt.configured.limits["cpus"])
    timeout_s = float(receipt.configured.limits["timeout_s"])
    duration = receipt.observed_by_pybox.run_duration_s or 0.0
    verdict.check(
        receipt.status is Status.TIMED_OUT and receipt.observed_by_pybox.deadline_kill,
        f"status {receipt.status.value}, not ended at the deadline",
    )
    verdict.check(
        timeout_s <= duration < timeout_s + DEADLINE_SLACK_S,
        f"ran {duration:.2f} s for a {timeout_s:g} s deadline",
    )
    verdict.check(
        kernel.cpu_quota_cpus == cpus, f"the kernel's CPU quota is {kernel.cpu_quota_cpus}"
    )
    verdict.check(
        bool(kernel.cpu_throttled_periods), f"throttled periods: {kernel.cpu_throttled_periods}"
    )
    budget = cpu_budget(receipt)
    usage = budget.used_s
    verdict.check(
        budget.within_periods,
        f"used {usage} CPU-seconds in {budget.periods} periods of {CFS_PERIOD_S:g} s; the "
        f"quota allows {budget.per_period_allowed_s}",
    )
    verdict.check(
        budget.within_window,
        f"used {usage} CPU-seconds while the box lived {budget.window_s} s; the quota "
        f"allows {budget.window_allowed_s}",
    )
    per_period = (usage or 0.0) / budget.periods if budget.periods else 0.0
    verdict.saw(
        "kernel",
        f"quota {kernel.cpu_quota_cpus} CPU; used {usage or 0:.2f} CPU-s in "
        f"{budget.periods} periods ({per_period:.4f} CPU-s per {CFS_PERIOD_S:g} s period, "
        f"quota {cpus * CFS_PERIOD_S:g}); throttled {kernel.cpu_throttled_periods} of "
        f"{kernel.cpu_periods} periods ({kernel_scope_words(kernel.scope)})",
    )
    verdict.saw(
        "pybox",
        f"ended at the {timeout_s:g} s deadline, after {duration:.2f} s; the box lived "
        f"{budget.window_s or 0:.2f} s from {budget.window_from} to its removal (the quota allows "
        f"{budget.window_allowed_s or 0:.2f} CPU-s)",
    )


def _tally(errors: dict[str, int]) -> str:
    return ", ".join(f"{name} x{count}" for name, count in sorted(errors.items()))


def kernel_scope_words(scope: str) -> str:
    return (
        "the gVisor sandbox: gVisor and the program" if scope == KERNEL_SCOPE_GVISOR else "the box"
    )


def judge_disk_fill(outcome: RunOutcome, verdict: Verdict) -> None:
    report = program_report(outcome.stdout, outcome.stderr, verdict)
    judge_posture_read_back(outcome.receipt, verdict)
    if not report:
        return
    cap = int(outcome.receipt.configured.limits["writable_bytes"])
    written = report.get("root_written") or []
    errors: dict[str, int] = report.get("root_errors") or {}
    probes = int(report.get("root_probes") or 0)
    verdict.check(probes > 50, f"only {probes} directories probed")
    verdict.check(not written, f"files created on the root filesystem in {written}")
    terms = lane_terms(outcome.receipt)
    allowed, required = terms.root_write_errors, terms.root_write_error_required
    verdict.check(
        set(errors) <= set(allowed) and (required is None or errors.get(required, 0) >= 1),
        f"root filesystem errors other than {' and '.join(allowed)}"
        + (f", or no {required}" if required else "")
        + f": {errors}",
    )
    # EACCES where the box user may not even enter the directory (/root): still no write.
    named: dict[str, str] = report.get("named") or {}
    verdict.check(
        bool(named) and set(named.values()) <= {"EROFS", "EACCES"},
        f"named directories: {named}",
    )
    verdict.check(report.get(terms.root_read_only_report) is True, terms.root_read_only_missing)
    verdict.saw(
        "program",
        f"every write in the {probes} directories of the root filesystem failed "
        f"({_tally(errors)}; {', '.join(f'{d} {e}' for d, e in named.items())}); "
        + terms.root_read_only_words,
    )
    fills: dict[str, dict[str, Any]] = report.get("fills") or {}
    verdict.check(len(fills) == 3, f"filled {sorted(fills)}")
    for directory, fill in sorted(fills.items()):
        size = int(fill.get("bytes") or 0)
        verdict.check(
            fill.get("error") == "ENOSPC" and size <= cap,
            f"filling {directory} ended with {fill.get('error')} after {size} bytes (cap {cap})",
        )
    verdict.saw(
        "program",
        "filling "
        + ", ".join(
            f"{d} ended {f.get('error')} at {int(f.get('bytes') or 0) / MIB:.0f} MiB"
            for d, f in sorted(fills.items())
        )
        + f" (cap {cap / MIB:.0f} MiB; $HOME is {report.get('home')})",
    )


def judge_output_flood(
    outcome: RunOutcome, verdict: Verdict, rss_growth_bytes: int | None, rss_how: str
) -> None:
    receipt = outcome.receipt
    kept_limit = int(receipt.configured.limits["output_bytes"])
    verdict.check(receipt.status is Status.SUCCEEDED, f"status {receipt.status.value}")
    streams = receipt.reported_by_program
    for name, stream, sent, kept in (
        ("stdout", streams.stdout, FLOOD_STDOUT_BYTES, outcome.stdout),
        ("stderr", streams.stderr, FLOOD_STDERR_BYTES, outcome.stderr),
    ):
        verdict.check(
            stream.bytes_total == sent,
            f"{name}: pybox counted {stream.bytes_total} of {sent} bytes",
        )
        verdict.check(stream.truncated, f"{name} is not marked truncated")
        verdict.check(
            stream.bytes_kept <= kept_limit and len(kept) <= kept_limit + 200,
            f"{name}: kept {stream.bytes_kept} bytes, over the {kept_limit} byte cap",
        )
        verdict.check(TRUNCATION_MARK in kept, f"{name} carries no truncation mark")
    verdict.saw(
        "pybox",
        f"received {streams.stdout.bytes_total / MIB:.0f} MiB stdout and "
        f"{streams.stderr.bytes_total / MIB:.0f} MiB stderr; kept {streams.stdout.bytes_kept} "
        f"+ {streams.stderr.bytes_kept} bytes, truncation marked",
    )
    if verdict.check(rss_growth_bytes is not None, "pybox's own memory could not be measured"):
        growth = rss_growth_bytes or 0
        verdict.check(
            growth <= FLOOD_RSS_GROWTH_LIMIT_BYTES,
            f"pybox's memory grew by {growth / MIB:.1f} MiB "
            f"(limit {FLOOD_RSS_GROWTH_LIMIT_BYTES / MIB:.0f} MiB)",
        )
        verdict.saw(
            "host",
            f"pybox's own peak memory grew by {growth / MIB:.1f} MiB during the flood "
            f"({rss_how}; bound {FLOOD_RSS_GROWTH_LIMIT_BYTES / MIB:.0f} MiB)",
        )


def judge_timeout_evasion(outcome: RunOutcome, verdict: Verdict) -> None:
    receipt = outcome.receipt
    kernel = receipt.observed_by_kernel
    timeout_s = float(receipt.configured.limits["timeout_s"])
    duration = receipt.observed_by_pybox.run_duration_s or 0.0
    verdict.check(
        receipt.status is Status.TIMED_OUT and receipt.observed_by_pybox.deadline_kill,
        f"status {receipt.status.value}, not a deadline kill",
    )
    verdict.check(
        timeout_s <= duration < timeout_s + DEADLINE_SLACK_S,
        f"ended after {duration:.2f} s for a {timeout_s:g} s deadline",
    )
    # The program, 3 children, 3 daemons (and the bootstrap).
    verdict.check(
        (kernel.pids_peak or 0) >= 7, f"processes peak {kernel.pids_peak}: the children never ran"
    )
    started = b"children and daemons started" in outcome.stdout
    verdict.check(started, "the program never said its children started")
    verdict.saw("program", "ignored SIGTERM; 3 children and 3 double-forked setsid daemons")
    verdict.saw(
        "kernel", f"processes peak {kernel.pids_peak} ({kernel.pids_peak_source}) in the box"
    )
    verdict.saw("pybox", f"killed the box at the {timeout_s:g} s deadline, after {duration:.2f} s")
