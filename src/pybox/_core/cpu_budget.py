"""How much CPU time a run's box may have used under its CPU cap (pure).

The kernel's `cpu_usage_s` counts the box's cgroup over its whole life: from the
engine's create (runc's `create`, or runsc's, which makes and joins the cgroup
before it starts the Gofer and the Sentry) through the kill and the teardown.
The program's `run_duration_s` (code arrival to kill) is shorter: under gVisor
the sandbox boots for about 0.4 to 0.7 s inside the cgroup, throttled by the same
quota, before the code arrives. A cap held is therefore judged on two windows
that do cover the counted time, never on the program's duration:

- the kernel's own: at most the quota in each CFS period the cgroup was active
  (`cpu_periods`), plus the one period the count can miss at the box's end, with
  the controller's slack;
- pybox's clock: at most `cpus` times the box's life as pybox saw it (from the
  run's start, before the create request, to the confirmed removal; for a
  warm-pool box whose counters were rebased, from the code's arrival), plus one
  period.

Measured here (docs/isolation.md): 5 spinning threads under 0.5 CPU used 0.0483
to 0.0503 CPU-s per 0.1 s period under gVisor and 0.0501 to 0.0507 under runc.
"""

from __future__ import annotations

from dataclasses import dataclass

from pybox._core.receipt import Receipt

# Docker hands NanoCpus to the kernel as a CFS quota per 100 ms period
# (cpu.cfs_period_us 100000, read in both lanes on this host).
CFS_PERIOD_S = 0.1
# The bandwidth controller hands out runtime in 5 ms slices per CPU, so an
# average period may overrun its quota slightly (measured at most 1.4 %).
PERIOD_OVERRUN = 1.05
# `nr_periods` counts the period timer's expiries while the cgroup is active; the
# period in progress when the box is killed can go uncounted. Measured on Podman
# here: the same 1.06 CPU-s spin counted as 21 periods or as 20 (8 runs each way
# on both engines), and CI once saw 1.12 CPU-s in 21 periods (1.069 x the quota).
UNCOUNTED_EDGE_PERIODS = 1
# One period of slack on pybox's wall-clock window.
WINDOW_SLACK_S = CFS_PERIOD_S


@dataclass(frozen=True)
class CpuBudget:
    """What the cap allowed: over the kernel's active periods and over the box's life."""

    cpus: float
    used_s: float | None
    periods: int | None
    per_period_allowed_s: float | None
    window_s: float | None
    window_from: str
    window_allowed_s: float | None

    @property
    def within_periods(self) -> bool:
        return (
            self.used_s is not None
            and self.per_period_allowed_s is not None
            and self.used_s <= self.per_period_allowed_s
        )

    @property
    def within_window(self) -> bool:
        return (
            self.used_s is not None
            and self.window_allowed_s is not None
            and self.used_s <= self.window_allowed_s
        )


def cpu_budget(receipt: Receipt) -> CpuBudget:
    """The CPU time `receipt`'s box may have used under its configured cap."""
    cpus = float(receipt.configured.limits["cpus"])
    kernel, pybox = receipt.observed_by_kernel, receipt.observed_by_pybox
    periods = kernel.cpu_periods
    per_period = (
        None
        if periods is None
        else round(cpus * CFS_PERIOD_S * (periods + UNCOUNTED_EDGE_PERIODS) * PERIOD_OVERRUN, 4)
    )
    rebased = kernel.counters_since == "code_arrival"
    start = pybox.code_sent_s if rebased else 0.0
    window = (
        None
        if pybox.removed_s is None or start is None
        else round(max(pybox.removed_s - start, 0.0), 4)
    )
    return CpuBudget(
        cpus=cpus,
        used_s=kernel.cpu_usage_s,
        periods=periods,
        per_period_allowed_s=per_period,
        window_s=window,
        window_from="code arrival" if rebased else "the run's start",
        window_allowed_s=None if window is None else round(cpus * window + WINDOW_SLACK_S, 4),
    )
