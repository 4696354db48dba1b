"""A small Docker Engine API client over a unix socket (standard library only).

This layer speaks HTTP to the engine and nothing else: it knows no policy,
no posture and no receipts. `Engine` is the protocol the orchestration layer
depends on; `DockerEngine` implements it against a real engine and the unit
tests implement it with a fake.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import select
import socket
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from pybox._core.errors import ConfigError, EngineAPIError, EngineError, EngineUnavailable

# The oldest Engine API with every field pybox sets and reads back, and the
# newest it has been checked against. pybox talks the highest both sides know.
MIN_API_VERSION = (1, 41)
MAX_API_VERSION = (1, 47)

DEFAULT_TIMEOUT_S = 60.0

JSONObject = dict[str, Any]
# Pairs rather than a mapping where a parameter repeats (the import's `changes`).
Query = Mapping[str, str] | Sequence[tuple[str, str]]


@dataclass(frozen=True)
class EngineEndpoint:
    """Where the engine's API socket is, and how pybox found it."""

    socket_path: str
    found_by: str

    @property
    def url(self) -> str:
        return f"unix://{self.socket_path}"


def socket_candidates(environ: Mapping[str, str]) -> list[tuple[str, str]]:
    """The usual socket paths, in the order pybox tries them."""
    candidates = [
        ("/var/run/docker.sock", "the default Docker socket"),
        ("/run/docker.sock", "the default Docker socket"),
    ]
    runtime_dir = environ.get("XDG_RUNTIME_DIR")
    if runtime_dir:
        candidates.append((f"{runtime_dir}/docker.sock", "the rootless Docker socket"))
    return candidates


def find_endpoint(environ: Mapping[str, str]) -> EngineEndpoint:
    """`DOCKER_HOST` if set, else the first usual socket path that exists."""
    docker_host = environ.get("DOCKER_HOST", "").strip()
    if docker_host:
        if not docker_host.startswith("unix://"):
            raise ConfigError(
                f"DOCKER_HOST={docker_host!r} is not a unix socket. pybox only drives a local "
                "engine through its unix socket (for example unix:///var/run/docker.sock); "
                "unset DOCKER_HOST or point it at a unix:// socket."
            )
        return EngineEndpoint(docker_host[len("unix://") :], "DOCKER_HOST")
    candidates = socket_candidates(environ)
    for path, why in candidates:
        if os.path.exists(path):
            return EngineEndpoint(path, why)
    tried = ", ".join(path for path, _ in candidates)
    raise EngineUnavailable(
        f"No container engine socket found (tried {tried}). Install and start Docker "
        "(for example: sudo apt-get install docker.io && sudo systemctl start docker), "
        "or set DOCKER_HOST=unix:///path/to/docker.sock."
    )


class AttachStream(Protocol):
    """A box's stdin (to send) and demultiplexed stdout/stderr (to read)."""

    def send(self, data: bytes) -> None: ...

    def read(self, timeout_s: float) -> tuple[int, bytes] | None:
        """`(1, bytes)` for stdout, `(2, bytes)` for stderr, `(0, b"")` at the end,
        or None when nothing arrived within `timeout_s`."""
        ...

    def fileno(self) -> int: ...

    def has_pending(self) -> bool:
        """True when output, or the end of the stream, is waiting to be read."""
        ...

    def close(self) -> None: ...


