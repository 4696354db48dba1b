"""A fake container engine implementing pybox's `Engine` protocol, in memory.

It keeps containers the way the Docker Engine reports them (create body in,
inspect document out) and plays the in-box bootstrap's side of the wire
protocol from a script, so the lifecycle can be tested without an engine.
"""

from __future__ import annotations

import copy
import json
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pybox._adapters.confinement import host_apparmor
from pybox._core import wire
from pybox._core.errors import EngineAnswerTooLarge, EngineAPIError, EngineError
from pybox._core.seal import REQUIRED_MASKED_PATHS, REQUIRED_READONLY_PATHS, SealTranslation
from pybox._engine import EngineEndpoint, JSONObject
from pybox._engine.docker_seal import DOCKER_SEAL
from pybox._engine.interface import ARCHIVE_MAX_BYTES, SealedBoxes
from pybox._inbox import bootstrap_source

_BOOTSTRAP: dict[str, Any] = {"__name__": "pybox_bootstrap_under_test"}
exec(compile(bootstrap_source(), "bootstrap.py", "exec"), _BOOTSTRAP)
# The fake box reads the header with the bootstrap's own parser.
parse_header: Callable[[bytes], dict[str, Any]] = _BOOTSTRAP["parse_header"]
check_kernel_status: Callable[[Any, dict[str, str]], None] = _BOOTSTRAP["check_kernel_status"]


# The stdlib image the unit tests' state records, as the engine would show it.
TEST_IMAGE_ID = "sha256:" + "12" * 32
TEST_RECIPE_HASH = "sha256:" + "34" * 32


def labelled_image(image_id: str, name: str, recipe_hash: str) -> JSONObject:
    """How the engine shows an image pybox made."""
    labels = {"io.pybox.image": name, "io.pybox.recipe": recipe_hash}
    return {"Id": image_id, "Config": {"Labels": labels}}


@dataclass
class Script:
    """What the fake box does once it has received its payload."""

    stdout: bytes = b""
    stderr: bytes = b""
    exit_code: int = 0
    files: list[tuple[str, bytes]] = field(default_factory=list)
    hang: bool = False  # never exits by itself: only a kill ends it
    oom_killed: bool = False  # the engine reports OOMKilled
    vanish: bool = False  # the box ends without an exit report
    bootstrap_error: str | None = None
    raw: bytes | None = None  # exact bytes from the box instead of the above
    # Protocol 2: the bootstrap's exit report for a program it did not start (a full
    # workspace), instead of the above; the box stays for the next one.
    refused: dict[str, Any] | None = None
    backstop: bool = False
    # Exact bytes the box sends after its exit report, instead of files and files-done.
    after_exit: bytes | None = None
    # After its exit report the box never ends by itself, and the engine's wait
    # times out: a box still returning files when pybox gives up on it.
    stuck_after_exit: bool = False
    # /proc/self/status of the box's PID 1, as a runc box under pybox's seccomp
    # filter and no-new-privileges reports it.
    kernel_status: dict[str, str] = field(
        default_factory=lambda: {"Seccomp": "2", "NoNewPrivs": "1"}
    )


def frame(kind: bytes, data: bytes = b"") -> bytes:
    return kind + len(data).to_bytes(4, "big") + data


def json_frame(kind: bytes, value: Mapping[str, Any]) -> bytes:
    return frame(kind, json.dumps(value).encode())


@dataclass
class FakeContainer:
    container_id: str
    name: str
    body: JSONObject
    state: str = "created"
    exit_code: int = 0
    oom_killed: bool = False
    payload: bytearray = field(default_factory=bytearray)
    header: dict[str, Any] | None = None
    acked: bool = False
    killed: bool = False
    stuck: bool = False  # running after its exit report until killed or removed
    files: bytes = b""  # the code and the inputs, as sent


