"""Programs run unchanged (issue 12), on the real engine: arguments, stdin,
environment variables, inputs by plain name; and stale staging folders of a
killed pybox are swept at the next run into that place."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pybox import Client
from pybox._core.request import InputFile, RunRequest
from pybox._orchestration.session import Session
from tests.integration.conftest import run_cli

SHOW = (
    "import json, os, sys\n"
    "print(json.dumps({'argv': sys.argv, 'stdin': sys.stdin.read(),\n"
    "                  'env': os.environ.get('GREETING')}))\n"
)


def test_cli_arguments_stdin_and_env_reach_the_program(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    job = tmp_path / "job.py"
    job.write_text(SHOW)
    feed = tmp_path / "feed.txt"
    feed.write_text("first line\nsecond line\n")
    result = run_cli(
        ["exec", str(job), "--stdin", str(feed), "--env", "GREETING=hi\tthere", "--", "a", "b c"],
        cli_env,
    )
    assert result.returncode == 0, result.stderr.decode()
    assert json.loads(result.stdout) == {
        "argv": ["job.py", "a", "b c"],
        "stdin": "first line\nsecond line\n",
        "env": "hi\tthere",
    }


def test_without_stdin_the_program_reads_end_of_file(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    job = tmp_path / "job.py"
    job.write_text(SHOW)
    result = run_cli(["exec", str(job)], cli_env)
    assert result.returncode == 0, result.stderr.decode()
    assert json.loads(result.stdout) == {"argv": ["job.py"], "stdin": "", "env": None}


def test_credential_shaped_variable_is_refused(cli_env: dict[str, str], tmp_path: Path) -> None:
    job = tmp_path / "job.py"
    job.write_text(SHOW)
    result = run_cli(["exec", str(job), "--env", "GITHUB_TOKEN=ghp_x"], cli_env)
    assert result.returncode == 2
    assert "looks like a credential" in result.stderr.decode()
    allowed = run_cli(
        ["exec", str(job), "--env", "API_KEY=k"], dict(cli_env, PYBOX_ALLOW_CREDENTIAL_ENV="1")
    )
    assert allowed.returncode == 0, allowed.stderr.decode()


def test_api_arguments_stdin_and_env(monkeypatch: pytest.MonkeyPatch, state_dir: Path) -> None:
    monkeypatch.setenv("PYBOX_STATE_DIR", str(state_dir))
    monkeypatch.delenv("PYBOX_CONFIG", raising=False)
    with Client(warm_pool=True) as client:
        assert client.warm_up(code_name="job.py", wait_s=60)
        # A warm box's interpreter was started before these were known.
        result = client.run(
            SHOW,
            code_name="job.py",
            argv=["x", "-y"],
            stdin="typed\n",
            env={"GREETING": "hello"},
        )
    assert result.ok, result.stderr
    assert json.loads(result.stdout) == {
        "argv": ["job.py", "x", "-y"],
        "stdin": "typed\n",
        "env": "hello",
    }
    assert result.receipt.observed_by_pybox.box_source == "warm_pool"


def test_inputs_are_readable_by_plain_name_and_importable(session: Session) -> None:
    code = (
        "import os\n"
        "import helper\n"
        "print(open('data.csv').read().strip(), helper.double(21), os.getcwd())\n"
        "print(open(os.path.join(os.environ['PYBOX_INPUT_DIR'], 'data.csv')).read().strip())\n"
    )
    request = RunRequest(
        code=code.encode(),
        inputs=(
            InputFile("data.csv", b"a,b\n"),
            InputFile("helper.py", b"def double(n):\n    return 2 * n\n"),
        ),
    )
    outcome = session.run(request)
    assert outcome.receipt.status.value == "succeeded", outcome.stderr.decode()
    assert outcome.stdout == b"a,b 42 /pybox/work\na,b\n"


def _dead_owner() -> str:
    """The owner string of a pybox process that has exited."""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "from pybox._adapters.host_facts import current_owner; print(current_owner())",
        ],
        capture_output=True,
        check=True,
    )
    return done.stdout.decode().strip()


def test_stale_staging_of_a_dead_pybox_is_swept(cli_env: dict[str, str], tmp_path: Path) -> None:
    stale = tmp_path / f".pybox-staging-{_dead_owner()}-abcd1234"
    (stale / "sub").mkdir(parents=True)
    (stale / "sub" / "partial.bin").write_bytes(b"untrusted half file")
    old_style = tmp_path / ".pybox-staging-k3j4h5g6"  # no owner: cannot be told, kept
    old_style.mkdir()
    job = tmp_path / "job.py"
    job.write_text(
        "import os\nopen(os.path.join(os.environ['PYBOX_OUTPUT_DIR'], 'r.txt'), 'w').write('ok')\n"
    )
    result = run_cli(["exec", str(job), "--output", str(tmp_path / "out")], cli_env)
    assert result.returncode == 0, result.stderr.decode()
    assert not stale.exists()
    assert old_style.exists()
    assert (
        f"pybox: removed {stale}: partial files of a pybox that was killed"
        in result.stderr.decode()
    )
    assert (tmp_path / "out" / "r.txt").read_text() == "ok"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([old_style.name, "job.py", "out"])
