"""`pybox` on the command line, end to end on the real engine."""

from __future__ import annotations

import json
from pathlib import Path

from pybox._engine import Engine
from tests.integration.conftest import _owned_by_another_live_process, boxes, run_cli
from tests.unit.test_receipt_contract import EXEC_SCHEMA, _validator


def validate_exec_record(record: dict[str, object]) -> None:
    """Real records from the real engine match the shipped JSON Schema."""
    _validator(EXEC_SCHEMA).validate(record)


def test_stdin_program_prints_and_receipt_goes_to_stderr(cli_env: dict[str, str]) -> None:
    result = run_cli(["exec", "-"], cli_env, stdin=b"print(6*7)\n")
    assert result.returncode == 0, result.stderr.decode()
    assert result.stdout == b"42\n"
    stderr = result.stderr.decode()
    assert stderr.startswith("pybox: succeeded, exit 0")
    assert "posture verified" in stderr
    assert "removed (confirmed)" in stderr


def test_exit_code_is_the_programs(cli_env: dict[str, str]) -> None:
    result = run_cli(["exec", "-"], cli_env, stdin=b"raise SystemExit(7)\n")
    assert result.returncode == 7
    assert "failed, exit 7" in result.stderr.decode()


def test_timeout_exits_124(cli_env: dict[str, str]) -> None:
    result = run_cli(
        ["exec", "-", "--timeout", "1"], cli_env, stdin=b"import time\ntime.sleep(30)\n"
    )
    assert result.returncode == 124
    assert "timed_out" in result.stderr.decode()


def test_over_the_ceiling_is_rejected_with_exit_2(cli_env: dict[str, str], engine: Engine) -> None:
    before = {str(box["Id"]) for box in boxes(engine)}
    result = run_cli(["exec", "-", "--memory", "32768"], cli_env, stdin=b"print(1)\n")
    assert result.returncode == 2
    assert result.stderr.decode().strip() == (
        "pybox: Requested 32768 MiB of memory; the maximum is 8192 MiB. Ask for at most "
        "8192 MiB, or have the operator raise ceilings.memory_mib."
    )
    assert result.stdout == b""
    # Boxes of other pybox processes running beside the suite are not this refusal's.
    made = [
        box
        for box in boxes(engine)
        if str(box["Id"]) not in before and not _owned_by_another_live_process(box)
    ]
    assert made == []


def test_operator_ceiling_from_the_environment(cli_env: dict[str, str]) -> None:
    env = dict(cli_env, PYBOX_MAX_MEMORY_MIB="256")
    result = run_cli(["exec", "-", "--memory", "512"], env, stdin=b"print(1)\n")
    assert result.returncode == 2
    assert "the maximum is 256 MiB" in result.stderr.decode()
    ok = run_cli(["exec", "-", "--json"], env, stdin=b"print(1)\n")
    assert ok.returncode == 0
    limits = json.loads(ok.stdout)["receipt"]["configured"]["limits"]
    assert limits["memory_bytes"] == 256 * 1024 * 1024  # the lowered ceiling lowers the default


def test_json_record(cli_env: dict[str, str]) -> None:
    result = run_cli(
        ["exec", "-", "--json"],
        cli_env,
        stdin=b"import sys\nprint('out'); print('err', file=sys.stderr)\n",
    )
    assert result.returncode == 0
    record = json.loads(result.stdout)
    assert record["pybox_exec_version"] == 1
    assert record["status"] == "succeeded"
    assert record["stdout"] == "out\n"
    assert record["stderr"] == "err\n"
    assert record["receipt"]["receipt_version"] == 2
    assert record["receipt"]["observed_by_engine"]["removal_confirmed"] is True
    validate_exec_record(record)


def test_json_error_record(cli_env: dict[str, str]) -> None:
    result = run_cli(["exec", "-", "--json", "--cpus", "64"], cli_env, stdin=b"print(1)\n")
    assert result.returncode == 2
    record = json.loads(result.stdout)
    assert record["pybox_exec_version"] == 1
    assert record["error"]["kind"] == "limit_exceeded"
    assert "CPUs" in record["error"]["message"]


def test_report_with_input_and_output(cli_env: dict[str, str], tmp_path: Path) -> None:
    program = tmp_path / "report.py"
    program.write_text(
        "import csv, os\n"
        "rows = list(csv.reader(open(os.path.join(os.environ['PYBOX_INPUT_DIR'], 'sales.csv'))))\n"
        "total = sum(int(r[1]) for r in rows)\n"
        "open(os.path.join(os.environ['PYBOX_OUTPUT_DIR'], 'total.txt'), 'w').write(str(total))\n"
        "print('total', total)\n"
    )
    sales = tmp_path / "sales.csv"
    sales.write_text("a,40\nb,2\n")
    results = tmp_path / "results"
    result = run_cli(
        [
            "exec",
            str(program),
            "--input",
            str(sales),
            "--output",
            str(results),
            "--timeout",
            "10",
            "--memory",
            "256",
            "--json",
        ],
        cli_env,
    )
    assert result.returncode == 0, result.stderr.decode()
    record = json.loads(result.stdout)
    assert record["stdout"] == "total 42\n"
    assert (results / "total.txt").read_text() == "42"
    assert [f["path"] for f in record["output_files"]] == ["total.txt"]
    assert record["receipt"]["configured"]["code"]["name"] == "report.py"
    assert record["receipt"]["configured"]["inputs"][0]["name"] == "sales.csv"
    validate_exec_record(record)
    # No staging directory is left next to the results.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.py", "results", "sales.csv"]


def test_a_non_empty_output_directory_is_refused_and_kept(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    results = tmp_path / "results"
    results.mkdir()
    (results / "keep.txt").write_text("mine")
    result = run_cli(["exec", "-", "--output", str(results)], cli_env, stdin=b"print(1)\n")
    assert result.returncode == 2
    assert "not empty" in result.stderr.decode()
    assert sorted(p.name for p in results.iterdir()) == ["keep.txt"]
    assert (results / "keep.txt").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results"]


def test_missing_program_file(cli_env: dict[str, str], tmp_path: Path) -> None:
    result = run_cli(["exec", str(tmp_path / "nope.py")], cli_env)
    assert result.returncode == 2
    assert "Cannot read the program" in result.stderr.decode()
    assert b"Traceback" not in result.stderr


def test_doctor_and_image_list(cli_env: dict[str, str], state_dir: Path) -> None:
    doctor = run_cli(["doctor", "--json"], cli_env)
    report = json.loads(doctor.stdout)
    # The exit code follows `ok`: 0 only when nothing was found wrong.
    assert report["ok"] is (not report["problems"])
    assert doctor.returncode == (0 if report["ok"] else 125), report["problems"]
    assert report["engine"]["reachable"] is True
    assert report["engine"]["socket"].startswith("unix://")
    assert any(image["name"] == "stdlib" and image["problem"] is None for image in report["images"])
    listing = run_cli(["image", "list", "--json"], cli_env)
    assert listing.returncode == 0
    # Exactly the images recorded in the state this suite copied from the machine.
    recorded = json.loads((state_dir / "images.json").read_text())["images"]
    assert [image["name"] for image in json.loads(listing.stdout)] == sorted(recorded)


def test_setup_dry_run_changes_nothing(cli_env: dict[str, str], state_dir: Path) -> None:
    before = (state_dir / "images.json").read_bytes()
    result = run_cli(["setup"], cli_env)
    assert result.returncode == 0, result.stderr.decode()
    assert "dry run" in result.stderr.decode()
    assert (state_dir / "images.json").read_bytes() == before