class Engine(Protocol):
    """The engine operations pybox uses. Implemented by DockerEngine and fakes."""

    @property
    def endpoint(self) -> EngineEndpoint: ...

    @property
    def api_version(self) -> str: ...

    @property
    def server_version(self) -> str: ...

    def version(self) -> JSONObject: ...

    def info(self) -> JSONObject: ...

    def create_container(self, name: str, body: JSONObject) -> str: ...

    def inspect_container(self, container_id: str) -> JSONObject | None: ...

    def attach(self, container_id: str) -> AttachStream: ...

    def start_container(self, container_id: str) -> None: ...

    def kill_container(self, container_id: str, signal: str = "KILL") -> bool: ...

    def wait_container(self, container_id: str, timeout_s: float) -> int: ...

    def remove_container(self, container_id: str) -> bool: ...

    def list_containers(self, labels: Mapping[str, str | None]) -> list[JSONObject]: ...

    def inspect_image(self, reference: str) -> JSONObject | None: ...

    def import_image(
        self, tar_chunks: Iterable[bytes], repo: str, tag: str, changes: list[str]
    ) -> str: ...

    def remove_image(self, reference: str) -> bool: ...

    # Building and moving images (not used by runs).

    def put_archive(self, container_id: str, path: str, tar_bytes: bytes) -> None: ...

    def exec_create(self, container_id: str, argv: list[str], user: str) -> str: ...

    def exec_start(self, exec_id: str) -> AttachStream: ...

    def exec_exit_code(self, exec_id: str) -> int | None: ...

    def connect_network(self, network: str, container_id: str) -> None: ...

    def disconnect_network(self, network: str, container_id: str) -> None: ...

    def commit(self, container_id: str, repo: str, tag: str, config: JSONObject) -> str: ...

    def tag_image(self, reference: str, repo: str, tag: str) -> None: ...

    def push_image(self, repo: str, tag: str) -> str: ...

    def pull_image(self, repo: str, digest: str, platform: str) -> None: ...


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, socket_path: str, timeout_s: float) -> None:
        super().__init__("localhost", timeout=timeout_s)
        self._socket_path = socket_path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self._socket_path)
        except BaseException:
            sock.close()
            raise
        self.sock = sock


def _unreachable(endpoint: EngineEndpoint, exc: OSError) -> EngineUnavailable:
    if isinstance(exc, PermissionError):
        hint = (
            "permission denied. Run as a user in the 'docker' group (sudo usermod -aG "
            "docker $USER, then log in again) or as root."
        )
    elif isinstance(exc, FileNotFoundError):
        hint = "the socket does not exist. Is the engine installed and running?"
    elif isinstance(exc, ConnectionRefusedError):
        hint = "connection refused. Start the engine (for example: sudo systemctl start docker)."
    else:
        hint = f"{exc.strerror or exc}. Check that the engine is running."
    return EngineUnavailable(f"Cannot reach the container engine at {endpoint.url}: {hint}")


def _engine_message(raw: bytes) -> str:
    try:
        decoded = json.loads(raw)
    except ValueError:
        return raw.decode("utf-8", "replace").strip()[:500]
    if isinstance(decoded, dict) and isinstance(decoded.get("message"), str):
        return str(decoded["message"])
    return raw.decode("utf-8", "replace").strip()[:500]


class DockerAttachStream:
    """A hijacked `/attach` connection: raw stdin out, multiplexed output in."""

    _HEADER = 8

    def __init__(self, sock: socket.socket, leftover: bytes) -> None:
        self._sock = sock
        self._buffer = bytearray(leftover)
        self._stream = 0
        self._remaining = 0
        self._ended = False

    def fileno(self) -> int:
        return self._sock.fileno()

    def has_pending(self) -> bool:
        if self._buffer or self._ended:
            return True
        try:
            readable, _, _ = select.select([self._sock], [], [], 0)
        except (OSError, ValueError):
            return True  # a connection that cannot be polled is no good either
        return bool(readable)

    def send(self, data: bytes) -> None:
        self._sock.settimeout(DEFAULT_TIMEOUT_S)
        try:
            self._sock.sendall(data)
        except OSError as exc:
            raise EngineError(
                f"Lost the attach connection to the box while sending: {exc}"
            ) from exc

    def _take(self) -> tuple[int, bytes] | None:
        """One chunk from the buffer, if the buffer holds one."""
        while True:
            if self._remaining:
                if not self._buffer:
                    return None
                chunk = bytes(self._buffer[: self._remaining])
                del self._buffer[: len(chunk)]
                self._remaining -= len(chunk)
                return (self._stream, chunk)
            if len(self._buffer) < self._HEADER:
                return None
            self._stream = self._buffer[0]
            self._remaining = int.from_bytes(self._buffer[4:8], "big")
            del self._buffer[: self._HEADER]

    def read(self, timeout_s: float) -> tuple[int, bytes] | None:
        chunk = self._take()
        if chunk is not None:
            return chunk
        if self._ended:
            return (0, b"")
        try:
            readable, _, _ = select.select([self._sock], [], [], max(timeout_s, 0.0))
            if not readable:
                return None
            data = self._sock.recv(262144)
        except OSError as exc:
            raise EngineError(
                f"Lost the attach connection to the box while reading: {exc}"
            ) from exc
        if not data:
            self._ended = True
            return (0, b"")
        self._buffer += data
        return self._take()

    def close(self) -> None:
        try:
            self._sock.close()
        except OSError:
            pass


