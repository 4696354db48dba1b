"""The receipt in a few human lines (for stderr, MCP and the CLI), every one escaped.

The values themselves, and their JSON, are in `receipt`.
"""

from __future__ import annotations

from pybox._core.boxquote import BoxQuote
from pybox._core.display import escape_text, plural, quoted
from pybox._core.egress import NONE, OPEN, describe_egress
from pybox._core.limits import FIELDS_BY_ATTR, MIB
from pybox._core.receipt import OTHER_SKIPPED_FACT, Receipt, SkippedFile
from pybox._core.runtime_limits import KERNEL_SCOPE_GVISOR

# The human summary names this many skipped files; the receipt lists the first 100.
SKIPPED_SHOWN = 3


def format_bytes(size: int | None) -> str:
    if size is None:
        return "unknown"
    if size < 1024:
        return f"{size} B"
    if size < MIB:
        return f"{size / 1024:.1f} KiB"
    return f"{size / MIB:.1f} MiB"


def _seconds(value: float | None) -> str:
    return "unknown" if value is None else f"{value:.2f} s"


def _count(value: int | None, singular: str) -> str:
    return f"unknown {singular}s" if value is None else plural(value, singular)


def summarize(receipt: Receipt, notes: list[str] | None = None) -> list[str]:
    """The receipt in a few human lines, every one escaped.

    With `notes` (a list to fill), no line carries a word that came from inside
    the box: each quoted box text is replaced by a pointer (`box-reported note N`)
    and appended to `notes`, and skipped files are only counted (their names and
    reasons are the caller's to show, apart). Without it, they are shown inline,
    escaped and quoted (the CLI's terminal receipt).
    """

    def said(text: str, quote: BoxQuote | None) -> str:
        if notes is None or quote is None:
            return text
        notes.append(quote.said(text))
        return quote.pointing(text, f"[box-reported note {len(notes)}]")

    limits = receipt.configured.limits
    engine = receipt.observed_by_engine
    kernel = receipt.observed_by_kernel
    program = receipt.reported_by_program
    pybox = receipt.observed_by_pybox
    exit_text = "" if receipt.exit_code is None else f", exit {receipt.exit_code}"
    lines = [
        f"pybox: {receipt.status.value}{exit_text} in {_seconds(pybox.run_duration_s)} "
        f"(run {receipt.run_id})",
        f"  cause:  {said(receipt.cause.summary, receipt.cause.quote)}",
    ]
    image = receipt.configured.image
    posture = (
        f"posture verified ({engine.posture_fields_checked} fields)"
        if engine.posture_verified
        else f"posture NOT verified ({len(engine.posture_mismatches)} mismatches)"
    )
    removal = _removal(engine.removal_confirmed, pybox.box_kept)
    lines.append(f"  box:    image {image.name} {image.id[:19]}; {posture}; {removal}")
    if receipt.configured.executable_paths:
        lines.append(
            f"  exec:   {', '.join(receipt.configured.executable_paths)} mounted without noexec "
            f"(the {image.name} image's recipe: compiled toolchains run what they build)"
        )
    limit_text = "; ".join(
        f"{FIELDS_BY_ATTR[name].describe(limits[name])}{label}"
        for name, label in (
            ("memory_bytes", " memory"),
            ("cpus", ""),
            ("pids", ""),
            ("timeout_s", " timeout"),
        )
    )
    lines.append(f"  limits: {limit_text}; no swap; network {receipt.configured.network}")
    if pybox.egress.mode != NONE:
        lines.append(f"  egress: {describe_egress(pybox.egress)}")
    if receipt.configured.network == OPEN:
        lines[0] = "pybox: [network open: general egress]" + lines[0].removeprefix("pybox:")
    confinement = receipt.configured.confinement
    apparmor = (
        f"AppArmor {confinement.apparmor_profile}"
        if confinement.apparmor_profile
        else "no AppArmor on the engine's host"
    )
    lines.append(
        f"  filter: seccomp profile {confinement.seccomp_profile} "
        f"{confinement.seccomp_profile_sha256[:19]}; {apparmor}"
    )
    isolation = receipt.configured.isolation
    if isolation is not None and not isolation.shares_host_kernel:
        loaded = "--oci-seccomp" in isolation.engine_runtime_args
        lines.append(
            f"  runtime: {isolation.lane} ({isolation.engine_runtime}): system calls go to "
            "gVisor's Sentry, not the host kernel; the seccomp profile is "
            f"{'loaded inside' if loaded else 'not loaded inside'}"
        )
    preload = program.preload
    preload_cost = ""
    if preload is not None and preload.modules and preload.added_rss_bytes is not None:
        preload_cost = (
            f" (of which the preload, box-reported: {format_bytes(preload.added_rss_bytes)})"
        )
    if kernel.samples:
        cpu = "unknown" if kernel.cpu_usage_s is None else f"{kernel.cpu_usage_s:.2f} s"
        whose = (
            " (gVisor sandbox: gVisor and the program)"
            if kernel.scope == KERNEL_SCOPE_GVISOR
            else ""
        )
        lines.append(
            f"  kernel{whose}: memory peak {format_bytes(kernel.memory_peak_bytes)}{preload_cost}; "
            "processes peak "
            f"{kernel.pids_peak if kernel.pids_peak is not None else 'unknown'}; CPU {cpu}; "
            f"throttled {_count(kernel.cpu_throttled_periods, 'period')}; OOM kills "
            f"{kernel.oom_kill_count}; {plural(kernel.samples, 'sample')}"
        )
    else:
        lines.append("  kernel: no samples (see unknown)")
    files = (
        f"; {plural(len(program.output_files), 'file')} returned"
        if receipt.configured.collect_outputs
        else ""
    )
    lines.append(
        f"  output: stdout {format_bytes(program.stdout.bytes_total)}"
        f"{' (truncated)' if program.stdout.truncated else ''}; stderr "
        f"{format_bytes(program.stderr.bytes_total)}"
        f"{' (truncated)' if program.stderr.truncated else ''}{files}"
    )
    if program.workspace_full_bytes is not None:
        lines.append(
            f"  space:  the workspace was full when the program ended, at "
            f"{program.workspace_full_bytes} bytes ({format_bytes(program.workspace_full_bytes)}"
            ": all of /pybox, the writable space limit; the box's count, untrusted)"
        )
    if preload is not None:
        frozen = (
            f"; {plural(preload.frozen_objects, 'object')} frozen by gc.freeze() in "
            f"{_seconds(preload.freeze_s)}"
            if preload.frozen_objects
            else ""
        )
        lines.append(
            f"  preload: {', '.join(preload.modules)} imported before the code arrived{frozen}"
            if preload.modules
            else f"  preload: none; a fresh interpreter ran it ({preload.fallback})"
        )
    if program.output_files_skipped:
        unlisted = any(u.fact == OTHER_SKIPPED_FACT for u in receipt.unknown)
        if notes is None:
            lines.append(skipped_line(program.output_files_skipped, unlisted))
        else:
            more = ", and more (see unknown)" if unlisted else ""
            lines.append(
                f"  skipped: {plural(len(program.output_files_skipped), 'output file')} "
                f"listed as not returned{more}; names and reasons in the box-reported "
                "files section below"
            )
    for unknown in receipt.unknown:
        lines.append(f"  unknown: {unknown.fact}: {said(unknown.reason, unknown.quote)}")
    # Names, reasons and messages may come from inside the box: no line may carry
    # a character a terminal acts on (see pybox._core.display).
    return [escape_text(line) for line in lines]


def skipped_line(skipped: tuple[SkippedFile, ...], unlisted: bool = False) -> str:
    """One line however many files were skipped: the count and the first few, quoted.

    `unlisted`: more were skipped than the receipt lists (`unknown` counts them),
    so the listed count is not the whole count and must not read as one.
    """
    shown = "; ".join(f"{quoted(item.path)} ({item.reason})" for item in skipped[:SKIPPED_SHOWN])
    more = len(skipped) - SKIPPED_SHOWN
    if unlisted:
        rest = f"; {more} more listed in the receipt" if more > 0 else ""
        count = (
            f"{plural(len(skipped), 'output file')} listed as not returned, and more (see unknown)"
        )
        return f"  skipped: {count}: {shown}{rest}"
    rest = f"; {more} more in the receipt" if more > 0 else ""
    return f"  skipped: {plural(len(skipped), 'output file')} not returned: {shown}{rest}"


def _removal(confirmed: bool, kept: str | None) -> str:
    """A box kept on purpose is not one whose removal failed."""
    if kept == "sandbox":
        return "kept (sandbox)"
    if kept is not None:
        return "kept (for its next program)"
    return "removed (confirmed)" if confirmed else "removal NOT confirmed"
