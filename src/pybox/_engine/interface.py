"""What pybox needs from an engine, split by who needs it.

`BoxEngine` is what running a box needs (lifecycle, pool, sweep, verify);
`ImageEngine` is what building, checking and moving images needs. `Engine`
is both: `DockerEngine` implements it, and the unit tests' fake does too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol, runtime_checkable

from pybox._core.seal import BoxFacts, BoxSpec, SealTranslation
from pybox._engine.endpoint import EngineEndpoint

JSONObject = dict[str, Any]

# The most of a container's files `get_archive` reads unless told otherwise.
ARCHIVE_MAX_BYTES = 64 * 1024 * 1024


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


class BoxEngine(Protocol):
    """Creating, checking, running, watching and removing boxes."""

    @property
    def name(self) -> str:
        """pybox's name for the engine ("docker", "podman"): receipts and doctor show it."""
        ...

    @property
    def endpoint(self) -> EngineEndpoint: ...

    @property
    def seal(self) -> SealTranslation:
        """This backend's translations of a sealed box: its create request, its read-back."""
        ...

    @property
    def stdin_keeper(self) -> bool:
        """A sandbox's stdin is held open by a keeper process (Podman), which may end."""
        ...

    @property
    def commit_how(self) -> str:
        """How a commit is made when not as the engine's own layer ("" when it is)."""
        ...

    @property
    def api_version(self) -> str: ...

    @property
    def server_version(self) -> str: ...

    def version(self) -> JSONObject: ...

    def info(self) -> JSONObject: ...

    def create_box(self, name: str, spec: BoxSpec) -> str:
        """Create a sealed box from its spec, through this backend's translation."""
        ...

    def box_facts(self, container_id: str) -> BoxFacts | None:
        """What the engine says the box is, for `check` (None: no such box)."""
        ...

    def create_container(self, name: str, body: JSONObject) -> str: ...

    def inspect_container(self, container_id: str) -> JSONObject | None: ...

    def attach(self, container_id: str) -> AttachStream: ...

    def start_container(self, container_id: str) -> None: ...

    def kill_container(self, container_id: str, signal: str = "KILL") -> bool: ...

    def wait_container(self, container_id: str, timeout_s: float) -> int: ...

    def remove_container(self, container_id: str) -> bool: ...

    def list_containers(self, labels: Mapping[str, str | None]) -> list[JSONObject]: ...

    def inspect_image(self, reference: str) -> JSONObject | None: ...

    def cgroup_path(self, container_id: str) -> str | None:
        """Where a started box's cgroup is, when the engine says (None: it does not)."""
        ...


class _MakesContainers(Protocol):
    @property
    def seal(self) -> SealTranslation: ...

    def create_container(self, name: str, body: JSONObject) -> str: ...

    def inspect_container(self, container_id: str) -> JSONObject | None: ...


class SealedBoxes:
    """The box verbs over an engine's own create and inspect: each backend's
    translations (`seal`) say what the box is in its terms, and what came back."""

    def create_box(self: _MakesContainers, name: str, spec: BoxSpec) -> str:
        return self.create_container(name, self.seal.create_request(spec))

    def box_facts(self: _MakesContainers, container_id: str) -> BoxFacts | None:
        answer = self.inspect_container(container_id)
        return None if answer is None else BoxFacts(self.seal, answer)


class ImageEngine(Protocol):
    """Building images in a build box, and importing, tagging and moving them."""

    def inspect_image(self, reference: str) -> JSONObject | None: ...

    def import_image(
        self, tar_chunks: Iterable[bytes], repo: str, tag: str, changes: list[str]
    ) -> str: ...

    def remove_image(self, reference: str) -> bool: ...

    def put_archive(self, container_id: str, path: str, tar_bytes: bytes) -> None: ...

    def get_archive(
        self,
        container_id: str,
        path: str,
        *,
        max_bytes: int = ARCHIVE_MAX_BYTES,
        timeout_s: float = 300.0,
    ) -> bytes:
        """A tar of `path` in the container; `EngineAnswerTooLarge` past `max_bytes`."""
        ...

    def exec_create(self, container_id: str, argv: list[str], user: str) -> str: ...

    def exec_start(self, exec_id: str) -> AttachStream: ...

    def exec_exit_code(self, exec_id: str) -> int | None: ...

    def connect_network(self, network: str, container_id: str) -> None: ...

    def disconnect_network(self, network: str, container_id: str) -> None: ...

    def commit(self, container_id: str, repo: str, tag: str, config: JSONObject) -> str: ...

    def tag_image(self, reference: str, repo: str, tag: str) -> None: ...

    def push_image(self, repo: str, tag: str) -> str: ...

    def pull_image(self, repo: str, digest: str, platform: str) -> None: ...


class Engine(BoxEngine, ImageEngine, Protocol):
    """Everything: what a `Session` holds."""


@runtime_checkable
class NetworkEngine(Protocol):
    """What egress needs besides running boxes (`pybox._engine.networks`)."""

    def create_network(self, name: str, body: JSONObject) -> str: ...

    def inspect_network(self, network: str) -> JSONObject | None: ...

    def remove_network(self, network: str) -> bool: ...

    def list_networks(self, labels: Mapping[str, str | None]) -> list[JSONObject]: ...

    def connect_network(self, network: str, container_id: str) -> None: ...

    def container_stdout(self, container_id: str, since_epoch: int = 0) -> bytes: ...
