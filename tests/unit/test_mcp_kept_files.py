"""Returned files the MCP server keeps: a byte budget over all runs, and capped reads."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import Any

import pytest

from pybox._adapters.state import StateStore
from pybox._frontends.mcp import ServerOptions, build_dispatcher
from pybox._frontends.mcp._runs import RunRegistry
from tests.unit.conftest import make_session
from tests.unit.fake_engine import FakeEngine, Script
from tests.unit.mcp_harness import Peer

KIB = 1024


@pytest.fixture
def peer(engine: FakeEngine, state: StateStore) -> Peer:
    return Peer(make_session(engine, state))


def registry(peer: Peer) -> RunRegistry:
    return peer.dispatcher.toolbox.registry


def run_with_file(peer: Peer, engine: FakeEngine, name: str, size: int) -> dict[str, Any]:
    engine.script = Script(files=[(name, b"x" * size)])
    result = peer.call("run_python", {"code": "...", "return_files": True})["result"]
    structured: dict[str, Any] = result["structuredContent"]
    return structured


def files_on_disk(peer: Peer) -> int:
    runs = registry(peer).recent()
    roots = {run.files_dir.parent for run in runs if run.files_dir is not None}
    return sum(p.stat().st_size for root in roots for p in Path(root).rglob("*") if p.is_file())


def test_kept_files_stay_within_the_budget_oldest_deleted_first(
    peer: Peer, engine: FakeEngine
) -> None:
    registry(peer).keep_files_bytes = 100 * KIB
    runs = [run_with_file(peer, engine, f"f{i}.bin", 40 * KIB) for i in range(5)]
    assert registry(peer).kept_files_bytes() <= 100 * KIB
    assert files_on_disk(peer) <= 100 * KIB
    oldest, newest = runs[0], runs[-1]
    gone = peer.request("resources/read", {"uri": oldest["files"][0]["uri"]})
    text = gone["error"]["message"]
    assert "were deleted" in text and "keeps at most 102400 bytes" in text
    assert "return_files" in text  # and says what to do instead
    kept = peer.request("resources/read", {"uri": newest["files"][0]["uri"]})["result"]
    assert len(kept["contents"][0]["text"]) == 40 * KIB
    # The run itself, and its receipt, are still there.
    receipt = peer.request("resources/read", {"uri": oldest["resource_uri"]})["result"]
    assert json.loads(receipt["contents"][0]["text"])["status"] == "succeeded"


def test_a_run_alone_above_the_budget_keeps_no_files(peer: Peer, engine: FakeEngine) -> None:
    registry(peer).keep_files_bytes = 10 * KIB
    run = run_with_file(peer, engine, "big.bin", 20 * KIB)
    assert registry(peer).kept_files_bytes() == 0 and files_on_disk(peer) == 0
    gone = peer.request("resources/read", {"uri": run["files"][0]["uri"]})
    assert "were deleted" in gone["error"]["message"]


def test_a_read_above_the_cap_is_refused_and_says_how_else(peer: Peer, engine: FakeEngine) -> None:
    registry(peer).read_max_bytes = 16 * KIB
    run = run_with_file(peer, engine, "big.bin", 16 * KIB + 1)
    refused = peer.request("resources/read", {"uri": run["files"][0]["uri"]})["error"]
    assert refused["code"] == -32602
    assert "16385 bytes" in refused["message"] and "--max-read-mib" in refused["message"]
    assert refused["data"]["read_max_bytes"] == 16 * KIB
    fits = run_with_file(peer, engine, "ok.bin", 16 * KIB)
    assert peer.request("resources/read", {"uri": fits["files"][0]["uri"]})["result"]
    engine.script = Script(stdout=b"y" * (16 * KIB + 1))
    noisy = peer.call("run_python", {"code": "..."})["result"]["structuredContent"]
    refused = peer.request("resources/read", {"uri": noisy["stdout_uri"]})["error"]
    assert "16385 bytes" in refused["message"]


def test_capabilities_tell_the_budget_and_the_read_cap(peer: Peer) -> None:
    read = peer.request("resources/read", {"uri": "pybox://capabilities"})["result"]
    persistence = json.loads(read["contents"][0]["text"])["persistence"]
    assert persistence["kept_files_bytes_max"] == 1024 * KIB * KIB
    assert persistence["read_max_bytes"] == 16 * KIB * KIB


def test_a_killed_servers_kept_files_are_removed_by_the_next(
    engine: FakeEngine, state: StateStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A server SIGKILLed with returned files kept left them in the temporary folder
    # for good; the next server's first kept files sweep them, and it says so.
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    dead = f"{socket.gethostname()}:{os.getpid()}:1"  # this pid, another start: dead
    stale = tmp_path / f".pybox-staging-{dead}-abcd1234"
    (stale / "0123456789abcdef").mkdir(parents=True)
    (stale / "0123456789abcdef" / "data.bin").write_bytes(b"x" * 1000)
    logged: list[str] = []
    session = make_session(engine, state)
    peer = Peer(session)
    peer.dispatcher = build_dispatcher(
        session, ServerOptions(), RunRegistry(session, log=logged.append)
    )
    run = run_with_file(peer, engine, "out.txt", 10)
    assert not stale.exists()
    assert logged == [f"removed {stale}: returned files of a pybox that was killed"]
    [root] = {r.files_dir.parent for r in registry(peer).recent() if r.files_dir is not None}
    assert root.parent == tmp_path and root.name.startswith(".pybox-staging-")
    assert (root / run["run_id"] / "out.txt").read_bytes() == b"x" * 10
