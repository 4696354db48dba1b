"""The repair loop's pure values: proposals, prompts, goals, bounds and their configuration."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pybox._adapters.config import load_settings
from pybox._core.errors import ConfigError, InvalidRequest, LimitExceeded
from pybox._core.receipt import Status
from pybox._core.repair import (
    REPAIR_CEILINGS,
    InvalidProposal,
    Proposal,
    RepairBudget,
    RepairGoal,
    RepairModel,
    RepairPolicy,
    RunEvidence,
    build_prompt,
    clip_middle,
    extract_proposal,
    runner_for_tests,
)

PROGRAM = "import sys\nprint('fixed')\n"


@pytest.mark.parametrize(
    "reply",
    [
        f"Here you go:\n```python\n{PROGRAM}```\nThat fixes it.",
        f"```\n{PROGRAM}```",
        f"```py\n{PROGRAM}```",
        f"~~~python\n{PROGRAM}~~~\n",
        f"````python\n{PROGRAM}````",
        json.dumps({"code": PROGRAM}),
        "  " + json.dumps({"code": PROGRAM, "explanation": "x"}) + "\n",
        f"```json\n{json.dumps({'code': PROGRAM})}\n```",
        f"Run it with:\n```bash\npython main.py\n```\n```python\n{PROGRAM}```",
    ],
)
def test_one_complete_program_is_extracted(reply: str) -> None:
    proposal = extract_proposal(reply, 10_000)
    assert isinstance(proposal, Proposal)
    assert proposal.code == PROGRAM.encode()


def test_a_fence_inside_the_program_needs_a_longer_fence() -> None:
    inner = 'doc = """\n```\nnot the end\n```\n"""\nprint(doc)\n'
    proposal = extract_proposal(f"````python\n{inner}````", 10_000)
    assert isinstance(proposal, Proposal)
    assert proposal.code == inner.encode()


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        ("I think you should add a colon on line 3.", "no ```python code block"),
        ("", "no ```python code block"),
        ("```python\nprint(1)\n```\n```python\nprint(2)\n```", "2 code blocks"),
        ("```python\nprint(1)\n", "not closed"),
        ("```python\n   \n```", "empty"),
        (json.dumps({"program": "print(1)"}), "no ```python code block"),
        ("```bash\nrm -rf /\n```", "no ```python code block"),
    ],
)
def test_anything_else_is_an_invalid_proposal(reply: str, reason: str) -> None:
    proposal = extract_proposal(reply, 10_000)
    assert isinstance(proposal, InvalidProposal)
    assert reason in proposal.reason


def test_a_proposal_over_the_size_bound_is_refused() -> None:
    proposal = extract_proposal("```python\n" + "x = 1\n" * 100 + "```", 599)
    assert isinstance(proposal, InvalidProposal)
    assert "600 bytes; the most accepted is 599 bytes" in proposal.reason
    assert isinstance(extract_proposal("```python\n" + "x = 1\n" * 100 + "```", 600), Proposal)


def _evidence(stdout: bytes, stderr: bytes) -> RunEvidence:
    return RunEvidence(
        status="failed",
        exit_code=1,
        cause="The program exited with status 1.",
        goal_detail="the run ended failed, exit 1",
        stdout=stdout,
        stderr=stderr,
        stdout_total_bytes=len(stdout),
        stderr_total_bytes=len(stderr),
    )


@pytest.mark.parametrize("limit", [1500, 2000, 3000, 4096, 10_000, 65_536])
@pytest.mark.parametrize("output_bytes", [0, 10, 5000, 300_000])
def test_the_prompt_never_exceeds_its_bound(limit: int, output_bytes: int) -> None:
    # Multi-byte characters everywhere, so cuts fall inside characters too.
    stderr = ("Traceback: é€😀 " * (output_bytes // 12 + 1)).encode()[:output_bytes]
    stdout = ("ligne ü " * (output_bytes // 8 + 1)).encode()[:output_bytes]
    goal = RepairGoal.expect_stdout("42")
    prompt = build_prompt(
        goal, b"print(41)\n", "main.py", _evidence(stdout, stderr), None, 1, 4, limit
    )
    if prompt is None:
        assert limit < 2000
        return
    assert prompt.size_bytes <= limit
    assert "print(41)" in prompt.user and "42" in prompt.user
    if output_bytes and output_bytes * 2 + 1500 > limit:
        assert "the middle is left out" in prompt.user or "stderr (" in prompt.user


def test_the_prompt_holds_goal_code_tests_evidence_and_note() -> None:
    goal = RepairGoal.tests("import solution\n", tests_name="test_s.py", module_name="solution")
    prompt = build_prompt(
        goal,
        b"def f(): return 1\n",
        "solution.py",
        _evidence(b"out", b"Traceback boom"),
        "Your previous reply was not used: x.",
        2,
        4,
        65_536,
    )
    assert prompt is not None
    text = prompt.text
    for expected in (
        "Round 2 of at most 4",
        "unittest tests in test_s.py pass",
        "import solution",
        "def f(): return 1",
        "status failed, exit code 1",
        "<<<untrusted\nTraceback boom\nuntrusted>>>",
        "Your previous reply was not used",
    ):
        assert expected in text


def test_a_program_too_large_for_the_bound_gives_no_prompt() -> None:
    assert build_prompt(RepairGoal.exit0(), b"x" * 5000, "m.py", None, None, 1, 4, 4096) is None


def test_clip_keeps_head_and_tail_within_the_limit() -> None:
    data = ("a" * 1000 + "€" * 1000 + "z" * 1000).encode()
    for limit in (100, 101, 102, 103, 500, 4000):
        clipped = clip_middle(data, limit)
        assert len(clipped.encode()) <= limit
    assert clip_middle(b"short", 100) == "short"
    assert clip_middle(data, 500).startswith("a") and clip_middle(data, 500).endswith("z")


def test_goal_checks() -> None:
    ok, failed = Status.SUCCEEDED, Status.FAILED
    assert RepairGoal.exit0().check(ok, 0, b"", False, "n").met
    assert not RepairGoal.exit0().check(failed, 1, b"", False, "n").met
    expect = RepairGoal.expect_stdout("hello\nworld")
    assert expect.check(ok, 0, b"hello\r\nworld\n\n", False, "n").met
    assert not expect.check(ok, 0, b"hello world\n", False, "n").met
    assert not expect.check(failed, 1, b"hello\nworld\n", False, "n").met
    assert not expect.check(ok, 0, b"hello\nworld\n", True, "n").met
    tests = RepairGoal.tests("pass\n")
    summary = b"pybox-tests abc ran=3 failures=0 errors=0\n"
    assert tests.check(ok, 0, summary, False, "abc").met
    assert not tests.check(ok, 0, summary, False, "other-nonce").met
    assert not tests.check(ok, 0, b"", False, "abc").met  # e.g. sys.exit(0) at import
    assert not tests.check(ok, 0, b"pybox-tests abc ran=0 failures=0 errors=0\n", False, "abc").met
    assert not tests.check(ok, 0, b"pybox-tests abc ran=2 failures=1 errors=0\n", False, "abc").met
    failing = tests.check(failed, 1, b"pybox-tests abc ran=2 failures=1 errors=0\n", False, "abc")
    assert failing.detail == "2 tests ran: 1 failed, 0 errors; the run ended failed, exit 1"


def test_the_tests_runner_carries_its_nonce() -> None:
    runner = runner_for_tests(RepairGoal.tests("pass\n", tests_name="test_x.py"), "n0nce")
    assert b"pybox-tests n0nce" in runner and b"'test_x'" in runner
    compile(runner, "runner", "exec")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"tests_name": "tests.txt"}, "not an importable module name"),
        ({"tests_name": "1test.py"}, "not an importable module name"),
        ({"module_name": "my-prog"}, "not importable"),
        ({"module_name": "test_x", "tests_name": "test_x.py"}, "clashes"),
    ],
)
def test_bad_tests_goals_are_refused(kwargs: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidRequest, match=message):
        RepairGoal.tests("pass\n", **kwargs)


def test_models_are_described_without_secrets() -> None:
    command = RepairModel.command("llm -m gpt-4o --key sk-secret")
    assert command.argv == ("llm", "-m", "gpt-4o", "--key", "sk-secret")
    assert "sk-secret" not in json.dumps(command.to_dict())
    assert RepairModel.openai("gpt-4o").to_dict()["key_env"] == "OPENAI_API_KEY"
    with pytest.raises(InvalidRequest, match="empty"):
        RepairModel.command("  ")
    with pytest.raises(InvalidRequest, match="Cannot split"):
        RepairModel.command("llm 'unclosed")
    with pytest.raises(InvalidRequest, match="not an environment variable name"):
        RepairModel.anthropic("claude", key_env="sk-ant-123")
    with pytest.raises(InvalidRequest, match="needs a model name"):
        RepairModel.openai("")


def test_bounds_may_only_be_lowered() -> None:
    policy = RepairPolicy()
    assert policy.resolve(RepairBudget(rounds=2)).rounds == 2
    assert policy.resolve(RepairBudget()).rounds == 4
    with pytest.raises(LimitExceeded) as info:
        policy.resolve(RepairBudget(rounds=REPAIR_CEILINGS.rounds + 1))
    message = str(info.value)
    assert "the maximum is 20 rounds" in message and "repair.ceilings.rounds" in message
    with pytest.raises(InvalidRequest, match="the minimum is 1024 bytes"):
        policy.resolve(RepairBudget(prompt_bytes=10))


def test_repair_bounds_from_the_config_file_and_environment(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text("[repair.ceilings]\nrounds = 3\n[repair.defaults]\ntotal_s = 60\n")
    settings = load_settings({"PYBOX_REPAIR_MAX_MODEL_CALLS": "5"}, str(config))
    policy = settings.repair_policy
    assert policy.ceilings.rounds == 3 and policy.defaults.rounds == 3  # lowered with it
    assert policy.defaults.total_s == 60.0
    assert policy.ceilings.model_calls == 5
    with pytest.raises(LimitExceeded, match=r"repair\.ceilings\.rounds"):
        policy.resolve(RepairBudget(rounds=4))
    config.write_text("[repair]\nspeed = 1\n")
    with pytest.raises(ConfigError, match=r"repair\.speed"):
        load_settings({}, str(config))
    config.write_text("[repair.defaults]\nrounds = 50\n")
    with pytest.raises(ConfigError, match="above its ceiling"):
        load_settings({}, str(config))
