"""bench/cli_startup.py's arguments, commands and arithmetic, without an engine.

The benchmark measures and never asserts a time; these check that what it
runs and what it prints are right.
"""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path

import pytest
from bench import _stats, cli_startup
from bench._report import rounded
from bench._values import BenchFailure, Context


def _executable(path: Path, content: bytes) -> Path:
    path.write_bytes(content)
    path.chmod(0o755)
    return path


@pytest.fixture
def binaries(tmp_path: Path) -> tuple[Path, Path]:
    """An interpreter-like binary and a console script beside it."""
    python = _executable(tmp_path / "python", b"\x7fELF not really")
    script = _executable(tmp_path / "pybox", b"#!/bin/sh\n")
    return python, script


def test_defaults_measure_both_pairs_with_the_pybox_beside_the_interpreter(
    binaries: tuple[Path, Path],
) -> None:
    python, script = binaries
    args = cli_startup.parse_args(["--python", str(python)])
    assert (args.rounds, args.warmup, args.json) == (15, 2, False)
    assert args.pairs == ["version", "exec"]
    assert args.pybox == str(script)
    only = cli_startup.parse_args(["--python", str(python), "--only", "version", "--json"])
    assert only.pairs == ["version"]
    assert only.json


@pytest.mark.parametrize("bad", [["--rounds", "0"], ["--warmup", "-1"], ["--only", "nope"]])
def test_bad_counts_and_pairs_are_refused(
    binaries: tuple[Path, Path], bad: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        cli_startup.parse_args(["--python", str(binaries[0]), *bad])
    assert exited.value.code == 2
    assert "error:" in capsys.readouterr().err


def test_a_shim_or_a_missing_pybox_is_refused_with_the_fix(tmp_path: Path) -> None:
    shim = _executable(tmp_path / "python3", b'#!/usr/bin/env bash\nexec python3 "$@"\n')
    problem = cli_startup.check_executables(shim, tmp_path / "pybox")
    assert problem is not None
    assert "pyenv shim" in problem
    assert ".venv/bin/python" in problem
    binary = _executable(tmp_path / "python", b"\x7fELF")
    problem = cli_startup.check_executables(binary, tmp_path / "pybox")
    assert problem == f"--pybox {tmp_path / 'pybox'} is not an executable file; pass --pybox PATH"
    assert cli_startup.check_executables(tmp_path / "none", binary) is not None


def test_the_commands_pair_pybox_with_equivalent_baselines(binaries: tuple[Path, Path]) -> None:
    python, script = binaries
    args = cli_startup.parse_args(["--python", str(python)])
    limits = {
        "memory_bytes": 2**28,
        "writable_bytes": 2**23,
        "open_files": 64,
        "cpus": 1,
        "pids": 8,
    }
    found = cli_startup.commands(args, "sha256:abc", limits, "tok")
    assert list(found) == ["python_pass", "pybox_version", "docker_run", "pybox_exec"]
    assert found["python_pass"].argv == (str(python), "-c", "pass")
    assert found["pybox_version"].argv == (str(script), "version")
    assert found["pybox_exec"].argv == (str(script), "exec", "-")
    docker = found["docker_run"]
    # The same program on the same stdin, read by the same interpreter path.
    assert docker.stdin == found["pybox_exec"].stdin == b"print(6*7)\n"
    assert docker.argv[-3:] == ("sha256:abc", "/usr/bin/python3", "-")
    pairs = dict(itertools.pairwise(docker.argv))
    assert pairs["--network"] == "none"
    assert pairs["--memory"] == "268435456b"
    assert pairs["--label"] == "io.pybox.bench=tok"
    assert docker.argv[:4] == ("docker", "run", "--rm", "-i")
    only = cli_startup.parse_args(["--python", str(python), "--only", "version"])
    assert list(cli_startup.commands(only, "", {}, "tok")) == ["python_pass", "pybox_version"]


def test_comparisons_divide_by_the_baseline_of_the_same_run() -> None:
    stats = {
        "python_pass": _stats.wall_stats([0.010, 0.020, 0.030], upper_pct=90),
        "pybox_version": _stats.wall_stats([0.050, 0.050, 0.060], upper_pct=90),
        "docker_run": {"p50_ms": 300.0, "p90_ms": 400.0},
        "pybox_exec": {"p50_ms": 240.0, "p90_ms": 500.0},
    }
    assert set(stats["python_pass"]) == {"n", "p50_ms", "p90_ms", "min_ms", "max_ms"}
    found = {row["pair"]: row for row in cli_startup.comparisons(stats)}
    assert found["version"]["p50_ratio"] == pytest.approx(2.5)
    assert found["version"]["verdict"] == "PASS"  # at the bound
    assert found["version"]["p90_ratio"] == pytest.approx(58.0 / 28.0)  # p90 by interpolation
    assert found["exec"]["p50_ratio"] == pytest.approx(0.8)
    assert found["exec"]["p90_ratio"] == pytest.approx(1.25)
    stats["pybox_exec"]["p50_ms"] = 241.0
    assert cli_startup.comparisons(stats)[1]["verdict"] == "MISS"
    # A pair not measured (--only) is not reported.
    del stats["docker_run"]
    assert [row["pair"] for row in cli_startup.comparisons(stats)] == ["version"]


def test_a_process_is_timed_whole_and_its_output_checked() -> None:
    ctx = Context("tok", ())
    echo = cli_startup.Command(
        (sys.executable, "-c", "import sys; print(eval(sys.stdin.read()))"), b"6*7", "42"
    )
    assert cli_startup.run_once(ctx, "echo", echo) > 0
    assert len(ctx.owner_pids) == 2  # ours and the child's: its boxes are known by its pid
    wrong = cli_startup.Command((sys.executable, "-c", "print(41)"), stdout_starts="42")
    with pytest.raises(BenchFailure, match="expected it to start with '42'"):
        cli_startup.run_once(ctx, "wrong", wrong)
    failing = cli_startup.Command((sys.executable, "-c", "raise SystemExit(3)"))
    with pytest.raises(BenchFailure, match="exit 3"):
        cli_startup.run_once(ctx, "failing", failing)


def test_rounds_keep_only_the_measured_ones_and_render(binaries: tuple[Path, Path]) -> None:
    ctx = Context("tok", ())
    found = {
        "python_pass": cli_startup.Command((sys.executable, "-c", "pass")),
        "pybox_version": cli_startup.Command(
            (sys.executable, "-c", "print('pybox 0')"), b"", "pybox "
        ),
    }
    walls = cli_startup.measure(ctx, found, rounds=2, warmup=1)
    assert {name: len(values) for name, values in walls.items()} == {
        "python_pass": 2,
        "pybox_version": 2,
    }
    args = cli_startup.parse_args(["--python", str(binaries[0]), "--only", "version"])
    machine = {
        "cpu_model": "cpu",
        "cpu_count": 2,
        "kernel": "6",
        "pybox_version": "0",
        "loadavg_at_start": ["1.0", "2.0", "3.0"],
    }
    report = cli_startup.build_report(args, "2026-01-01", machine, ("", {}), found, walls)
    assert report["comparisons"][0]["pair"] == "version"
    saved = json.loads(json.dumps(rounded(report)))
    text = "\n".join(cli_startup.report_lines(saved))
    assert "pybox version / python -c pass" in text
    assert "load 1.0 2.0 3.0 at start" in text
    assert "python_pass       2" in text


def test_pybox_is_byte_compiled_before_timing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Timing an editable install under PYTHONDONTWRITEBYTECODE would time the compiler."""
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    compiled = cli_startup.compile_pybox(sys.executable)
    package = Path(compiled["compiled"])
    assert (package / "__init__.py").is_file()
    assert compiled["dont_write_bytecode_in_env"] is True
    assert list((package / "__pycache__").glob("__init__.*.pyc"))
