"""HTTP to the engine over a transport: requests, errors, hijacked streams.

Every request goes through `_exchange` (transport and connection errors) and
`_call` (status codes, via `errors.api_error`), so an engine's refusal and a
lost engine each become an exception in exactly one place.
"""

from __future__ import annotations

import base64
import json
import time
import urllib.parse
from collections.abc import Generator, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Self

from pybox._core.errors import EngineAnswerTooLarge, EngineError
from pybox._engine.endpoint import EngineEndpoint
from pybox._engine.errors import api_error, connection_lost, unreachable
from pybox._engine.http1 import (
    BodyTooLarge,
    Headers,
    ProtocolError,
    body_pieces,
    exchange,
    read_head,
    send_request,
)
from pybox._engine.interface import JSONObject
from pybox._engine.stream import DockerAttachStream
from pybox._engine.transport import Transport, UnixTransport

# The oldest Engine API with every field pybox sets and reads back, and the
# newest it has been checked against. pybox talks the highest both sides know.
MIN_API_VERSION = (1, 41)
MAX_API_VERSION = (1, 47)

DEFAULT_TIMEOUT_S = 60.0
_HIJACK_HEADER_BYTES = 65536
# The most of a refusal's body read when a download is refused.
_REFUSAL_MAX_BYTES = 1024 * 1024
# An empty credential: pybox pushes and pulls only where no login is needed.
NO_AUTH = {"X-Registry-Auth": base64.urlsafe_b64encode(b"{}").decode()}

# Pairs rather than a mapping where a parameter repeats (the import's `changes`).
Query = Mapping[str, str] | Sequence[tuple[str, str]]


def negotiate_api_version(raw: str, url: str) -> str:
    """The highest API version both sides speak, or why there is none."""
    try:
        server_version = tuple(int(part) for part in raw.split("."))
    except ValueError:
        raise EngineError(f"The engine reports an unreadable API version {raw!r}.") from None
    if server_version < MIN_API_VERSION:
        need = ".".join(map(str, MIN_API_VERSION))
        raise EngineError(
            f"The engine at {url} speaks Engine API {raw}; pybox needs {need} "
            "or newer. Upgrade the engine (Docker 20.10 or later)."
        )
    return ".".join(map(str, min(server_version, MAX_API_VERSION)))


