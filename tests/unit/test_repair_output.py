"""`pybox repair` never shows an API key, nor lets a model or provider act on the terminal."""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pybox._adapters.model_providers import open_provider
from pybox._adapters.model_providers.http_api import scrub_secret
from pybox._adapters.model_providers.openai import OpenAIProvider
from pybox._core.errors import ConfigError, ModelError
from pybox._core.repair import Prompt, RepairModel
from pybox._frontends.cli import _repair, main
from pybox._orchestration.session import Session
from tests.unit.fake_engine import FakeEngine, Script
from tests.unit.test_repair_models import Answer, FakeAPI

PROMPT = Prompt("You repair programs.", "Fix it.")
# The pieces a leak would show: each half of the key, however it is escaped.
KEY_HALVES = ("sk-live-1234abcd", "5678efgh-secret")
HOSTILE = "\x1b]0;owned\x07\x1b[2J\r\u202e"


@pytest.fixture
def api() -> Iterator[FakeAPI]:
    server = FakeAPI()
    yield server
    server.close()


def _no_key(text: str) -> None:
    for half in KEY_HALVES:
        assert half not in text, text


def _inert(text: str) -> None:
    assert all(line.isprintable() for line in text.split("\n")), repr(text)


@pytest.mark.parametrize("between", ["\n", "\r", "\r\n", " ", "\x00", "\u2028"])
def test_a_key_with_a_line_break_or_control_is_refused_without_showing_it(
    api: FakeAPI, between: str
) -> None:
    key = KEY_HALVES[0] + between + KEY_HALVES[1]
    model = RepairModel.openai("m", base_url=api.url, key_env="TEST_KEY")
    with pytest.raises(ConfigError) as info:
        open_provider(model, {"TEST_KEY": key})
    message = str(info.value)
    _no_key(message)
    assert "TEST_KEY" in message and f"at position {len(KEY_HALVES[0]) + 1}" in message
    assert not api.seen  # nothing was sent


def test_an_http_client_refusal_never_shows_the_key(api: FakeAPI) -> None:
    """Even a key that got past the check (a provider made directly) is scrubbed."""
    key = KEY_HALVES[0] + "\n" + KEY_HALVES[1]
    provider = OpenAIProvider(RepairModel.openai("m", base_url=api.url), api.url, key)
    with pytest.raises(ModelError) as info:
        provider.ask(PROMPT, timeout_s=5, max_reply_bytes=1000)
    _no_key(str(info.value))
    _inert(str(info.value))


def test_scrub_secret_catches_every_form_of_the_key() -> None:
    key = KEY_HALVES[0] + "\n" + KEY_HALVES[1]
    for text in (
        f"value {key}!",
        f"Invalid header value {key.encode()!r}",
        f"repr {key!r}",
        f"one half {KEY_HALVES[1]} only",
    ):
        scrubbed = scrub_secret(text, key)
        _no_key(scrubbed)
        assert "[key]" in scrubbed
    assert scrub_secret("nothing here", key) == "nothing here"
    assert scrub_secret("x", "") == "x"


def test_a_provider_error_body_is_escaped(api: FakeAPI) -> None:
    api.answers.append(Answer(500, json.dumps({"error": {"message": f"boom {HOSTILE}"}}).encode()))
    model = RepairModel.openai("m", base_url=api.url, key_env="TEST_KEY")
    provider = open_provider(model, {"TEST_KEY": KEY_HALVES[0]})
    with pytest.raises(ModelError) as info:
        provider.ask(PROMPT, timeout_s=5, max_reply_bytes=1000)
    assert "HTTP 500: boom \\x1b]0;owned\\x07\\x1b[2J\\r\\u202e" in str(info.value)
    _inert(str(info.value))


def test_a_model_commands_output_cannot_reach_the_terminal(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    session: Session,
    engine: FakeEngine,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("PYBOX_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("PYBOX_CONFIG", raising=False)
    monkeypatch.setattr(_repair, "open_session", lambda args: session)
    engine.script = Script(exit_code=1, stderr=HOSTILE.encode())
    program = tmp_path / "broken.py"
    program.write_text("raise SystemExit(1)\n")
    hostile_model = [sys.executable, "-c", f"import sys; sys.stderr.write({HOSTILE!r}); exit(3)"]
    code = main(
        ["repair", str(program), "--goal", "exit0", "--model-cmd", shlex.join(hostile_model)]
    )
    assert code == 125
    captured = capsys.readouterr()
    _inert(captured.out)
    _inert(captured.err)
    assert "exit status 3: \\x1b]0;owned\\x07" in captured.out
