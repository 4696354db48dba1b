"""Model providers for the repair loop: a local command, or an HTTP API over urllib.

A provider turns a prompt into reply text and nothing else: it never runs the
reply. Each call is bounded in time (the loop's time left) and in bytes (the
loop's reply bytes left). API keys are read from the environment when the
provider is opened, sent only in the request header, and scrubbed from any
error text; they are never written anywhere.
"""

from __future__ import annotations

import email.utils
import http.client
import json
import os
import re
import selectors
import shutil
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from datetime import UTC, datetime
from email.message import Message
from typing import IO, Any, Protocol

from pybox._core.addresses import is_loopback
from pybox._core.display import escape_text
from pybox._core.errors import (
    ConfigError,
    InvalidRequest,
    ModelError,
    ModelRateLimited,
    ModelReplyTooLarge,
    ModelTimeout,
)
from pybox._core.repair import Prompt, ProviderKind, RepairModel
from pybox._version import __version__

POLL_S = 0.1
STDERR_TAIL_BYTES = 2000
ERROR_BODY_BYTES = 64 * 1024
# An HTTP answer wraps the reply text in JSON; this much envelope is allowed on top.
ENVELOPE_BYTES = 64 * 1024
READ_CHUNK = 64 * 1024
ANTHROPIC_VERSION = "2023-06-01"


class ModelProvider(Protocol):
    def ask(
        self,
        prompt: Prompt,
        *,
        timeout_s: float,
        max_reply_bytes: int,
        cancel: threading.Event | None = None,
    ) -> str:
        """The model's reply text, or ModelError (ModelTimeout, ModelRateLimited,
        ModelReplyTooLarge)."""
        ...


def open_provider(model: RepairModel, environ: Mapping[str, str]) -> ModelProvider:
    """A ready provider, or a clear error before anything is sent."""
    if model.provider is ProviderKind.COMMAND:
        # Found now, so a typo is a refusal before any box runs, not a model error after.
        program = model.argv[0] if model.argv else ""
        if not program or shutil.which(program, path=environ.get("PATH", os.defpath)) is None:
            raise ConfigError(
                f"The model command {program!r} was not found (looked in PATH"
                f"{'' if '/' not in program else ' and at that path'}): nothing was run. "
                "Install it, or give its full path in --model-cmd."
            )
        return CommandProvider(model.argv, environ)
    assert model.key_env is not None and model.base_url is not None
    key = environ.get(model.key_env, "")
    if not key.strip():
        raise ConfigError(
            f"The {model.provider.value} provider reads its API key from the environment "
            f"variable {model.key_env}, which is not set. Export it, or name another "
            "variable with --key-env."
        )
    key = key.strip()
    bad = next((i for i, char in enumerate(key) if not "!" <= char <= "~"), None)
    if bad is not None:
        # Never the key itself, nor the character: only where the problem is.
        raise ConfigError(
            f"The API key in the environment variable {model.key_env} has a character an "
            f"HTTP header cannot carry (a line break, a space, a control or a non-ASCII "
            f"character) at position {bad + 1} of {len(key)}. Set the variable to the key "
            "alone."
        )
    base = check_base_url(model.base_url)
    if model.provider is ProviderKind.OPENAI:
        return OpenAIProvider(model, base, key)
    return AnthropicProvider(model, base, key)


def scrub_secret(text: str, secret: str) -> str:
    """`text` with `secret` replaced by `[key]` in every form an error may show it:
    as is, as Python shows it in a str or bytes repr, and any piece of it split off
    at a character that such a repr escapes."""
    if not secret:
        return text
    forms = {
        secret,
        repr(secret)[1:-1],
        repr(secret.encode("utf-8", "surrogatepass"))[2:-1],
        *(piece for piece in re.split(r"[^!-~]", secret) if len(piece) >= 4),
    }
    for form in sorted(forms, key=len, reverse=True):  # the longest first: no partial left
        if form:
            text = text.replace(form, "[key]")
    return text