class DockerEngine:
    """The Docker Engine API (and compatible engines) over a unix socket."""

    def __init__(
        self, endpoint: EngineEndpoint, api_version: str, server_version: str = ""
    ) -> None:
        self._endpoint = endpoint
        self._api_version = api_version
        self._server_version = server_version

    @classmethod
    def connect(cls, endpoint: EngineEndpoint) -> DockerEngine:
        """Reach the engine and agree on an API version, or say why not."""
        probe = cls(endpoint, "")
        # /_ping is cheap; /version makes the engine ask its components (about 5 ms).
        status, _, headers = probe._exchange("GET", "/_ping", versioned=False, timeout_s=10.0)
        raw = headers.get("Api-Version") or ""
        server_header = headers.get("Server") or ""
        product = server_header.split(" ", 1)[0]
        release = product.split("/", 1)[1] if "/" in product else ""
        if status != 200 or not raw or not release:
            server = probe._call("GET", "/version", versioned=False, timeout_s=10.0)
            if not isinstance(server, dict):
                raise EngineError(
                    f"The engine at {endpoint.url} answered /version with {server!r}."
                )
            raw, release = str(server.get("ApiVersion", "0.0")), str(server.get("Version", ""))
        try:
            server_version = tuple(int(part) for part in raw.split("."))
        except ValueError:
            raise EngineError(f"The engine reports an unreadable API version {raw!r}.") from None
        if server_version < MIN_API_VERSION:
            need = ".".join(map(str, MIN_API_VERSION))
            raise EngineError(
                f"The engine at {endpoint.url} speaks Engine API {raw}; pybox needs {need} "
                "or newer. Upgrade the engine (Docker 20.10 or later)."
            )
        chosen = min(server_version, MAX_API_VERSION)
        return cls(endpoint, ".".join(map(str, chosen)), release or "unknown")

    @property
    def endpoint(self) -> EngineEndpoint:
        return self._endpoint

    @property
    def api_version(self) -> str:
        return self._api_version

    @property
    def server_version(self) -> str:
        return self._server_version

    # -- plumbing -------------------------------------------------------------

    def _path(self, path: str, query: Query | None, versioned: bool) -> str:
        full = f"/v{self._api_version}{path}" if versioned else path
        if query:
            full += "?" + urllib.parse.urlencode(query)
        return full

    def _request(self, method: str, path: str, **options: Any) -> tuple[int, bytes]:
        status, raw, _ = self._exchange(method, path, **options)
        return status, raw

    def _exchange(
        self,
        method: str,
        path: str,
        *,
        query: Query | None = None,
        body: JSONObject | None = None,
        stream_body: Iterable[bytes] | None = None,
        content_type: str = "application/json",
        timeout_s: float = DEFAULT_TIMEOUT_S,
        versioned: bool = True,
        raw_body: bytes | None = None,
        extra_headers: Mapping[str, str] | None = None,
    ) -> tuple[int, bytes, http.client.HTTPMessage]:
        full_path = self._path(path, query, versioned)
        conn = _UnixHTTPConnection(self._endpoint.socket_path, timeout_s)
        try:
            headers = {"Host": "docker", **(extra_headers or {})}
            payload: bytes | Iterable[bytes] | None = None
            if body is not None:
                payload = json.dumps(body).encode()
                headers["Content-Type"] = content_type
            elif stream_body is not None:
                payload = stream_body
                headers["Content-Type"] = content_type
                headers["Transfer-Encoding"] = "chunked"
            elif raw_body is not None:
                payload = raw_body
                headers["Content-Type"] = content_type
            conn.request(
                method,
                full_path,
                body=payload,
                headers=headers,
                encode_chunked=stream_body is not None,
            )
            response = conn.getresponse()
            return response.status, response.read(), response.headers
        except TimeoutError:
            raise EngineError(
                f"The engine did not answer {method} {path} within {timeout_s:g} s."
            ) from None
        except (ConnectionError, FileNotFoundError, PermissionError) as exc:
            raise _unreachable(self._endpoint, exc) from exc
        except (OSError, http.client.HTTPException) as exc:
            raise EngineUnavailable(
                f"Lost the connection to the engine at {self._endpoint.url} during "
                f"{method} {path}: {exc}. Check that the engine is still running."
            ) from exc
        finally:
            conn.close()

    def _call(
        self,
        method: str,
        path: str,
        *,
        ok: tuple[int, ...] = (200, 201, 204),
        missing_ok: bool = False,
        **kwargs: Any,
    ) -> Any:
        status, raw = self._request(method, path, **kwargs)
        if missing_ok and status == 404:
            return None
        if status not in ok:
            message = _engine_message(raw)
            raise EngineAPIError(
                f"The engine refused {method} {path} (HTTP {status}): {message}",
                status=status,
                engine_message=message,
            )
        if not raw:
            return {}
        try:
            return json.loads(raw)
        except ValueError:
            raise EngineError(
                f"The engine answered {method} {path} with something that is not JSON: "
                f"{raw[:200]!r}"
            ) from None

    # -- system ---------------------------------------------------------------

    def version(self) -> JSONObject:
        result: JSONObject = self._call("GET", "/version")
        return result

    def info(self) -> JSONObject:
        result: JSONObject = self._call("GET", "/info")
        return result

    # -- containers -------------------------------------------------------------

    def create_container(self, name: str, body: JSONObject) -> str:
        result = self._call("POST", "/containers/create", query={"name": name}, body=body)
        container_id = result.get("Id") if isinstance(result, dict) else None
        if not isinstance(container_id, str) or not container_id:
            raise EngineError(f"The engine created {name} but returned no container ID: {result!r}")
        return container_id

    def inspect_container(self, container_id: str) -> JSONObject | None:
        result: JSONObject | None = self._call(
            "GET", f"/containers/{container_id}/json", missing_ok=True
        )
        return result

    def start_container(self, container_id: str) -> None:
        self._call("POST", f"/containers/{container_id}/start", ok=(204, 304))

    def kill_container(self, container_id: str, signal: str = "KILL") -> bool:
        """Send `signal`; False when the box was already stopped or gone."""
        status, raw = self._request(
            "POST", f"/containers/{container_id}/kill", query={"signal": signal}
        )
        if status in (204, 200):
            return True
        if status in (404, 409):
            return False
        message = _engine_message(raw)
        raise EngineAPIError(
            f"The engine refused to kill {container_id[:12]} (HTTP {status}): {message}",
            status=status,
            engine_message=message,
        )

    def wait_container(self, container_id: str, timeout_s: float) -> int:
        result = self._call(
            "POST",
            f"/containers/{container_id}/wait",
            query={"condition": "not-running"},
            timeout_s=timeout_s,
        )
        code = result.get("StatusCode") if isinstance(result, dict) else None
        if not isinstance(code, int):
            raise EngineError(f"The engine's wait answer has no exit code: {result!r}")
        return code

    def remove_container(self, container_id: str) -> bool:
        """Force-remove the box; False when the engine says it does not exist."""
        status, raw = self._request(
            "DELETE",
            f"/containers/{container_id}",
            query={"force": "1", "v": "1"},
        )
        if status in (200, 204):
            return True
        if status == 404:
            return False
        message = _engine_message(raw)
        if status == 409 and "already in progress" in message:
            return True
        raise EngineAPIError(
            f"The engine refused to remove {container_id[:12]} (HTTP {status}): {message}",
            status=status,
            engine_message=message,
        )

    def list_containers(self, labels: Mapping[str, str | None]) -> list[JSONObject]:
        label_filter = [key if value is None else f"{key}={value}" for key, value in labels.items()]
        query = {"all": "1", "filters": json.dumps({"label": label_filter})}
        result = self._call("GET", "/containers/json", query=query)
        if not isinstance(result, list):
            raise EngineError(f"The engine's container list is not a list: {result!r}")
        return result

    def attach(self, container_id: str) -> DockerAttachStream:
        """Hijack an attach connection for stdin, stdout and stderr."""
        path = self._path(
            f"/containers/{container_id}/attach",
            {"stream": "1", "stdin": "1", "stdout": "1", "stderr": "1"},
            versioned=True,
        )
        return self._hijack(path, b"", f"attach to {container_id[:12]}")

    def _hijack(self, path: str, body: bytes, what: str) -> DockerAttachStream:
        """POST `path` asking the engine to upgrade the connection to a raw stream."""
        content_type = "Content-Type: application/json\r\n" if body else ""
        request = (
            f"POST {path} HTTP/1.1\r\nHost: docker\r\nUpgrade: tcp\r\n"
            f"Connection: Upgrade\r\n{content_type}Content-Length: {len(body)}\r\n\r\n"
        ).encode() + body
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(DEFAULT_TIMEOUT_S)
        try:
            sock.connect(self._endpoint.socket_path)
            sock.sendall(request)
            received = b""
            while b"\r\n\r\n" not in received:
                data = sock.recv(65536)
                if not data:
                    raise EngineError(f"The engine closed the connection before it would {what}.")
                received += data
                if len(received) > 65536:
                    raise EngineError(f"The engine's answer to {what} has oversized headers.")
        except OSError as exc:
            sock.close()
            raise _unreachable(self._endpoint, exc) from exc
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

    # -- build steps ------------------------------------------------------------

    def put_archive(self, container_id: str, path: str, tar_bytes: bytes) -> None:
        """Unpack a tar into the container's root filesystem (no host path involved)."""
        self._call(
            "PUT",
            f"/containers/{container_id}/archive",
            query={"path": path},
            raw_body=tar_bytes,
            content_type="application/x-tar",
            timeout_s=300.0,
        )

    def exec_create(self, container_id: str, argv: list[str], user: str) -> str:
        body = {
            "Cmd": argv,
            "User": user,
            "AttachStdin": False,
            "AttachStdout": True,
            "AttachStderr": True,
            "Tty": False,
        }
        result = self._call("POST", f"/containers/{container_id}/exec", body=body)
        exec_id = result.get("Id") if isinstance(result, dict) else None
        if not isinstance(exec_id, str) or not exec_id:
            raise EngineError(f"The engine made no exec in {container_id[:12]}: {result!r}")
        return exec_id

    def exec_start(self, exec_id: str) -> DockerAttachStream:
        path = self._path(f"/exec/{exec_id}/start", None, versioned=True)
        body = json.dumps({"Detach": False, "Tty": False}).encode()
        return self._hijack(path, body, f"start exec {exec_id[:12]}")

    def exec_exit_code(self, exec_id: str) -> int | None:
        result = self._call("GET", f"/exec/{exec_id}/json")
        code = result.get("ExitCode") if isinstance(result, dict) else None
        running = result.get("Running") if isinstance(result, dict) else None
        return code if isinstance(code, int) and running is False else None

    def connect_network(self, network: str, container_id: str) -> None:
        self._call(
            "POST", f"/networks/{network}/connect", body={"Container": container_id}, ok=(200,)
        )

    def disconnect_network(self, network: str, container_id: str) -> None:
        self._call(
            "POST",
            f"/networks/{network}/disconnect",
            body={"Container": container_id, "Force": True},
            ok=(200,),
        )

    def commit(self, container_id: str, repo: str, tag: str, config: JSONObject) -> str:
        """A new image from the container's filesystem, with exactly `config` (labels too)."""
        result = self._call(
            "POST",
            "/commit",
            query={"container": container_id, "repo": repo, "tag": tag, "pause": "1"},
            body=config,
            timeout_s=1800.0,
        )
        image_id = result.get("Id") if isinstance(result, dict) else None
        if not isinstance(image_id, str) or not image_id.startswith("sha256:"):
            raise EngineError(f"The engine's commit returned no image ID: {result!r}")
        return image_id

    def tag_image(self, reference: str, repo: str, tag: str) -> None:
        self._call(
            "POST",
            f"/images/{urllib.parse.quote(reference, safe='')}/tag",
            query={"repo": repo, "tag": tag},
            ok=(200, 201),
        )

    def _stream_events(self, what: str, raw: bytes) -> list[JSONObject]:
        """The engine's JSON progress stream; an `error` event is an engine error."""
        events: list[JSONObject] = []
        for line in raw.splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if not isinstance(event, dict):
                continue
            if event.get("error") or event.get("errorDetail"):
                detail = event.get("errorDetail") or {}
                message = event.get("error") or detail.get("message") or event
                raise EngineAPIError(
                    f"The engine failed to {what}: {message}",
                    status=200,
                    engine_message=str(message),
                )
            events.append(event)
        return events

    # An empty credential: pybox pushes and pulls only where no login is needed.
    _NO_AUTH = {"X-Registry-Auth": base64.urlsafe_b64encode(b"{}").decode()}

    def _registry_events(
        self, what: str, path: str, query: Mapping[str, str]
    ) -> tuple[list[JSONObject], bytes]:
        """A push or pull: refused outright, or a stream of progress events."""
        status, raw = self._request(
            "POST", path, query=query, extra_headers=self._NO_AUTH, timeout_s=1800.0
        )
        if status != 200:
            message = _engine_message(raw)
            raise EngineAPIError(
                f"The engine could not {what} (HTTP {status}): {message}",
                status=status,
                engine_message=message,
            )
        return self._stream_events(what, raw), raw

    def push_image(self, repo: str, tag: str) -> str:
        """Push `repo:tag`; the registry's manifest digest."""
        events, raw = self._registry_events(
            f"push {repo}:{tag}",
            f"/images/{urllib.parse.quote(repo, safe='')}/push",
            {"tag": tag},
        )
        for event in events:
            aux = event.get("aux")
            if isinstance(aux, dict) and isinstance(aux.get("Digest"), str):
                return str(aux["Digest"])
        raise EngineError(f"The push of {repo}:{tag} reported no digest: {raw[-300:]!r}")

    def pull_image(self, repo: str, digest: str, platform: str) -> None:
        """Pull exactly `repo@digest` for `platform`; the engine checks the content hash."""
        self._registry_events(
            f"pull {repo}@{digest}",
            "/images/create",
            {"fromImage": repo, "tag": digest, "platform": platform},
        )

    # -- images ---------------------------------------------------------------

    def inspect_image(self, reference: str) -> JSONObject | None:
        result: JSONObject | None = self._call(
            "GET", f"/images/{urllib.parse.quote(reference, safe='')}/json", missing_ok=True
        )
        return result

    def import_image(
        self, tar_chunks: Iterable[bytes], repo: str, tag: str, changes: list[str]
    ) -> str:
        query = [("fromSrc", "-"), ("repo", repo), ("tag", tag)]
        query += [("changes", change) for change in changes]
        status, raw = self._request(
            "POST",
            "/images/create",
            query=query,
            stream_body=tar_chunks,
            content_type="application/x-tar",
            timeout_s=1800.0,
        )
        if status != 200:
            message = _engine_message(raw)
            raise EngineAPIError(
                f"The engine refused the image import (HTTP {status}): {message}",
                status=status,
                engine_message=message,
            )
        # The answer is a stream of JSON progress objects; the last names the image.
        image_id = ""
        for line in raw.splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict):
                if event.get("error"):
                    raise EngineError(f"The engine failed to import the image: {event['error']}")
                status_text = event.get("status")
                if isinstance(status_text, str) and status_text.startswith("sha256:"):
                    image_id = status_text
        if not image_id:
            raise EngineError(f"The image import returned no image ID: {raw[:300]!r}")
        return image_id

    def remove_image(self, reference: str) -> bool:
        """Remove one image reference. Untagged parent images are kept: they may be
        someone else's (a committed image's parent is the image it was built on)."""
        status, raw = self._request(
            "DELETE", f"/images/{urllib.parse.quote(reference, safe='')}", query={"noprune": "1"}
        )
        if status == 200:
            return True
        if status == 404:
            return False
        message = _engine_message(raw)
        raise EngineAPIError(
            f"The engine refused to remove image {reference} (HTTP {status}): {message}",
            status=status,
            engine_message=message,
        )
