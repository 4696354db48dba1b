"""`DockerEngine`: the Docker Engine API calls pybox makes (and compatible engines')."""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Iterable, Mapping
from typing import Any

from pybox._core.errors import EngineAPIError, EngineError
from pybox._core.seal import SealTranslation
from pybox._engine.docker_seal import DOCKER_SEAL
from pybox._engine.interface import ARCHIVE_MAX_BYTES, JSONObject, SealedBoxes
from pybox._engine.networks import NetworkCalls
from pybox._engine.plumbing import NO_AUTH
from pybox._engine.stream import DockerAttachStream


class DockerEngine(NetworkCalls, SealedBoxes):
    """Implements `Engine`: one method per Engine API call."""

    # pybox's name for the engine (receipts, doctor); PodmanEngine says "podman".
    name = "docker"
    # Its translations of a sealed box (pybox._core.seal): PodmanEngine has its own.
    seal: SealTranslation = DOCKER_SEAL
    stdin_keeper = False
    commit_how = ""

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
        container_id = self._field(result, "Id")
        if not isinstance(container_id, str) or not container_id:
            raise EngineError(f"The engine created {name} but returned no container ID: {result!r}")
        return container_id

    def inspect_container(self, container_id: str) -> JSONObject | None:
        result: JSONObject | None = self._call(
            "GET", f"/containers/{container_id}/json", answers={404: None}
        )
        return result

    def cgroup_path(self, container_id: str) -> str | None:
        """Docker's answers name no cgroup path: the sampler looks in its usual layouts."""
        return None

    @staticmethod
    def box_files(container_id: str, hostname: str) -> dict[str, tuple[str, str]]:
        """The files the engine writes for each box and binds read-only into it:
        mount point -> how the bound file's path ends, and what it must hold."""
        return {"/etc/hostname": (f"/{container_id}/hostname", f"read {hostname}\n")}

    def start_container(self, container_id: str) -> None:
        self._call("POST", f"/containers/{container_id}/start", ok=(204, 304))

    def kill_container(self, container_id: str, signal: str = "KILL") -> bool:
        """Send `signal`; False when the box was already stopped or gone."""
        result = self._call(
            "POST",
            f"/containers/{container_id}/kill",
            what=f"to kill {container_id[:12]}",
            query={"signal": signal},
            ok=(200, 204),
            answers={404: False, 409: False},
            parse=False,
        )
        return result is not False

    def wait_container(self, container_id: str, timeout_s: float) -> int:
        result = self._call(
            "POST",
            f"/containers/{container_id}/wait",
            query={"condition": "not-running"},
            timeout_s=timeout_s,
        )
        code = self._field(result, "StatusCode")
        if not isinstance(code, int):
            raise EngineError(f"The engine's wait answer has no exit code: {result!r}")
        return code

    def remove_container(self, container_id: str) -> bool:
        """Force-remove the box; False when the engine says it does not exist."""
        try:
            result = self._call(
                "DELETE",
                f"/containers/{container_id}",
                what=f"to remove {container_id[:12]}",
                query={"force": "1", "v": "1"},
                ok=(200, 204),
                answers={404: False},
                parse=False,
            )
        except EngineAPIError as exc:
            # Another remover got there first: the box is going, which is what we asked.
            if exc.status == 409 and "already in progress" in exc.engine_message:
                return True
            raise
        return result is not False

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

    def get_archive(
        self,
        container_id: str,
        path: str,
        *,
        max_bytes: int = ARCHIVE_MAX_BYTES,
        timeout_s: float = 300.0,
    ) -> bytes:
        """A tar of `path` in the container, as the engine packs it; an answer longer
        than `max_bytes` is refused unread (`EngineAnswerTooLarge`)."""
        result: bytes = self._call(
            "GET",
            f"/containers/{container_id}/archive",
            what=f"to read {path} out of {container_id[:12]}",
            query={"path": path},
            ok=(200,),
            parse=False,
            timeout_s=timeout_s,
            max_body_bytes=max_bytes,
        )
        return result

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
        exec_id = self._field(result, "Id")
        if not isinstance(exec_id, str) or not exec_id:
            raise EngineError(f"The engine made no exec in {container_id[:12]}: {result!r}")
        return exec_id

    def exec_start(self, exec_id: str) -> DockerAttachStream:
        path = self._path(f"/exec/{exec_id}/start", None, versioned=True)
        body = json.dumps({"Detach": False, "Tty": False}).encode()
        return self._hijack(path, body, f"start exec {exec_id[:12]}")

    def exec_exit_code(self, exec_id: str) -> int | None:
        result = self._call("GET", f"/exec/{exec_id}/json")
        code = self._field(result, "ExitCode")
        running = self._field(result, "Running")
        return code if isinstance(code, int) and running is False else None

    def connect_network(self, network: str, container_id: str) -> None:
        # The answer is not read: Docker's is empty, Podman's the text "OK".
        self._call(
            "POST",
            f"/networks/{network}/connect",
            body={"Container": container_id},
            ok=(200,),
            parse=False,
        )

    def disconnect_network(self, network: str, container_id: str) -> None:
        self._call(
            "POST",
            f"/networks/{network}/disconnect",
            body={"Container": container_id, "Force": True},
            ok=(200,),
            parse=False,
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
        image_id = self._field(result, "Id")
        if not isinstance(image_id, str) or not image_id.startswith("sha256:"):
            raise EngineError(f"The engine's commit returned no image ID: {result!r}")
        return image_id

    def tag_image(self, reference: str, repo: str, tag: str) -> None:
        # The answer is not read: Docker's is empty, Podman's a bare newline.
        self._call(
            "POST",
            f"/images/{urllib.parse.quote(reference, safe='')}/tag",
            query={"repo": repo, "tag": tag},
            ok=(200, 201),
            parse=False,
        )

    # -- images ---------------------------------------------------------------

    def inspect_image(self, reference: str) -> JSONObject | None:
        result: JSONObject | None = self._call(
            "GET", f"/images/{urllib.parse.quote(reference, safe='')}/json", answers={404: None}
        )
        return result

    def _progress(self, what: str, path: str, **kwargs: Any) -> list[JSONObject]:
        """A long operation answered as a stream of JSON progress events; an
        `error` event in the stream is the engine refusing after all."""
        raw: bytes = self._call(
            "POST", path, what=what, ok=(200,), parse=False, timeout_s=1800.0, **kwargs
        )
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
                    f"The engine failed {what}: {message}", status=200, engine_message=str(message)
                )
            events.append(event)
        if not events:
            raise EngineError(f"The engine reported no progress for {what}: {raw[-300:]!r}")
        return events

    def import_image(
        self, tar_chunks: Iterable[bytes], repo: str, tag: str, changes: list[str]
    ) -> str:
        query = [("fromSrc", "-"), ("repo", repo), ("tag", tag)]
        query += [("changes", change) for change in changes]
        events = self._progress(
            "the image import",
            "/images/create",
            query=query,
            stream_body=tar_chunks,
            content_type="application/x-tar",
        )
        # The last event that names an image is the imported one.
        image_id = ""
        for event in events:
            status_text = event.get("status")
            if isinstance(status_text, str) and status_text.startswith("sha256:"):
                image_id = status_text
        if not image_id:
            raise EngineError(f"The image import returned no image ID: {events[-3:]!r}")
        return image_id

    def remove_image(self, reference: str) -> bool:
        """Remove one image reference. Untagged parent images are kept: they may be
        someone else's (a committed image's parent is the image it was built on)."""
        result = self._call(
            "DELETE",
            f"/images/{urllib.parse.quote(reference, safe='')}",
            what=f"to remove image {reference}",
            query={"noprune": "1"},
            ok=(200,),
            answers={404: False},
            parse=False,
        )
        return result is not False

    def push_image(self, repo: str, tag: str) -> str:
        """Push `repo:tag`; the registry's manifest digest."""
        events = self._progress(
            f"to push {repo}:{tag}",
            f"/images/{urllib.parse.quote(repo, safe='')}/push",
            query={"tag": tag, **self._registry_query(repo)},
            extra_headers=NO_AUTH,
        )
        # Imported here: a run never pushes, and exec's start-up stays small.
        from pybox._engine.registry_calls import pushed_digest

        digest = pushed_digest(events)
        if digest is None:
            raise EngineError(f"The push of {repo}:{tag} reported no digest: {events[-3:]!r}")
        return digest

    def _registry_query(self, repository: str) -> dict[str, str]:
        """What a push or pull to `repository`'s registry adds (Docker: nothing; it
        treats a loopback registry as plain HTTP itself)."""
        return {}

    def pull_image(self, repo: str, digest: str, platform: str) -> None:
        """Pull exactly `repo@digest` for `platform`; the engine checks the content hash."""
        self._progress(
            f"to pull {repo}@{digest}",
            "/images/create",
            query={"fromImage": repo, "tag": digest, "platform": platform},
            extra_headers=NO_AUTH,
        )