class FakeAttach:
    def __init__(self, engine: FakeEngine, container: FakeContainer) -> None:
        self.engine = engine
        self.container = container
        self.outgoing: deque[tuple[int, bytes]] = deque()
        self.ended = False
        self.closed = False
        self.started = False
        self.script = engine.script
        self.programs = 0  # payloads received (protocol 2 takes several)
        self.exited = False  # the current program has reported its exit
        self.stops = 0

    # The engine side.
    def _emit(self, data: bytes, source: int = 1) -> None:
        # Split into uneven chunks, as a real stream may arrive.
        for start in range(0, len(data), 7000):
            self.outgoing.append((source, data[start : start + 7000]))

    def _report(self, kind: bytes, value: Mapping[str, Any]) -> None:
        """A report of the run, with the run's token from its header, as PID 1 sends it."""
        token = (self.container.header or {}).get("token")
        self._emit(json_frame(kind, {**value, "token": token} if token else value))

    def _tokened(self, data: bytes) -> bytes:
        """A test's own frames with the run's token put in each report, as PID 1
        would; bytes that are not whole frames pass as they are."""
        token = (self.container.header or {}).get("token")
        out, rest = bytearray(), memoryview(data)
        while token and len(rest) >= 5:
            kind, size = bytes(rest[:1]), int.from_bytes(rest[1:5], "big")
            if len(rest) < 5 + size:
                break
            payload = bytes(rest[5 : 5 + size])
            if kind in (wire.K_STARTED, wire.K_EXIT, wire.K_FILES_DONE, wire.K_FILE, wire.K_ERROR):
                try:
                    value = json.loads(payload)
                except ValueError:
                    value = None
                if isinstance(value, dict):
                    payload = json.dumps({"token": token, **value}).encode()
            out += frame(kind, payload)
            rest = rest[5 + size :]
        return bytes(out) + bytes(rest)

    @property
    def protocol(self) -> int:
        """The bootstrap protocol the box was created with (its entrypoint says)."""
        entrypoint = self.container.body.get("Entrypoint") or []
        return int(entrypoint[-2]) if len(entrypoint) >= 2 else 1

    def _ready(self) -> None:
        ready = {
            "version": self.protocol,
            "pid": 1,
            "uid": 1000,
            "status": dict(self.script.kernel_status),
        }
        self._emit(json_frame(wire.K_READY, ready))

    def on_start(self) -> None:
        self.started = True
        self._ready()

    def _payload_complete(self) -> bool:
        data = bytes(self.container.payload)
        if len(data) < 8:
            return False
        size = int.from_bytes(data[4:8], "big")
        if len(data) < 8 + size:
            return False
        header = parse_header(data[8 : 8 + size])
        need = (
            header["code_size"]
            + sum(item["size"] for item in header["inputs"])
            + header["stdin_size"]
        )
        if len(data) < 8 + size + need:
            return False
        self.container.header = header
        self.container.files = data[8 + size : 8 + size + need]
        return True

    def _play(self) -> None:
        if self.engine.script_for is not None:
            self.script = self.engine.script_for(self.container.files)
        elif self.protocol == wire.MANY_PROGRAMS:
            self.script = self.engine.script  # each program plays the script of its time
        script = self.script
        if script.refused is not None and self.protocol == wire.MANY_PROGRAMS:
            self.exited = True
            self._report(wire.K_EXIT, script.refused)
            return
        if script.raw is not None:
            self._emit(self._tokened(script.raw))
            self._end(script.exit_code)
            return
        bootstrap_error = script.bootstrap_error
        try:  # the real bootstrap's own check, before it hands the code over
            check_kernel_status(
                (self.container.header or {}).get("require_status", ()), script.kernel_status
            )
        except ValueError as exc:
            bootstrap_error = f"ValueError: {exc}"
        if bootstrap_error is not None:
            self._report(wire.K_ERROR, {"message": bootstrap_error})
            self._end(125)
            return
        self._report(wire.K_STARTED, {})
        for start in range(0, len(script.stdout), wire.CHUNK):
            self._emit(frame(wire.K_STDOUT, script.stdout[start : start + wire.CHUNK]))
        for start in range(0, len(script.stderr), wire.CHUNK):
            self._emit(frame(wire.K_STDERR, script.stderr[start : start + wire.CHUNK]))
        if script.hang:
            return
        if script.vanish:
            self.container.oom_killed = script.oom_killed
            self._end(script.exit_code)
            return
        assert self.container.header is not None
        self.exited = True
        report: dict[str, Any] = {"exit_code": script.exit_code, "backstop": script.backstop}
        if self.protocol == wire.MANY_PROGRAMS:
            report["stopped"] = False
        self._report(wire.K_EXIT, report)
        if script.after_exit is not None:
            self._emit(self._tokened(script.after_exit))
        elif self.container.header["collect_outputs"] and not script.backstop:
            for path, content in script.files:
                self._report(wire.K_FILE, {"path": path, "size": len(content)})
                for start in range(0, len(content), wire.CHUNK):
                    self._emit(frame(wire.K_DATA, content[start : start + wire.CHUNK]))
            self._report(wire.K_FILES_DONE, {"files_sent": len(script.files), "files_skipped": []})
        self.container.oom_killed = script.oom_killed
        self.container.stuck = script.stuck_after_exit

    def _end(self, exit_code: int) -> None:
        # With `late_exit`, the engine records the end only once someone waits for it.
        self.container.state = "running" if self.engine.late_exit else "exited"
        self.container.exit_code = exit_code
        self.ended = True

    # The AttachStream protocol.
    def send(self, data: bytes) -> None:
        many = self.protocol == wire.MANY_PROGRAMS
        if self.container.header is None:
            self.container.payload += data
            if self._payload_complete():
                self.programs += 1
                self.exited = False
                self._play()
        elif many and data == wire.STOP and not self.exited and not self.ended:
            # As the bootstrap does: end the program, report it stopped, no files.
            self.stops += 1
            if self.engine.ignore_stop:
                return
            self.exited = True
            report = {"exit_code": -9, "backstop": False, "stopped": True}
            self._report(wire.K_EXIT, report)
        elif data == wire.ACK and many:
            # The next program may come: the box is clear and ready again.
            self.container.acked = True
            self.container.header = None
            self.container.payload = bytearray()
            self._ready()
        elif data == wire.ACK:
            if self.engine.closes_attach_on_exit and not many:
                # The bootstrap stopped waiting for the ACK and ended; Podman closed
                # the attach connection with it (a controller that was frozen).
                self._end(self.script.exit_code)
                raise EngineError("Lost the attach connection to the box while sending: EPIPE")
            self.container.acked = True
            if not self.container.stuck:
                self._end(self.script.exit_code)

    def read(self, timeout_s: float) -> tuple[int, bytes] | None:
        hook = self.engine.on_read
        if hook is not None:
            hook()
        if self.outgoing:
            return self.outgoing.popleft()
        if self.ended or self.container.killed:
            return (0, b"")
        time.sleep(min(max(timeout_s, 0.0), 0.01))
        return None

    def fileno(self) -> int:
        return -1

    def has_pending(self) -> bool:
        return bool(self.outgoing) or self.ended or self.container.killed

    def close(self) -> None:
        self.closed = True


