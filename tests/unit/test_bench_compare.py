"""The benchmark's arithmetic and its MCP client, without an engine.

bench/compare.py is split into bench/_*.py modules; each name is taken from
the module that defines it.

The benchmark itself is not a test (it measures; it never asserts a time);
these check that what it prints is computed correctly.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import sys
import tempfile
import textwrap
from typing import Any

import pytest
from bench import (
    _calls,
    _cpu,
    _docker,
    _environment,
    _mcp_client,
    _mcp_path,
    _report,
    _rounds,
    _stats,
    _values,
    compare,
)
from bench._values import Sample


def test_percentile_interpolates_between_ranks() -> None:
    values = [4.0, 1.0, 3.0, 2.0]
    assert _stats.percentile(values, 0) == 1.0
    assert _stats.percentile(values, 50) == 2.5
    assert _stats.percentile(values, 100) == 4.0
    assert _stats.percentile(values, 95) == pytest.approx(3.85)
    assert _stats.percentile([7.0], 95) == 7.0
    with pytest.raises(ValueError):
        _stats.percentile([], 50)


def test_wall_stats_are_in_milliseconds() -> None:
    stats = _stats.wall_stats([0.1, 0.3, 0.2])
    assert stats == {
        "n": 3,
        "p50_ms": pytest.approx(200.0),
        "p95_ms": pytest.approx(290.0),
        "min_ms": pytest.approx(100.0),
        "max_ms": pytest.approx(300.0),
    }


def test_ratios_divide_by_the_baseline_from_the_same_run() -> None:
    stats = {
        "docker": {"p50_ms": 200.0, "p95_ms": 400.0},
        "pybox_warm": {"p50_ms": 40.0, "p95_ms": 60.0},
    }
    assert _stats.ratios_to_baseline(stats) == {
        "pybox_warm": {"p50": pytest.approx(0.2), "p95": pytest.approx(0.15)}
    }
    assert _stats.ratio(None, 2.0) is None
    assert _stats.ratio(1.0, 0.0) is None


def test_targets_pass_miss_and_not_measured() -> None:
    wall = {
        "docker": {"p50_ms": 200.0},
        "pybox_cold": {"p50_ms": 110.0},  # 0.55x: misses 0.5, passes 0.6
        "pybox_warm": {"p50_ms": 40.0},  # 0.2x: at the bound passes
        "epicbox": {"p50_ms": 300.0},
    }
    cpu = {
        "docker": {"net_ms": 100.0, "attributed_ms": 80.0},
        "pybox_cold": {"net_ms": 60.0, "attributed_ms": 40.0},
    }
    found = {t["target"]: (t["verdict"], t["value"]) for t in _stats.targets(wall, cpu)}
    verdicts = {name: verdict for name, (verdict, _) in found.items()}
    assert verdicts["warm pool (issue 5): pybox_warm p50 <= 0.2x docker run p50"] == "PASS"
    assert verdicts["cold path (issue 5): pybox_cold p50 <= 0.5x docker run p50"] == "MISS"
    assert verdicts["cold path (engine issue): pybox_cold p50 <= 0.6x docker run p50"] == "PASS"
    assert found["epicbox p50 >= 3x pybox_warm p50"] == ("PASS", pytest.approx(7.5))
    assert verdicts["epicbox p50 >= 3x pybox_cold p50"] == "MISS"
    assert verdicts["llm_sandbox p50 >= 3x pybox_warm p50"] == "n/a"
    machine = "CPU per box (whole machine, net): pybox_cold <= 0.5x docker run's"
    assert found[machine] == ("MISS", 0.6)
    assert found["CPU per box (attributed): pybox_cold <= 0.5x docker run's"] == ("PASS", 0.5)
    assert verdicts["CPU per box (attributed): pybox_warm <= 0.5x docker run's"] == "n/a"
    # A busy machine while idle: the whole-machine figure is neither a pass nor a miss.
    cpu["pybox_cold"]["background_cpus_max"] = 0.8
    noisy = {t["target"]: t["verdict"] for t in _stats.targets(wall, cpu)}
    assert noisy[machine] == "NOISY"


def test_timeline_steps_and_box_sources() -> None:
    marks = {"code_sent_s": 0.002, "program_ended_s": 0.007, "removed_s": 0.050}
    samples = [
        Sample(0.052, 0.001, None, box_source="warm_pool", marks=marks),
        Sample(0.150, 0.001, None, box_source="fresh", marks={"removed_s": 0.148}),
    ]
    timeline = _stats.timeline_stats(samples[:1])
    assert timeline["steps_p50_ms"]["program_ended_s -> removed_s"] == pytest.approx(43.0)
    assert timeline["steps_p50_ms"]["outside timeline (wall - removed_s)"] == pytest.approx(2.0)
    assert _stats.box_sources(samples) == {"warm_pool": 1, "fresh": 1}


def test_cpu_summary_takes_medians_per_box() -> None:
    batches = [
        {"gross_s": 0.3, "net_s": 0.1, "background_cpus": 0.5},
        {"gross_s": 0.5, "net_s": 0.2, "background_cpus": 1.5},
        {"gross_s": 0.4, "net_s": 0.3, "background_cpus": 1.0},
    ]
    summary = _cpu.cpu_summary(batches)
    assert summary["batches"] == 3
    assert summary["gross_ms"] == pytest.approx(400.0)
    assert summary["net_ms"] == pytest.approx(200.0)
    assert summary["background_cpus"] == pytest.approx(1.0)
    assert summary["background_cpus_max"] == pytest.approx(1.5)
    assert "engine_ms" not in summary


def test_batch_cpu_subtracts_background_and_attributes_the_parts() -> None:
    before = _cpu.CpuCounters(machine_s=10.0, client_s=1.0, engine_s=5.0, boxes_s=20.0)
    after = _cpu.CpuCounters(machine_s=12.0, client_s=1.1, engine_s=5.4, boxes_s=20.5)
    figures = _cpu.batch_cpu(before, after, boxes=10, wall_s=2.0, background_cpus=0.25)
    assert figures["gross_s"] == pytest.approx(0.2)
    assert figures["net_s"] == pytest.approx(0.15)  # 2.0 s busy less 0.25 CPUs x 2 s
    assert figures["client_s"] == pytest.approx(0.01)
    assert figures["engine_s"] == pytest.approx(0.04)
    assert figures["boxes_s"] == pytest.approx(0.05)
    assert figures["attributed_s"] == pytest.approx(0.10)
    unknown = _cpu.CpuCounters(machine_s=12.0, client_s=1.1, engine_s=None, boxes_s=None)
    assert "attributed_s" not in _cpu.batch_cpu(before, unknown, 10, 2.0, 0.0)


def test_busy_cpu_leaves_out_idle_and_iowait() -> None:
    # user nice system idle iowait irq softirq steal guest guest_nice
    line = "cpu  100 10 50 9000 300 5 5 2 40 0"
    ticks = os.sysconf("SC_CLK_TCK")
    assert _calls.busy_cpu_s(line) == pytest.approx(172 / ticks)


def test_round_order_rotates_evenly_or_shuffles_reproducibly() -> None:
    paths = ["a", "b", "c"]
    leaders = [_rounds.round_order(paths, index, None)[0] for index in range(6)]
    assert leaders == ["a", "b", "c", "a", "b", "c"]
    first = [_rounds.round_order(paths, 0, random.Random(7)) for _ in range(2)]
    assert sorted(first[0]) == paths
    assert first[0] == _rounds.round_order(paths, 0, random.Random(7))


def test_paths_always_include_the_baseline() -> None:
    assert compare.parse_paths("pybox_warm", peers=False) == ["docker", "pybox_warm"]
    assert compare.parse_paths("pybox_cold", peers=True) == [
        "docker",
        "pybox_cold",
        "llm_sandbox",
        "epicbox",
    ]
    with pytest.raises(ValueError, match="unknown path"):
        compare.parse_paths("docker,nope", peers=False)


def test_docker_flags_follow_the_receipts_limits() -> None:
    limits = {
        "memory_bytes": 256 * 1024 * 1024,
        "writable_bytes": 8 * 1024 * 1024,
        "open_files": 64,
        "cpus": 0.5,
        "pids": 32,
    }
    argv = _docker.docker_argv("sha256:abc", limits, "tok")
    pairs = dict(itertools.pairwise(argv))
    assert pairs["--memory"] == pairs["--memory-swap"] == "268435456b"
    assert pairs["--cpus"] == "0.5"
    assert pairs["--pids-limit"] == "32"
    assert pairs["--network"] == "none"
    assert pairs["--label"] == "io.pybox.bench=tok"
    assert "nofile=64:64" in argv
    assert argv[-4:] == ["sha256:abc", "/usr/bin/python3", "-c", "print(6*7)"]


def test_owner_label_matches_only_our_processes() -> None:
    assert _environment.owned_by("host:123:456", {123}, "host")
    assert not _environment.owned_by("host:124:456", {123}, "host")
    assert not _environment.owned_by("other:123:456", {123}, "host")
    assert not _environment.owned_by("garbage", {123}, "host")


def _structured(stdout: str, status: str = "succeeded") -> dict[str, Any]:
    receipt = {
        "observed_by_pybox": {"box_source": "warm_pool", "code_sent_s": 0.001},
        "observed_by_engine": {"container_id": "c1"},
        "observed_by_kernel": {"cpu_usage_s": 0.004},
    }
    return {
        "content": [{"type": "text", "text": stdout}],
        "structuredContent": {"status": status, "stdout": stdout, "receipt": receipt},
        "isError": False,
    }


def test_mcp_outcome_checks_output_and_reads_the_receipt() -> None:
    ctx = _values.Context("tok", ())
    outcome = _mcp_path.mcp_outcome(ctx, _structured("42\n"))
    assert outcome.box_source == "warm_pool"
    assert outcome.marks == {"code_sent_s": 0.001}
    assert ctx.pybox_container_ids == {"c1"}
    with pytest.raises(_values.BenchFailure, match="expected stdout"):
        _mcp_path.mcp_outcome(ctx, _structured("41\n"))
    with pytest.raises(_values.BenchFailure, match="status"):
        _mcp_path.mcp_outcome(ctx, _structured("42\n", status="failed"))
    as_text = {"content": [{"type": "text", "text": json.dumps({"stdout": "42\n"})}]}
    assert _mcp_path.mcp_outcome(ctx, as_text).box_source is None
    with pytest.raises(_values.BenchFailure, match="tool error"):
        _mcp_path.mcp_outcome(ctx, {"isError": True, "content": [{"text": "boom"}]})


# A stdio MCP server that answers like `pybox mcp` would, and pings the client
# once in between, as a server may.
FAKE_SERVER = textwrap.dedent(
    """
    import json, sys
    def send(message):
        sys.stdout.write(json.dumps(message) + "\\n")
        sys.stdout.flush()
    for line in sys.stdin:
        message = json.loads(line)
        if message.get("method") == "initialize":
            assert message["params"]["protocolVersion"] == "2025-11-25"
            send({"jsonrpc": "2.0", "id": message["id"], "result": {
                "protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
                "serverInfo": {"name": "fake", "version": "0"}}})
        elif message.get("method") == "notifications/initialized":
            send({"jsonrpc": "2.0", "method": "notifications/message",
                  "params": {"level": "info", "data": "ready"}})
        elif message.get("method") == "tools/call":
            assert message["params"]["name"] == "run_python"
            send({"jsonrpc": "2.0", "id": "srv-1", "method": "ping"})
            pong = json.loads(sys.stdin.readline())
            assert pong == {"jsonrpc": "2.0", "id": "srv-1", "result": {}}
            code = message["params"]["arguments"]["code"]
            out = str(eval(code[len("print("):-1])) + "\\n"
            send({"jsonrpc": "2.0", "id": message["id"], "result": {
                "content": [{"type": "text", "text": out}],
                "structuredContent": {"status": "succeeded", "stdout": out},
                "isError": False}})
    """
)


def test_mcp_client_speaks_newline_delimited_json_rpc() -> None:
    with tempfile.TemporaryFile() as stderr:
        client = _mcp_client.McpClient([sys.executable, "-c", FAKE_SERVER], stderr)
        try:
            assert client.initialize()["serverInfo"]["name"] == "fake"
            result = client.run_python("print(6*7)")
            assert result["structuredContent"]["stdout"] == "42\n"
            assert _mcp_path.mcp_outcome(_values.Context("tok", ()), result).box_source is None
        finally:
            assert client.close() == 0


def test_mcp_client_reports_a_server_that_is_not_there() -> None:
    with tempfile.TemporaryFile() as stderr:
        client = _mcp_client.McpClient([sys.executable, "-c", "raise SystemExit(2)"], stderr)
        with pytest.raises(_values.PathUnavailable, match="exited"):
            client.initialize()
        client.close()


def test_a_report_renders_as_text_markdown_and_json() -> None:
    args = compare.parse_args(["--rounds", "2", "--warmup", "0", "--peers"])
    ctx = _values.Context("tok", (), image_id="sha256:abc", limits={"memory_bytes": 1.0})
    marks = {"code_sent_s": 0.001, "program_ended_s": 0.006, "removed_s": 0.05}
    samples = {
        "docker": [Sample(0.2, 0.02, 0.04), Sample(0.22, 0.02, 0.04)],
        "pybox_warm": [
            Sample(0.05, 0.005, 0.03, 0.003, "warm_pool", marks),
            Sample(0.06, 0.005, 0.03, 0.003, "fresh", marks),
        ],
        "epicbox": [Sample(0.18, None, 0.04), Sample(0.19, None, 0.04)],
    }
    throughput = {
        "pybox_warm": {"1": {"runs": 4, "wall_s": 0.4, "runs_per_s": 10.0, "box_source": {}}}
    }
    cpu: dict[str, dict[str, Any]] = {
        "docker": {"batches": 1, "net_ms": 200.0},
        "pybox_warm": {"batches": 1},
    }
    machine = {
        "cpu_model": "cpu",
        "cpu_count": 2,
        "kernel": "6",
        "python": "3.11",
        "engine_version": "20.10",
        "engine_api": "1.41",
        "pybox_version": "0",
        "loadavg_at_start": ["0.1", "0.2", "0.3"],
    }
    report = _report.build_report(
        args, ctx, samples, throughput, cpu, {"pybox_mcp": "not there"}, machine
    )
    assert report["box_source"]["pybox_warm"] == {"warm_pool": 1, "fresh": 1}
    assert report["ratio_vs_docker"]["pybox_warm"]["p50"] == pytest.approx(0.055 / 0.21)
    text = "\n".join(_report.report_lines(report))
    assert "SKIPPED pybox_mcp: not there" in text
    assert "1 from the warm pool (hits), 1 fresh (misses)" in text
    markdown = "\n".join(_report.markdown_lines(report))
    assert "| pybox_warm | 2 | 55.0 ms |" in markdown
    saved = json.loads(json.dumps(_report.rounded(report)))
    assert saved["report_version"] == 1
    assert "SKIPPED pybox_mcp: not there" in "\n".join(_report.report_lines(saved))


def test_run_then_check_reports_an_aborted_run_and_the_leftovers(
    capsys: pytest.CaptureFixture[str],
) -> None:
    ctx = _values.Context("tok", ())

    def aborted() -> dict[str, Any]:
        raise _values.BenchFailure("printed 41")

    assert _environment.run_then_check("bench", ctx, aborted, check=False) == (None, [])
    assert "bench: ABORTED: printed 41" in capsys.readouterr().err
    report, problems = _environment.run_then_check("bench", ctx, lambda: {"x": 1}, check=False)
    assert (report, problems) == ({"x": 1, "leftovers": []}, [])
