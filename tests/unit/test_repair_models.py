"""The HTTP model providers against a local fake server on 127.0.0.1.

The server speaks each API's request and response shapes, including error
bodies, slow answers, oversized answers, redirects and rate limits.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from pybox._adapters.model_providers import open_provider
from pybox._adapters.model_providers.http_api import retry_after_s
from pybox._core.errors import (
    ConfigError,
    InvalidRequest,
    ModelError,
    ModelRateLimited,
    ModelReplyTooLarge,
    ModelTimeout,
)
from pybox._core.limits import LimitRequest
from pybox._core.repair import Prompt, RepairGoal, RepairModel, StopReason
from pybox._features.repair.loop import RepairJob, RepairLoop
from pybox._orchestration.session import Session
from tests.unit.fake_engine import FakeEngine, Script

KEY = "sk-test-0123456789abcdef"
PROMPT = Prompt("You repair programs.", "Fix: print('x'")
FIXED_REPLY = "```python\nprint('x')  # FIXED\n```"


@dataclass
class Answer:
    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


class FakeAPI:
    def __init__(self) -> None:
        self.answers: list[Answer] = []
        self.seen: list[Seen] = []
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                raw = self.rfile.read(length)
                api.seen.append(
                    Seen(
                        "POST",
                        self.path,
                        {k.lower(): v for k, v in self.headers.items()},
                        json.loads(raw),
                    )
                )
                answer = (
                    api.answers.pop(0) if api.answers else Answer(500, b'{"error": "unscripted"}')
                )
                time.sleep(answer.delay_s)
                try:
                    self.send_response(answer.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(answer.body)))
                    for name, value in answer.headers.items():
                        self.send_header(name, value)
                    self.end_headers()
                    self.wfile.write(answer.body)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def api() -> Iterator[FakeAPI]:
    server = FakeAPI()
    yield server
    server.close()


def openai_answer(text: str | None) -> Answer:
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
        ],
    }
    return Answer(body=json.dumps(body).encode())


def anthropic_answer(text: str) -> Answer:
    body = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "content": [{"type": "text", "text": text}],
        "stop_reason": "end_turn",
    }
    return Answer(body=json.dumps(body).encode())


def openai(api: FakeAPI) -> RepairModel:
    return RepairModel.openai("gpt-test", base_url=api.url + "/v1", key_env="TEST_KEY")


def anthropic(api: FakeAPI) -> RepairModel:
    return RepairModel.anthropic(
        "claude-test", base_url=api.url, key_env="TEST_KEY", max_tokens=1000
    )


def ask(model: RepairModel, timeout_s: float = 5.0, max_reply_bytes: int = 100_000) -> str:
    provider = open_provider(model, {"TEST_KEY": KEY})
    return provider.ask(PROMPT, timeout_s=timeout_s, max_reply_bytes=max_reply_bytes)


def test_openai_request_and_reply_shapes(api: FakeAPI) -> None:
    api.answers.append(openai_answer(FIXED_REPLY))
    assert ask(openai(api)) == FIXED_REPLY
    (seen,) = api.seen
    assert seen.path == "/v1/chat/completions"
    assert seen.headers["authorization"] == f"Bearer {KEY}"
    assert seen.headers["content-type"] == "application/json"
    assert seen.body == {
        "model": "gpt-test",
        "messages": [
            {"role": "system", "content": PROMPT.system},
            {"role": "user", "content": PROMPT.user},
        ],
    }


def test_anthropic_request_and_reply_shapes(api: FakeAPI) -> None:
    api.answers.append(anthropic_answer(FIXED_REPLY))
    assert ask(anthropic(api)) == FIXED_REPLY
    (seen,) = api.seen
    assert seen.path == "/v1/messages"
    assert seen.headers["x-api-key"] == KEY
    assert seen.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in seen.headers
    assert seen.body == {
        "model": "claude-test",
        "max_tokens": 1000,
        "system": PROMPT.system,
        "messages": [{"role": "user", "content": PROMPT.user}],
    }


def test_a_null_openai_content_is_an_empty_reply(api: FakeAPI) -> None:
    api.answers.append(openai_answer(None))
    assert ask(openai(api)) == ""


@pytest.mark.parametrize("make", [openai, anthropic])
def test_error_bodies_become_model_errors_without_the_key(api: FakeAPI, make: Any) -> None:
    error = {"type": "error", "error": {"type": "api_error", "message": f"bad key {KEY} given"}}
    api.answers.append(Answer(401, json.dumps(error).encode()))
    with pytest.raises(ModelError) as info:
        ask(make(api))
    message = str(info.value)
    assert "HTTP 401: bad key [key] given" in message
    assert "Check the key" in message
    assert KEY not in message


def test_a_server_error_with_a_plain_body(api: FakeAPI) -> None:
    api.answers.append(Answer(503, b"upstream unavailable"))
    with pytest.raises(ModelError, match="HTTP 503: upstream unavailable"):
        ask(openai(api))


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"Retry-After": "3"}, 3.0),
        ({"retry-after-ms": "250", "Retry-After": "9"}, 0.25),
        ({}, None),
    ],
)
def test_rate_limits_carry_retry_after(
    api: FakeAPI, headers: dict[str, str], expected: float | None
) -> None:
    error = {"type": "error", "error": {"type": "rate_limit_error", "message": "Rate limited"}}
    api.answers.append(Answer(429, json.dumps(error).encode(), headers))
    with pytest.raises(ModelRateLimited) as info:
        ask(anthropic(api))
    assert info.value.retry_after_s == expected
    assert "HTTP 429: Rate limited" in str(info.value)


def test_retry_after_as_an_http_date() -> None:
    wait = retry_after_s({"Retry-After": formatdate(time.time() + 30, usegmt=True)})
    assert wait is not None and 25 < wait <= 30
    assert retry_after_s({"Retry-After": "soon"}) is None


def test_a_slow_server_times_out(api: FakeAPI) -> None:
    api.answers.append(Answer(body=b"{}", delay_s=3))
    started = time.monotonic()
    with pytest.raises(ModelTimeout, match="did not answer in time"):
        ask(openai(api), timeout_s=0.5)
    assert time.monotonic() - started < 2


def test_an_oversized_answer_is_dropped(api: FakeAPI) -> None:
    api.answers.append(openai_answer("x" * 200_000))
    with pytest.raises(ModelReplyTooLarge):
        ask(openai(api), max_reply_bytes=1000)
    api.answers.append(openai_answer("x" * 5000))
    with pytest.raises(ModelReplyTooLarge, match="more than 1000 bytes"):
        ask(openai(api), max_reply_bytes=1000)


def test_an_answer_that_is_not_json(api: FakeAPI) -> None:
    api.answers.append(Answer(body=b"<html>gateway</html>"))
    with pytest.raises(ModelError, match="not JSON"):
        ask(openai(api))
    api.answers.append(Answer(body=b'{"choices": []}'))
    with pytest.raises(ModelError, match=r"without choices\[0\]"):
        ask(openai(api))


def test_redirects_are_not_followed(api: FakeAPI) -> None:
    api.answers.append(Answer(307, b"", {"Location": api.url + "/elsewhere"}))
    with pytest.raises(ModelError, match="HTTP 307"):
        ask(openai(api))
    assert [s.path for s in api.seen] == ["/v1/chat/completions"]


def test_an_unreachable_server(api: FakeAPI) -> None:
    url = api.url
    api.close()
    model = RepairModel.openai("m", base_url=url, key_env="TEST_KEY")
    with pytest.raises(ModelError, match="Cannot reach"):
        ask(model)


def test_the_key_comes_only_from_the_environment() -> None:
    with pytest.raises(ConfigError, match="environment variable TEST_KEY, which is not set"):
        open_provider(RepairModel.openai("m", key_env="TEST_KEY"), {})


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://models.internal:8000/v1", "plain http is allowed only to this machine"),
        ("https://user:secret@127.0.0.1/v1", "holds credentials"),
        ("ftp://127.0.0.1/v1", "http:// or https://"),
        ("https://127.0.0.1/v1?key=x", "query"),
    ],
)
def test_unsafe_base_urls_are_refused(url: str, message: str) -> None:
    with pytest.raises(InvalidRequest, match=message):
        open_provider(RepairModel.openai("m", base_url=url, key_env="TEST_KEY"), {"TEST_KEY": KEY})


def test_the_loop_waits_out_a_rate_limit_then_repairs(
    api: FakeAPI, session: Session, engine: FakeEngine
) -> None:
    engine.script_for = lambda payload: Script() if b"FIXED" in payload else Script(exit_code=1)
    api.answers.append(Answer(429, b'{"error": {"message": "slow down"}}', {"Retry-After": "0.2"}))
    api.answers.append(openai_answer(FIXED_REPLY))
    repair_job = RepairJob(
        code=b"print('x'\n",
        goal=RepairGoal.exit0(),
        model=openai(api),
        run_limits=LimitRequest(timeout_s=1),
    )
    report = RepairLoop(session, repair_job, {**os.environ, "TEST_KEY": KEY}).run()
    assert report.stop_reason is StopReason.GOAL_MET
    assert report.rounds[0].model_calls == 2
    assert report.rounds[0].rate_limit_waits_s == (0.2,)
    assert len(api.seen) == 2
    document = json.dumps(report.to_dict())
    assert KEY not in document and "TEST_KEY" in document


def test_a_model_command_that_does_not_exist_is_refused_before_anything_runs(
    tmp_path: Path,
) -> None:
    environ = {"PATH": str(tmp_path)}
    with pytest.raises(ConfigError, match="'no-such-model' was not found"):
        open_provider(RepairModel.command("no-such-model --flag"), environ)
    with pytest.raises(ConfigError, match="was not found"):
        open_provider(RepairModel.command(f"{tmp_path}/missing"), environ)
    found = tmp_path / "model"
    found.write_text("#!/bin/sh\n")
    found.chmod(0o755)
    assert open_provider(RepairModel.command("model"), environ) is not None