def check_base_url(url: str) -> str:
    """The base URL without a trailing slash, if it is safe to send a key to."""
    parts = urllib.parse.urlsplit(url)
    problem = None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        problem = "it must be an http:// or https:// URL with a host"
    elif parts.username or parts.password:
        problem = "it holds credentials; pybox reads the key only from an environment variable"
    elif parts.query or parts.fragment:
        problem = "it must not have a query or a fragment"
    elif parts.scheme == "http" and not is_loopback(parts.hostname):
        problem = (
            "plain http is allowed only to this machine (loopback), since the API key "
            "would travel in clear text; use https"
        )
    if problem:
        raise InvalidRequest(f"The model base URL {url!r} is not usable: {problem}.")
    return url.rstrip("/")


# -- a local command ----------------------------------------------------------------


class CommandProvider:
    """Runs `argv` (never through a shell) once per call: prompt on stdin, reply on stdout."""

    def __init__(self, argv: tuple[str, ...], environ: Mapping[str, str]) -> None:
        self.argv = argv
        self.environ = dict(environ)

    def ask(
        self,
        prompt: Prompt,
        *,
        timeout_s: float,
        max_reply_bytes: int,
        cancel: threading.Event | None = None,
    ) -> str:
        deadline = time.monotonic() + timeout_s
        name = self.argv[0]
        try:
            process = subprocess.Popen(
                self.argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=self.environ,
                start_new_session=True,  # its own process group, so it can be ended whole
            )
        except OSError as exc:
            raise ModelError(
                f"Cannot start the model command {name!r}: {exc.strerror or exc}. Check that "
                "it is installed and on PATH."
            ) from exc
        try:
            return self._talk(process, prompt, deadline, max_reply_bytes, cancel)
        finally:
            if process.poll() is None:
                _end_group(process)

    def _talk(
        self,
        process: subprocess.Popen[bytes],
        prompt: Prompt,
        deadline: float,
        max_reply_bytes: int,
        cancel: threading.Event | None,
    ) -> str:
        assert process.stdin is not None and process.stdout is not None
        assert process.stderr is not None
        writer = threading.Thread(
            target=_feed, args=(process.stdin, prompt.text.encode("utf-8")), daemon=True
        )
        writer.start()
        reply = bytearray()
        stderr_tail = bytearray()
        with selectors.DefaultSelector() as selector:
            selector.register(process.stdout, selectors.EVENT_READ, "out")
            selector.register(process.stderr, selectors.EVENT_READ, "err")
            while selector.get_map():
                if cancel is not None and cancel.is_set():
                    raise ModelError("The model command was stopped: the repair was cancelled.")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ModelTimeout(
                        f"The model command {self.argv[0]!r} did not answer in time; it was ended."
                    )
                for key, _ in selector.select(min(left, POLL_S)):
                    stream: IO[bytes] = key.fileobj  # type: ignore[assignment]
                    data = os.read(stream.fileno(), READ_CHUNK)
                    if not data:
                        selector.unregister(stream)
                    elif key.data == "out":
                        reply += data
                        if len(reply) > max_reply_bytes:
                            raise ModelReplyTooLarge(
                                f"The model command's reply passed {max_reply_bytes} bytes "
                                "(the reply bytes left); it was ended."
                            )
                    else:
                        stderr_tail = (stderr_tail + data)[-STDERR_TAIL_BYTES:]
        try:
            code = process.wait(timeout=max(deadline - time.monotonic(), 0.01))
        except subprocess.TimeoutExpired:
            raise ModelTimeout(
                f"The model command {self.argv[0]!r} closed its output but did not exit in "
                "time; it was ended."
            ) from None
        if code != 0:
            # The command's own words, on one line and with nothing a terminal acts on.
            detail = escape_text(stderr_tail.decode("utf-8", "replace").strip())
            raise ModelError(
                f"The model command {self.argv[0]!r} failed with exit status {code}"
                + (f": {detail}" if detail else " and printed nothing on stderr")
            )
        return reply.decode("utf-8", "replace")


