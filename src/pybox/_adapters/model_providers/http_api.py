"""What the HTTP model providers share: one bounded POST over urllib.

The base URL is checked before a key is sent to it (https, or plain http to
loopback only), redirects are never followed, the answer is read within the
reply bytes left, and the key is scrubbed from every error text. Each API
(`openai`, `anthropic`) says only its headers, its body and where its reply is.
"""

from __future__ import annotations

import email.utils
import http.client
import json
import re
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from datetime import UTC, datetime
from email.message import Message
from typing import IO, Any

from pybox._core.addresses import is_loopback
from pybox._core.display import escape_text
from pybox._core.errors import (
    InvalidRequest,
    ModelError,
    ModelRateLimited,
    ModelReplyTooLarge,
    ModelTimeout,
)
from pybox._core.repair import Prompt, RepairModel
from pybox._version import __version__

ERROR_BODY_BYTES = 64 * 1024
# An HTTP answer wraps the reply text in JSON; this much envelope is allowed on top.
ENVELOPE_BYTES = 64 * 1024
READ_CHUNK = 64 * 1024


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


class HTTPProvider:
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
