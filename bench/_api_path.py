"""pybox through its Python API: the one-shot call and the warm pool's client."""

from __future__ import annotations

from bench._values import (
    CODE,
    PATH_COLD,
    PATH_WARM,
    REFILL_WAIT_S,
    TIMELINE_MARKS,
    BenchFailure,
    Context,
    Outcome,
    check_stdout,
)
from pybox import RunResult, run_container


def pybox_outcome(ctx: Context, path: str, result: RunResult) -> Outcome:
    receipt = result.receipt
    if result.status != "succeeded":
        raise BenchFailure(
            f"{path}: status {result.status}, stderr {result.stderr[-500:]!r}, "
            f"cause {receipt.cause.summary!r}"
        )
    check_stdout(path, result.stdout)
    timeline = receipt.observed_by_pybox
    container_id = receipt.observed_by_engine.container_id
    if container_id:
        ctx.pybox_container_ids.add(container_id)
    marks = {m: v for m in TIMELINE_MARKS if (v := getattr(timeline, m)) is not None}
    return Outcome(
        box_source=timeline.box_source,
        container_id=container_id,
        box_cpu_s=receipt.observed_by_kernel.cpu_usage_s,
        marks=marks,
    )


def call_cold(ctx: Context) -> Outcome:
    return pybox_outcome(ctx, PATH_COLD, run_container(CODE))


def call_warm(ctx: Context) -> Outcome:
    assert ctx.warm is not None
    return pybox_outcome(ctx, PATH_WARM, ctx.warm.run(CODE))


def refill_pool(ctx: Context) -> None:
    """The think-time between an agent's calls: wait until the pool is full again."""
    assert ctx.warm is not None
    if not ctx.warm.warm_up(wait_s=REFILL_WAIT_S):
        ctx.refill_timeouts += 1


def recorded_box(ctx: Context) -> tuple[str, dict[str, float]]:
    """The image ID and the limits pybox applies by default, from one run's receipt.

    The docker baseline runs on exactly these, so the two boxes are equivalent.
    """
    first = run_container(CODE)
    pybox_outcome(ctx, "set-up", first)
    limits = {key: float(value) for key, value in first.receipt.configured.limits.items()}
    return first.receipt.configured.image.id, limits
