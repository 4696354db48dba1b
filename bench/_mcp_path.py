"""pybox through `pybox mcp`: one `run_python` tool call per run, checked like the others."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from contextlib import suppress
from typing import IO, Any

from bench._mcp_client import PYBOX_MCP_ARGV, McpClient
from bench._values import (
    CODE,
    PATH_MCP,
    TIMELINE_MARKS,
    BenchFailure,
    Context,
    Outcome,
    PathUnavailable,
    check_stdout,
)


def _find_key(value: Any, key: str, depth: int = 3) -> Any:
    """`key` in a JSON object or one of its nested objects (breadth first)."""
    level = [value]
    for _ in range(depth):
        nested: list[Any] = []
        for item in level:
            if isinstance(item, dict):
                if key in item:
                    return item[key]
                nested.extend(v for v in item.values() if isinstance(v, dict))
        level = nested
    return None


def read_run_python(result: Mapping[str, Any], path: str = PATH_MCP) -> Outcome:
    """Check a `run_python` tool result and read what the receipt says, if it is there."""
    text = " ".join(
        str(part.get("text", "")) for part in result.get("content") or [] if isinstance(part, dict)
    )
    structured = result.get("structuredContent")
    if not isinstance(structured, dict):
        # The specification asks a tool with structured content to repeat it as
        # JSON text for older clients; accept that form too.
        with suppress(ValueError):
            structured = json.loads(text)
    if result.get("isError") or not isinstance(structured, dict):
        raise BenchFailure(f"{path}: tool error or no structuredContent: {text[:500]!r}")
    status = _find_key(structured, "status")
    if status not in (None, "succeeded"):
        raise BenchFailure(f"{path}: status {status!r}: {text[:500]!r}")
    check_stdout(path, str(_find_key(structured, "stdout") or ""), f"({text[:300]!r})")
    receipt = _find_key(structured, "receipt", depth=2)
    if not isinstance(receipt, dict):
        return Outcome()
    timeline = receipt.get("observed_by_pybox") or {}
    return Outcome(
        box_source=timeline.get("box_source"),
        container_id=(receipt.get("observed_by_engine") or {}).get("container_id"),
        box_cpu_s=(receipt.get("observed_by_kernel") or {}).get("cpu_usage_s"),
        marks={m: float(timeline[m]) for m in TIMELINE_MARKS if timeline.get(m) is not None},
    )


def mcp_outcome(ctx: Context, result: Mapping[str, Any]) -> Outcome:
    """`read_run_python`, and remember the box so the cleanup check knows it."""
    outcome = read_run_python(result)
    if outcome.container_id:
        ctx.pybox_container_ids.add(outcome.container_id)
    return outcome


def start_mcp(ctx: Context, stderr: IO[bytes]) -> McpClient:
    """A `pybox mcp` server of this environment's pybox, initialized; or why not."""
    client = McpClient(PYBOX_MCP_ARGV, stderr)
    try:
        client.initialize()
    except PathUnavailable:
        client.close()
        raise
    ctx.owner_pids.add(client.pid)
    return client


def call_mcp(ctx: Context) -> Outcome:
    assert ctx.mcp is not None
    try:
        return mcp_outcome(ctx, ctx.mcp.run_python(CODE))
    except PathUnavailable as exc:
        raise BenchFailure(f"{PATH_MCP}: {exc}") from exc


def think(ctx: Context) -> None:
    time.sleep(ctx.think_s)