class EngineHTTP:
    """The plumbing every Engine API call shares (a unix socket by default)."""

    def __init__(
        self,
        endpoint: EngineEndpoint,
        api_version: str,
        server_version: str = "",
        transport: Transport | None = None,
    ) -> None:
        self._endpoint = endpoint
        self._api_version = api_version
        self._server_version = server_version
        self._transport: Transport = transport or UnixTransport(endpoint)
        # What the engine calls itself in its answers' Server header ("Docker", "Libpod").
        self.product = ""

    @classmethod
    def connect(cls, endpoint: EngineEndpoint, transport: Transport | None = None) -> Self:
        """Reach the engine and agree on an API version, or say why not."""
        probe = cls(endpoint, "", transport=transport)
        # /_ping is cheap; /version makes the engine ask its components (about 5 ms).
        status, _, headers = probe._exchange("GET", "/_ping", versioned=False, timeout_s=10.0)
        raw = headers.get("Api-Version") or ""
        product = (headers.get("Server") or "").split(" ", 1)[0]
        release = product.split("/", 1)[1] if "/" in product else ""
        if status != 200 or not raw or not release:
            server = probe._call("GET", "/version", versioned=False, timeout_s=10.0)
            if not isinstance(server, dict):
                raise EngineError(
                    f"The engine at {endpoint.url} answered /version with {server!r}."
                )
            raw, release = str(server.get("ApiVersion", "0.0")), str(server.get("Version", ""))
            names = [c.get("Name") for c in server.get("Components") or [] if isinstance(c, dict)]
            product = "Libpod/" if "Podman Engine" in names else "Docker/"
        chosen = negotiate_api_version(raw, endpoint.url)
        engine = cls(endpoint, chosen, release or "unknown", transport=probe._transport)
        engine.product = product.split("/", 1)[0]
        return engine

    @property
    def endpoint(self) -> EngineEndpoint:
        return self._endpoint

    @property
    def api_version(self) -> str:
        return self._api_version

    @property
    def server_version(self) -> str:
        return self._server_version

    @property
    def transport(self) -> Transport:
        return self._transport

    # -- plumbing -------------------------------------------------------------

    def _path(self, path: str, query: Query | None, versioned: bool) -> str:
        full = f"/v{self._api_version}{path}" if versioned else path
        if query:
            full += "?" + urllib.parse.urlencode(query)
        return full

    def _exchange(
        self,
        method: str,
        path: str,
        *,
        query: Query | None = None,
        body: JSONObject | None = None,
        stream_body: Iterable[bytes] | None = None,
        raw_body: bytes | None = None,
        content_type: str = "application/json",
        timeout_s: float = DEFAULT_TIMEOUT_S,
        versioned: bool = True,
        extra_headers: Mapping[str, str] | None = None,
        max_body_bytes: int | None = None,
    ) -> tuple[int, bytes, Headers]:
        """One HTTP request: status, body and headers; transport failures raised here."""
        full_path = self._path(path, query, versioned)
        headers = {"Host": "docker", **(extra_headers or {})}
        payload: bytes | Iterable[bytes] | None = None
        if body is not None:
            payload = json.dumps(body).encode()
        elif stream_body is not None:
            payload = stream_body  # sent chunked
        elif raw_body is not None:
            payload = raw_body
        if payload is not None:
            headers["Content-Type"] = content_type
        sock = None
        with self._mapped(method, path, timeout_s):
            try:
                sock = self._transport.open(timeout_s)
                response = exchange(sock, method, full_path, headers, payload, max_body_bytes)
                return response.status, response.body, response.headers
            finally:
                if sock is not None:
                    sock.close()

    @contextmanager
    def _mapped(self, method: str, path: str, timeout_s: float) -> Iterator[None]:
        """Transport and protocol failures of one request, as pybox's exceptions."""
        try:
            yield
        except BodyTooLarge as exc:
            raise EngineAnswerTooLarge(
                f"The engine's answer to {method} {path} is larger than {exc.limit_bytes} "
                "bytes, the most pybox reads of it; it was not read.",
                limit_bytes=exc.limit_bytes,
            ) from None
        except TimeoutError:
            raise EngineError(
                f"The engine did not answer {method} {path} within {timeout_s:g} s."
            ) from None
        except (ConnectionError, FileNotFoundError, PermissionError) as exc:
            raise unreachable(self._endpoint, exc) from exc
        except (OSError, ProtocolError) as exc:
            raise connection_lost(self._endpoint, f"{method} {path}", exc) from exc

    def _download(
        self,
        path: str,
        *,
        what: str,
        max_body_bytes: int,
        idle_timeout_s: float,
        deadline_s: float,
    ) -> Generator[bytes, None, None]:
        """GET `path`'s body in pieces as they arrive, never held whole: an answer
        other than 200 is a refusal, a body longer than `max_body_bytes` is
        `EngineAnswerTooLarge`, a wait of `idle_timeout_s` for the next piece or a
        whole download past `deadline_s` an `EngineError`. Close the iterator
        (`contextlib.closing`) to close the connection early."""
        started = time.monotonic()
        sock = None
        with self._mapped("GET", path, idle_timeout_s):
            try:
                sock = self._transport.open(idle_timeout_s)
                send_request(sock, "GET", self._path(path, None, True), {"Host": "docker"})
                with sock.makefile("rb") as reader:
                    status, headers = read_head(reader)
                    if status != 200:
                        refusal = body_pieces(reader, status, headers, "GET", _REFUSAL_MAX_BYTES)
                        raise api_error(what, status, b"".join(refusal))
                    for piece in body_pieces(reader, status, headers, "GET", max_body_bytes):
                        yield piece
                        if time.monotonic() - started > deadline_s:
                            raise EngineError(
                                f"The engine did not finish {what} within {deadline_s:g} s; "
                                "pybox stopped reading it."
                            )
            finally:
                if sock is not None:
                    sock.close()

    def _call(
        self,
        method: str,
        path: str,
        *,
        what: str = "",
        ok: tuple[int, ...] = (200, 201, 204),
        answers: Mapping[int, Any] | None = None,
        parse: bool = True,
        **kwargs: Any,
    ) -> Any:
        """The decoded answer; `answers` maps an expected status to a plain value
        (404 -> None, say). Any other refusal becomes an `EngineAPIError` here."""
        status, raw, _ = self._exchange(method, path, **kwargs)
        if answers and status in answers:
            return answers[status]
        if status not in ok:
            raise api_error(what or f"{method} {path}", status, raw)
        if not parse:
            return raw
        if not raw:
            return {}
        try:
            return json.loads(raw)
        except ValueError:
            raise EngineError(
                f"The engine answered {method} {path} with something that is not JSON: "
                f"{raw[:200]!r}"
            ) from None

    @staticmethod
    def _field(result: Any, key: str) -> Any:
        return result.get(key) if isinstance(result, dict) else None

    def _hijack(self, path: str, body: bytes, what: str) -> DockerAttachStream:
        """POST `path` asking the engine to upgrade the connection to a raw stream."""
        content_type = "Content-Type: application/json\r\n" if body else ""
        request = (
            f"POST {path} HTTP/1.1\r\nHost: docker\r\nUpgrade: tcp\r\n"
            f"Connection: Upgrade\r\n{content_type}Content-Length: {len(body)}\r\n\r\n"
        ).encode() + body
        try:
            sock = self._transport.open(DEFAULT_TIMEOUT_S)
        except OSError as exc:
            raise unreachable(self._endpoint, exc) from exc
        try:
            sock.sendall(request)
            received = b""
            while b"\r\n\r\n" not in received:
                data = sock.recv(65536)
                if not data:
                    raise EngineError(f"The engine closed the connection before it would {what}.")
                received += data
                if len(received) > _HIJACK_HEADER_BYTES:
                    raise EngineError(f"The engine's answer to {what} has oversized headers.")
        except OSError as exc:
            sock.close()
            raise unreachable(self._endpoint, exc) from exc
        except BaseException:
            sock.close()
            raise
        head, leftover = received.split(b"\r\n\r\n", 1)
        status_line = head.split(b"\r\n", 1)[0].decode("latin-1")
        parts = status_line.split(" ", 2)
        if len(parts) < 2 or parts[1] not in ("101", "200"):
            sock.close()
            raise EngineError(f"The engine refused to {what}: {status_line}")
        return DockerAttachStream(sock, leftover)
