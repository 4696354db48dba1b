"""The repair loop end to end on the real engine, with a scripted model command.

Lean on purpose: two repairs, six boxes in all.
"""

from __future__ import annotations

import json
import shlex
import socket
from pathlib import Path

import pytest

import pybox
from pybox import RepairGoal, RepairModel, StopReason
from pybox._core.posture import BOX_UID_FIRST
from tests.fake_model import scripted
from tests.integration.conftest import run_cli
from tests.integration.test_box import _bridge_gateway

ESCAPE = """\
import json, os, socket
facts = {{"uid": os.getuid()}}
for name, path in (("secret", {secret!r}), ("original", {original!r})):
    try:
        facts[name] = open(path).read()
    except OSError as exc:
        facts[name] = type(exc).__name__
try:
    open({original!r}, "w").write("overwritten by the model")
    facts["overwrite"] = "written"
except OSError as exc:
    facts["overwrite"] = type(exc).__name__
try:
    facts["home"] = os.listdir({home!r})
except OSError as exc:
    facts["home"] = type(exc).__name__
try:
    socket.create_connection(({host!r}, {port}), timeout=3).close()
    facts["connect"] = "connected"
except OSError as exc:
    facts["connect"] = type(exc).__name__
facts["engine_socket"] = [p for p in ("/var/run/docker.sock", "/run/docker.sock") if os.path.exists(p)]
print("FACTS " + json.dumps(facts))
raise SystemExit(3)
"""


def block(code: str) -> str:
    return f"Here is the program:\n```python\n{code}```\n"


def test_three_rounds_with_an_escape_attempt_contained(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    program = work / "broken.py"
    program.write_text("print('hello'\n")
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP SECRET\n")
    host = _bridge_gateway() or "127.0.0.1"
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind((host, 0))
    listener.listen(1)
    escape = ESCAPE.format(
        secret=str(secret),
        original=str(program),
        home=str(Path.home()),
        host=host,
        port=listener.getsockname()[1],
    )
    command = scripted(
        tmp_path / "model",
        [block(escape), "The bug is the missing parenthesis on line 1.", block("print('hello')\n")],
    )
    try:
        result = run_cli(
            [
                "repair",
                str(program),
                "--goal",
                "exit0",
                "--model-cmd",
                shlex.join(command),
                "--max-rounds",
                "3",
                "--timeout",
                "10",
                "--json",
            ],
            cli_env,
        )
        listener.setblocking(False)
        with pytest.raises(BlockingIOError):
            listener.accept()  # a connection that got through would be waiting here
    finally:
        listener.close()
    assert result.returncode == 0, result.stderr.decode()
    report = json.loads(result.stdout)
    assert report["pybox_repair_version"] == 1
    assert report["stop_reason"] == "goal_met"
    first, second, third = report["rounds"]
    assert first["run"]["receipt"]["status"] == "failed"
    assert first["run"]["receipt"]["exit_code"] == 3
    assert second["invalid_reason"] is not None and second["run"] is None
    assert third["run"]["goal_met"] is True
    assert report["used"] == {
        **report["used"],
        "rounds": 3,
        "model_calls": 3,
        "invalid_proposals": 1,
    }
    for run in [report["baseline"], first["run"], third["run"]]:
        engine_view = run["receipt"]["observed_by_engine"]
        assert engine_view["posture_verified"] and engine_view["removal_confirmed"]
    # The escape attempt's own report reached the model as evidence in the next prompt.
    prompt = (tmp_path / "model" / "prompt-2.txt").read_text()
    facts = json.loads("{" + prompt.split("FACTS {", 1)[1].split("\n", 1)[0])
    assert facts["secret"] == "FileNotFoundError"
    assert facts["original"] == "FileNotFoundError"
    assert facts["overwrite"] in ("FileNotFoundError", "OSError", "PermissionError")
    assert facts["home"] in ("FileNotFoundError", "PermissionError")
    assert facts["connect"] != "connected"
    assert facts["engine_socket"] == []
    # The box's own uid, as its receipt says: neither root nor a host account.
    assert facts["uid"] >= BOX_UID_FIRST
    assert f"{facts['uid']}:{facts['uid']}" == first["run"]["receipt"]["configured"]["user"]
    # The user's files: the original untouched, the fix in a new file, the secret intact.
    assert program.read_text() == "print('hello'\n"
    assert (work / "broken.fixed.py").read_text() == "print('hello')\n"
    assert report["written_to"] == str(work / "broken.fixed.py")
    assert secret.read_text() == "TOP SECRET\n"


CALC_TESTS = """\
import unittest
import calc

class CalcTest(unittest.TestCase):
    def test_add(self):
        self.assertEqual(calc.add(2, 3), 5)

    def test_add_negative(self):
        self.assertEqual(calc.add(-2, -3), -5)
"""


def test_tests_goal_through_the_python_api(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, state_dir: Path
) -> None:
    monkeypatch.setenv("PYBOX_STATE_DIR", str(state_dir))
    monkeypatch.delenv("PYBOX_CONFIG", raising=False)
    command = scripted(
        tmp_path / "model",
        [
            # Exits 0 as soon as the tests import it: must not count as passing.
            block("import sys\nsys.exit(0)\n"),
            block("def add(a, b):\n    return a + b\n"),
        ],
    )
    report = pybox.repair(
        "def add(a, b):\n    return a - b\n",
        goal=RepairGoal.tests(CALC_TESTS, tests_name="test_calc.py", module_name="calc"),
        model=RepairModel.command(command),
        budget=pybox.RepairBudget(rounds=3),
        timeout_s=10,
    )
    assert report.stop_reason is StopReason.GOAL_MET, report.summary_lines()
    assert report.baseline is not None
    assert report.baseline.goal_detail.startswith("2 tests ran: 2 failed, 0 errors")
    first, second = report.rounds
    assert first.run is not None and not first.run.goal_met
    assert "did not run to the end" in first.run.goal_detail
    assert second.run is not None and second.run.goal_detail == "all 2 tests passed"
    assert report.fixed_code == b"def add(a, b):\n    return a + b\n"
    # The first prompt showed the model the failing test report from the box.
    prompt = (tmp_path / "model" / "prompt-1.txt").read_text()
    assert "test_add" in prompt and "AssertionError" in prompt