class FakeExecStream:
    """An exec's output, already complete."""

    def __init__(self, output: bytes) -> None:
        self.chunks: deque[tuple[int, bytes]] = deque([(1, output)] if output else [])

    def send(self, data: bytes) -> None:
        raise AssertionError("build steps send nothing")

    def read(self, timeout_s: float) -> tuple[int, bytes] | None:
        return self.chunks.popleft() if self.chunks else (0, b"")

    def fileno(self) -> int:
        return -1

    def has_pending(self) -> bool:
        return True

    def close(self) -> None:
        pass


# What an exec prints and returns, given its argv; the default succeeds silently.
ExecScript = Callable[[list[str]], tuple[int, bytes]]


class FakeEngine(SealedBoxes):
    """In-memory engine. `calls` records every operation in order."""

    name = "docker"
    seal: SealTranslation = DOCKER_SEAL
    stdin_keeper = False
    commit_how = ""

    def __init__(self, script: Script | None = None) -> None:
        self.script = script or Script()
        # Chooses the box's behaviour from what it was sent (code and inputs), if set.
        self.script_for: Callable[[bytes], Script] | None = None
        self.containers: dict[str, FakeContainer] = {}
        self.calls: list[tuple[str, str]] = []
        self.attachments: list[FakeAttach] = []
        self.tamper: Callable[[JSONObject], None] | None = None
        self.fail: dict[str, Exception] = {}
        self.on_read: Callable[[], None] | None = None
        self.images: dict[str, JSONObject] = {
            TEST_IMAGE_ID: labelled_image(TEST_IMAGE_ID, "stdlib", TEST_RECIPE_HASH)
        }
        self.ncpu = 2
        # GET /info `Runtimes` (tests register gVisor here).
        self.runtimes: dict[str, Any] = {"runc": {"path": "runc"}}
        # Like a real engine on this machine: AppArmor where the kernel has it.
        self.apparmor = host_apparmor()[0] is True
        self.security_options = ["name=seccomp,profile=default"]
        self.late_exit = False
        self.ignore_stop = False  # a protocol-2 box whose bootstrap ignores STOP
        # As Podman: the attach connection is closed once the box has ended.
        self.closes_attach_on_exit = False
        self._next = 0
        self.exec_script: ExecScript = lambda argv: (0, b"")
        self.execs: dict[str, tuple[str, list[str], int, bytes]] = {}
        self.networks: dict[str, set[str]] = {}
        self.archives: list[tuple[str, str, bytes]] = []
        # What get_archive answers for a path (a tar), in any container.
        self.archives_out: dict[str, bytes] = {}
        self.registry: dict[str, JSONObject] = {}

    @property
    def endpoint(self) -> EngineEndpoint:
        return EngineEndpoint("/fake/docker.sock", "a test")

    @property
    def api_version(self) -> str:
        return "1.41"

    @property
    def server_version(self) -> str:
        return "fake-1.0"

    def _call(self, name: str, target: str = "") -> None:
        self.calls.append((name, target))
        if name in self.fail:
            raise self.fail[name]

    def _find(self, ref: str) -> FakeContainer | None:
        if ref in self.containers:
            return self.containers[ref]
        for container in self.containers.values():
            if container.name == ref:
                return container
        return None

    def version(self) -> JSONObject:
        self._call("version")
        return {"Version": "fake-1.0", "ApiVersion": "1.41"}

    def info(self) -> JSONObject:
        self._call("info")
        return {
            "NCPU": self.ncpu,
            "Runtimes": self.runtimes,
            "CgroupVersion": "1",
            "CgroupDriver": "cgroupfs",
            "SecurityOptions": self.security_options + ["name=apparmor"] * self.apparmor,
        }

    def create_container(self, name: str, body: JSONObject) -> str:
        self._call("create", name)
        if self._find(name) is not None:
            raise EngineAPIError("conflict", status=409, engine_message="name in use")
        self._next += 1
        container_id = f"{self._next:064x}"
        self.containers[container_id] = FakeContainer(container_id, name, copy.deepcopy(body))
        mode = body.get("HostConfig", {}).get("NetworkMode")
        self.networks[container_id] = {mode} if mode == "bridge" else set()
        return container_id

    def cgroup_path(self, container_id: str) -> str | None:
        return None

    def inspect_container(self, container_id: str) -> JSONObject | None:
        self._call("inspect", container_id)
        container = self._find(container_id)
        if container is None:
            return None
        body = copy.deepcopy(container.body)
        host = body.pop("HostConfig", {})
        host.setdefault("MaskedPaths", list(REQUIRED_MASKED_PATHS))
        host.setdefault("ReadonlyPaths", list(REQUIRED_READONLY_PATHS))
        if "RestartPolicy" in host:
            host["RestartPolicy"] = {**host["RestartPolicy"], "MaximumRetryCount": 0}
        image = body.pop("Image", None)
        document: JSONObject = {
            "Id": container.container_id,
            "Name": "/" + container.name,
            "Created": "2026-01-01T00:00:00Z",
            "Image": image,
            "Config": body,
            "HostConfig": host,
            "Mounts": [],
            "HostsPath": "",
            "AppArmorProfile": "docker-default" if self.apparmor else "",
            "NetworkSettings": {
                "Networks": {n: {} for n in self.networks.get(container.container_id, set())}
            },
            "ResolvConfPath": "",
            "State": {
                "Status": container.state,
                "Running": container.state == "running",
                "ExitCode": container.exit_code,
                "OOMKilled": container.oom_killed,
                "StartedAt": "2026-01-01T00:00:01Z",
                "FinishedAt": "2026-01-01T00:00:02Z",
            },
        }
        if self.tamper is not None and container.state == "created":
            self.tamper(document)
        return document

    def attach(self, container_id: str) -> FakeAttach:
        self._call("attach", container_id)
        container = self.containers[container_id]
        attach = FakeAttach(self, container)
        self.attachments.append(attach)
        return attach

    def start_container(self, container_id: str) -> None:
        self._call("start", container_id)
        container = self.containers[container_id]
        container.state = "running"
        for attach in self.attachments:
            if attach.container is container:
                attach.on_start()

    def kill_container(self, container_id: str, signal: str = "KILL") -> bool:
        self._call("kill", container_id)
        container = self._find(container_id)
        if container is None or container.state != "running":
            return False
        container.killed = True
        container.state = "exited"
        container.exit_code = 137
        return True

    def wait_container(self, container_id: str, timeout_s: float) -> int:
        self._call("wait", container_id)
        container = self.containers[container_id]
        if container.stuck:
            raise EngineError(
                f"The engine did not answer POST /containers/{container_id}/wait within "
                f"{timeout_s:g} s."
            )
        container.state = "exited"
        return container.exit_code

    def remove_container(self, container_id: str) -> bool:
        self._call("remove", container_id)
        return self.containers.pop(container_id, None) is not None

    def list_containers(self, labels: Mapping[str, str | None]) -> list[JSONObject]:
        self._call("list")
        found = []
        for container in self.containers.values():
            container_labels = container.body.get("Labels", {})
            if all(
                key in container_labels and (value is None or container_labels[key] == value)
                for key, value in labels.items()
            ):
                found.append(
                    {
                        "Id": container.container_id,
                        "Names": ["/" + container.name],
                        "Labels": container_labels,
                        "State": container.state,
                    }
                )
        return found

    def inspect_image(self, reference: str) -> JSONObject | None:
        self._call("inspect_image", reference)
        return self.images.get(reference)

    def import_image(
        self, tar_chunks: Iterable[bytes], repo: str, tag: str, changes: list[str]
    ) -> str:
        self._call("import_image", f"{repo}:{tag}")
        image_id = "sha256:" + "ab" * 32
        self.images[image_id] = {"Id": image_id}
        return image_id

    def remove_image(self, reference: str) -> bool:
        self._call("remove_image", reference)
        image = self.images.pop(reference, None)
        if image is not None and reference in image.get("RepoTags", []):
            image["RepoTags"].remove(reference)
            if not image["RepoTags"] and not image.get("RepoDigests"):
                # Like the engine: the last reference gone, the image goes.
                self.images.pop(str(image["Id"]), None)
        return image is not None

    def names(self, operation: str) -> list[str]:
        return [target for name, target in self.calls if name == operation]

    # -- building and moving images -----------------------------------------------

    def put_archive(self, container_id: str, path: str, tar_bytes: bytes) -> None:
        self._call("put_archive", container_id)
        self.archives.append((container_id, path, tar_bytes))

    def get_archive(
        self,
        container_id: str,
        path: str,
        *,
        max_bytes: int = ARCHIVE_MAX_BYTES,
        timeout_s: float = 300.0,
    ) -> bytes:
        self._call("get_archive", path)
        if container_id not in self.containers or path not in self.archives_out:
            raise EngineAPIError(
                f"The engine refused to read {path} (HTTP 404): no such file",
                status=404,
                engine_message="Could not find the file",
            )
        data = self.archives_out[path]
        if len(data) > max_bytes:
            raise EngineAnswerTooLarge(
                f"The engine's answer to GET /containers/{container_id}/archive is larger "
                f"than {max_bytes} bytes, the most pybox reads of it; it was not read.",
                limit_bytes=max_bytes,
            )
        return data

    def exec_create(self, container_id: str, argv: list[str], user: str) -> str:
        self._call("exec", " ".join(argv))
        code, output = self.exec_script(argv)
        exec_id = f"exec{len(self.execs)}"
        self.execs[exec_id] = (container_id, list(argv), code, output)
        self.calls.append(("exec_networks", ",".join(sorted(self.networks[container_id]))))
        return exec_id

    def exec_start(self, exec_id: str) -> FakeExecStream:
        return FakeExecStream(self.execs[exec_id][3])

    def exec_exit_code(self, exec_id: str) -> int | None:
        return self.execs[exec_id][2]

    def connect_network(self, network: str, container_id: str) -> None:
        self._call("connect", network)
        self.networks[container_id].add(network)

    def disconnect_network(self, network: str, container_id: str) -> None:
        self._call("disconnect", network)
        self.networks[container_id].discard(network)

    def commit(self, container_id: str, repo: str, tag: str, config: JSONObject) -> str:
        self._call("commit", f"{repo}:{tag}")
        # A new ID for every commit, as the engine's (content hashes that differ).
        self.commit_count = getattr(self, "commit_count", 0) + 1
        image_id = "sha256:" + f"{0x80 + self.commit_count:02x}" * 32
        image = {"Id": image_id, "Config": copy.deepcopy(config), "RepoTags": [f"{repo}:{tag}"]}
        self.images[image_id] = image
        self.images[f"{repo}:{tag}"] = image
        return image_id

    def tag_image(self, reference: str, repo: str, tag: str) -> None:
        self._call("tag", f"{repo}:{tag}")
        image = self.images[reference]
        image.setdefault("RepoTags", []).append(f"{repo}:{tag}")
        self.images[f"{repo}:{tag}"] = image

    def push_image(self, repo: str, tag: str) -> str:
        self._call("push", f"{repo}:{tag}")
        digest = "sha256:" + "cd" * 32
        self.registry[f"{repo}@{digest}"] = self.images[f"{repo}:{tag}"]
        return digest

    def pull_image(self, repo: str, digest: str, platform: str) -> None:
        self._call("pull", f"{repo}@{digest}")
        reference = f"{repo}@{digest}"
        if reference not in self.registry:
            raise EngineAPIError("manifest unknown", status=404, engine_message="manifest unknown")
        image = {**self.registry[reference], "RepoDigests": [reference]}
        image.update({"Os": "linux", "Architecture": "amd64"})
        self.images[reference] = image
        self.images[str(image["Id"])] = image