def _feed(stdin: IO[bytes], data: bytes) -> None:
    try:
        stdin.write(data)
    except (BrokenPipeError, OSError):
        pass  # the command stopped reading; its exit status and output say the rest
    finally:
        try:
            stdin.close()
        except OSError:
            pass


def _end_group(process: subprocess.Popen[bytes]) -> None:
    """End the command pybox started and whatever it started in its group."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        process.kill()
    process.wait()


# -- HTTP APIs ------------------------------------------------------------------------


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A redirect would carry the key to another address: never follow one."""

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: IO[bytes],
        code: int,
        msg: str,
        headers: http.client.HTTPMessage,
        newurl: str,
    ) -> urllib.request.Request | None:
        return None


def _read_bounded(stream: IO[bytes], limit: int, deadline: float, what: str) -> bytes:
    body = bytearray()
    while True:
        if time.monotonic() > deadline:
            raise ModelTimeout(f"{what} did not finish its answer in time.")
        chunk = stream.read(READ_CHUNK)
        if not chunk:
            return bytes(body)
        body += chunk
        if len(body) > limit:
            raise ModelReplyTooLarge(
                f"{what} sent more than {limit} bytes (the reply bytes left plus "
                f"{ENVELOPE_BYTES} bytes of envelope); the answer was dropped."
            )


def retry_after_s(headers: Mapping[str, str] | Message) -> float | None:
    """Seconds to wait from `retry-after-ms` or `Retry-After` (seconds or an HTTP date)."""
    milliseconds = headers.get("retry-after-ms")
    if milliseconds:
        try:
            return max(float(milliseconds) / 1000, 0.0)
        except ValueError:
            pass
    value = headers.get("Retry-After")
    if not value:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max((when - datetime.now(UTC)).total_seconds(), 0.0)


