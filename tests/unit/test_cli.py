"""The CLI's contract without an engine: exit codes and messages for bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pybox._adapters.state import StateStore
from pybox._frontends.cli import main
from tests.unit.fake_engine import FakeEngine


@pytest.fixture(autouse=True)
def isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PYBOX_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("PYBOX_CONFIG", raising=False)
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")


def test_no_command_prints_the_help_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "usage: pybox" in captured.err
    assert "exec" in captured.err and "exit codes:" in captured.err


def test_a_command_group_without_its_action_prints_its_help(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["image"]) == 2
    err = capsys.readouterr().err
    assert "usage: pybox image" in err and "build" in err


def test_unknown_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["exec", "-", "--network", "host"])
    assert exit_info.value.code == 2
    assert "unknown option --network" in capsys.readouterr().err


def test_a_typod_flag_is_an_error_not_the_program(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "3").write_text("print(1)\n")  # what the typo would otherwise run
    (tmp_path / "job.py").write_text("print(1)\n")
    with pytest.raises(SystemExit) as exit_info:
        main(["exec", "--tmeout", "3", "job.py"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "pybox: unknown option --tmeout (did you mean --timeout?)" in err
    assert "job.py" not in err.splitlines()[-1]
    assert "pybox exec --help" in err


def test_a_stray_argument_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["exec", "job.py", "extra.py"])
    assert exit_info.value.code == 2
    assert "unexpected argument: extra.py" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "hint"),
    [
        (["exec", "--config", "x.toml", "job.py"], "pybox --config x.toml exec [...]"),
        (["image", "build", "--config=x.toml", "data"], "pybox --config x.toml image build [...]"),
    ],
)
def test_config_after_the_command_says_where_it_goes(
    capsys: pytest.CaptureFixture[str], argv: list[str], hint: str
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "--config is a global option: put it before the command" in err
    assert hint in err


def test_help_shows_defaults_and_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["exec", "--help"])
    assert exit_info.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "--timeout S wall-clock limit in seconds (default: 30 s" in out
    assert "(default: stdlib)" in out
    assert "exit codes:" in out and "124 it timed out" in out and "130 stopped" in out
    assert "(default: None)" not in out and "(default: False)" not in out
    with pytest.raises(SystemExit):
        main(["repair", "--help"])
    assert "(default: 4 rounds" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--memory", "lots", "--memory: memory_mib must be a number in MiB, not 'lots'."),
        ("--memory", "1.5", "must be a whole number of MiB"),
        ("--timeout", "0", "below the minimum of 0.1 s"),
        ("--pids", "-1", "below the minimum"),
    ],
)
def test_bad_limit_values_are_rejected(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str, value: str, message: str
) -> None:
    program = tmp_path / "p.py"
    program.write_text("print(1)\n")
    assert main(["exec", str(program), flag, value]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err


def test_over_ceiling_is_rejected_without_an_engine(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    program = tmp_path / "p.py"
    program.write_text("print(1)\n")
    assert main(["exec", str(program), "--timeout", "7200"]) == 2
    assert "Requested 7200 s of wall-clock time; the maximum is 3600 s" in capsys.readouterr().err


def test_unreachable_engine_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    program = tmp_path / "p.py"
    program.write_text("print(1)\n")
    state = tmp_path / "state"
    state.mkdir()
    (state / "images.json").write_text(
        json.dumps(
            {
                "version": 1,
                "images": {
                    "stdlib": {
                        "name": "stdlib",
                        "image_id": "sha256:" + "1" * 64,
                        "recipe_hash": "sha256:" + "2" * 64,
                        "python_path": "/usr/bin/python3",
                        "built_at": "2026-01-01T00:00:00Z",
                    }
                },
            }
        )
    )
    assert main(["exec", str(program)]) == 125
    err = capsys.readouterr().err
    assert "Cannot reach the container engine" in err
    assert "the socket does not exist" in err


def test_missing_image_says_how_to_build_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    program = tmp_path / "p.py"
    program.write_text("print(1)\n")
    assert main(["exec", str(program)]) == 125
    assert "pybox setup --yes" in capsys.readouterr().err


def test_tcp_docker_host_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DOCKER_HOST", "tcp://127.0.0.1:2375")
    assert main(["doctor"]) == 125
    assert "is not a unix socket" in capsys.readouterr().out


def test_bad_config_file(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "pybox.toml"
    config.write_text("[ceilings]\nmemory_mib = 'huge'\n")
    program = tmp_path / "p.py"
    program.write_text("print(1)\n")
    assert main(["--config", str(config), "exec", str(program)]) == 2
    assert "memory_mib must be a number in MiB" in capsys.readouterr().err


def test_bad_input_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    program = tmp_path / "p.py"
    program.write_text("print(1)\n")
    missing = tmp_path / "nothing.csv"
    assert main(["exec", str(program), "--input", str(missing)]) == 2
    assert "Cannot read the input file" in capsys.readouterr().err


def test_json_error_record_on_stdout(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    program = tmp_path / "p.py"
    program.write_text("print(1)\n")
    assert main(["exec", str(program), "--json", "--memory", "999999"]) == 2
    record = json.loads(capsys.readouterr().out)
    assert record == {
        "pybox_exec_version": 1,
        "error": {
            "kind": "limit_exceeded",
            "message": "Requested 999999 MiB of memory; the maximum is 8192 MiB. Ask for at "
            "most 8192 MiB, or have the operator raise ceilings.memory_mib.",
        },
    }


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["image", "build", "stdlib", "--lock", "x.lock"], "takes no --lock"),
        (["image", "build", "tools", "--lock", "/nonexistent/x.lock"], "Cannot read the lock"),
        (["image", "build", "Bad Name", "--lock", "x.lock"], "is not valid"),
        (["image", "build", "tools", "--suite", "bookworm"], "only applies to the stdlib image"),
        (
            ["image", "build", "tools", "--lock", "x.lock", "--mirror", "http://m"],
            "--mirror applies",
        ),
        (["image", "push", "data", "--registry", "https://host/x"], "not a registry address"),
    ],
)
def test_image_commands_refuse_bad_input_without_an_engine(
    argv: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    assert expected in capsys.readouterr().err


def test_a_lock_without_hashes_is_refused_before_the_engine(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lock = tmp_path / "tools.lock"
    lock.write_text("numpy==2.4.6\n")
    assert main(["image", "build", "tools", "--lock", str(lock)]) == 2
    err = capsys.readouterr().err
    assert f"{lock}, line 1: no --hash" in err
    assert "--generate-hashes" in err


def test_a_non_empty_output_directory_is_named_before_the_engine(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Bad input first: no engine listens here, yet the answer is about the folder."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    code = tmp_path / "job.py"
    code.write_text("print(1)\n")
    assert main(["exec", str(code), "--output", str(out)]) == 2
    err = capsys.readouterr().err
    assert "is not empty" in err and "engine" not in err
    assert [p.name for p in out.iterdir()] == ["keep.txt"]


def test_experiment_create_forwards_the_users_own_variables_by_name(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    engine: FakeEngine,
    state: StateStore,
) -> None:
    """The CLI's caller is the user: a name alone takes the user's value (issue 29);
    a credential by the widened rule stays refused."""
    from pybox._frontends.cli import _experiment
    from tests.unit.test_experiment_tools import SERVER_ENV, Served

    served = Served(engine, state, tmp_path, monkeypatch)
    monkeypatch.setattr(_experiment, "open_session", lambda args: served.session)
    code = main(["experiment", "create", served.project, "--json", "--env", "REDIS_HOST",
                 "--env", "CI", "--env", "MODE=test"])  # fmt: skip
    assert code == 0
    created = json.loads(capsys.readouterr().out)
    forwarded = served.experiments._env[created["experiment_id"]]
    assert forwarded == {"REDIS_HOST": SERVER_ENV["REDIS_HOST"], "CI": "true", "MODE": "test"}
    assert main(["experiment", "create", served.project, "--env", "MYSQL_PWD"]) == 2
    err = capsys.readouterr().err
    assert "MYSQL_PWD looks like a credential" in err and "s3rver" not in err