class _HTTPProvider:
    path = ""

    def __init__(self, model: RepairModel, base_url: str, key: str) -> None:
        self.model = model
        self.url = base_url + self.path
        self._key = key
        host = urllib.parse.urlsplit(self.url).hostname or ""
        # Loopback never goes through a proxy; other hosts follow the environment's proxy settings.
        proxies = urllib.request.ProxyHandler({} if is_loopback(host) else None)
        self._opener = urllib.request.build_opener(proxies, _NoRedirects())
        self.what = f"The {model.provider.value} API at {self.url}"

    def _headers(self) -> dict[str, str]:
        raise NotImplementedError

    def _body(self, prompt: Prompt) -> dict[str, Any]:
        raise NotImplementedError

    def _reply(self, answer: dict[str, Any]) -> str:
        raise NotImplementedError

    def _scrub(self, text: str) -> str:
        return scrub_secret(text, self._key)

    def ask(
        self,
        prompt: Prompt,
        *,
        timeout_s: float,
        max_reply_bytes: int,
        cancel: threading.Event | None = None,
    ) -> str:
        deadline = time.monotonic() + timeout_s
        # The URL's scheme was checked to be http or https in `check_base_url`.
        request = urllib.request.Request(  # noqa: S310
            self.url,
            data=json.dumps(self._body(prompt)).encode("utf-8"),
            method="POST",
            headers={
                "Content-Type": "application/json",
                "User-Agent": f"pybox/{__version__}",
                **self._headers(),
            },
        )
        try:
            with self._opener.open(request, timeout=timeout_s) as response:
                raw = _read_bounded(response, max_reply_bytes + ENVELOPE_BYTES, deadline, self.what)
        except urllib.error.HTTPError as exc:
            raise self._http_error(exc, deadline) from None
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, TimeoutError):
                raise ModelTimeout(f"{self.what} did not answer in time.") from None
            reason = escape_text(self._scrub(str(exc.reason)))
            raise ModelError(f"Cannot reach {self.what}: {reason}.") from None
        except TimeoutError:
            raise ModelTimeout(f"{self.what} did not answer in time.") from None
        except (http.client.HTTPException, OSError, ValueError) as exc:
            # ValueError: http.client refusing a header value, which may hold the key.
            raise ModelError(f"{self.what} failed: {escape_text(self._scrub(str(exc)))}.") from None
        try:
            answer = json.loads(raw)
        except ValueError:
            raise ModelError(f"{self.what} answered something that is not JSON.") from None
        if not isinstance(answer, dict):
            raise ModelError(f"{self.what} answered JSON that is not an object.")
        reply = self._reply(answer)
        if len(reply.encode("utf-8", "surrogatepass")) > max_reply_bytes:
            raise ModelReplyTooLarge(
                f"{self.what} replied with more than {max_reply_bytes} bytes (the reply bytes "
                "left); the reply was dropped."
            )
        return reply

    def _http_error(self, exc: urllib.error.HTTPError, deadline: float) -> ModelError:
        try:
            body = _read_bounded(exc, ERROR_BODY_BYTES, deadline, self.what)
        except ModelError:
            body = b""
        finally:
            exc.close()
        message = _error_message(body) or exc.reason or "no message"
        message = escape_text(self._scrub(str(message))[:500])
        if exc.code == 429:
            wait = retry_after_s(exc.headers)
            after = "" if wait is None else f"; it asks to retry after {wait:g} s"
            return ModelRateLimited(
                f"{self.what} is rate limiting (HTTP 429: {message}){after}.", retry_after_s=wait
            )
        hint = " Check the key in the environment variable." if exc.code in (401, 403) else ""
        return ModelError(f"{self.what} answered HTTP {exc.code}: {message}.{hint}")


def _error_message(body: bytes) -> str | None:
    """The message in an OpenAI- or Anthropic-style error body, if there is one."""
    try:
        data = json.loads(body)
    except ValueError:
        text = body.decode("utf-8", "replace").strip()
        return text[:200] or None
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return str(error["message"])
    if isinstance(error, str):
        return error
    return None


class OpenAIProvider(_HTTPProvider):
    """An OpenAI-compatible `POST {base}/chat/completions`."""

    path = "/chat/completions"

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._key}"}

    def _body(self, prompt: Prompt) -> dict[str, Any]:
        return {
            "model": self.model.model,
            "messages": [
                {"role": "system", "content": prompt.system},
                {"role": "user", "content": prompt.user},
            ],
        }

    def _reply(self, answer: dict[str, Any]) -> str:
        try:
            content = answer["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError):
            raise ModelError(f"{self.what} answered without choices[0].message.content.") from None
        if content is None:
            return ""  # a refusal or a tool call: no program, an invalid proposal
        if not isinstance(content, str):
            raise ModelError(f"{self.what} answered a message whose content is not text.")
        return content


class AnthropicProvider(_HTTPProvider):
    """The Anthropic messages API, `POST {base}/v1/messages`."""

    path = "/v1/messages"

    def _headers(self) -> dict[str, str]:
        return {"x-api-key": self._key, "anthropic-version": ANTHROPIC_VERSION}

    def _body(self, prompt: Prompt) -> dict[str, Any]:
        return {
            "model": self.model.model,
            "max_tokens": self.model.max_tokens,
            "system": prompt.system,
            "messages": [{"role": "user", "content": prompt.user}],
        }

    def _reply(self, answer: dict[str, Any]) -> str:
        content = answer.get("content")
        if not isinstance(content, list):
            raise ModelError(f"{self.what} answered without a content list.")
        return "".join(
            block["text"]
            for block in content
            if isinstance(block, dict)
            and block.get("type") == "text"
            and isinstance(block.get("text"), str)
        )
