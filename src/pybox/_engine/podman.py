"""`PodmanEngine`: Podman through its Docker-compatible API socket.

Every call is the Docker Engine API's except where Podman's compatible layer
cannot say what pybox asks for:

- create goes through Podman's own API (`specgen`), which expresses the
  private cgroup namespace, no extra writable tmpfs, the seccomp profile (as a
  file on the engine's machine, content-addressed and checked) and explicit
  ulimits;
- inspect answers the compatible document with Podman's own beside it, under
  `"Libpod"`, so the posture can read what only Podman's answer holds (the
  cgroup namespace, the bounding capabilities, the runtime, the cgroup path);
- a commit is an export of the box's filesystem imported with the image's
  configuration as changes (`pybox._engine.podman_commit`): one flat layer;
- a box whose stdin must outlive its creator's connection (a sandbox) gets a
  keeper process that holds one attach connection for the box's lifetime, and
  every attach to it goes through the keeper (`pybox._engine.keeper`).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Mapping
from contextlib import closing
from pathlib import Path
from typing import Any

from pybox._core.egress import INHIBIT_IPV4
from pybox._core.errors import EngineAnswerTooLarge, EngineError
from pybox._core.seal import SealTranslation
from pybox._core.seccomp import profile_sha256
from pybox._engine.client import DockerEngine
from pybox._engine.interface import JSONObject
from pybox._engine.keeper import connect_keeper, start_keeper
from pybox._engine.plumbing import NO_AUTH
from pybox._engine.podman_seal import PODMAN_SEAL
from pybox._engine.specgen import PodmanUnsupported, needs_keeper, specgen
from pybox._engine.stream import DockerAttachStream

# Podman's own API, versioned by Podman's release (4.0.0 or later speaks this form).
LIBPOD = "/v4.0.0/libpod"
LIBPOD_KEY = "Libpod"
ENGINE_NAME = "podman"
# Podman's own states where Docker has one word for the same fact: `stopped` is
# a box whose process has ended (its exit code recorded) before Podman's cleanup
# has unmounted it, `exited` the same box after the cleanup; both are Docker's
# `exited`. Every other state is Docker's word already.
DOCKER_STATES = {"stopped": "exited"}
# Why an egress `packages` network cannot be made on Podman 4.3 (netavark),
# measured here: it answers Docker's bridge options with "is not a recognized
# option" and drops them, and it gives the host the gateway address of every
# bridge network, an internal one too (10.89.0.1 on podman1), with its DNS
# server (aardvark-dns) listening there and named in the box's resolv.conf.
NO_HOSTLESS_NETWORK = (
    "Podman ignores the option and gives the host the network's gateway address, "
    "with its DNS server listening on it, so the box could reach a host service; "
    "egress 'packages' needs Docker"
)

ENABLE_ICC = "com.docker.network.bridge.enable_icc"
NO_BRIDGE_OPTIONS = "Podman ignores Docker's bridge options"


def docker_state(compat: JSONObject) -> JSONObject:
    """The compatible inspect answer with `State.Status` in Docker's words."""
    state = compat.get("State")
    if not isinstance(state, dict):
        return compat
    status = state.get("Status")
    if not isinstance(status, str) or status not in DOCKER_STATES:
        return compat
    return {**compat, "State": {**state, "Status": DOCKER_STATES[status]}}


def profile_dir() -> Path:
    """Where pybox keeps seccomp profiles for a local Podman to read (content-addressed)."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.geteuid() != 0:
        return Path(runtime) / "pybox" / "seccomp"
    return Path.home() / ".cache" / "pybox" / "seccomp"


def _canonical_sha256(text: str) -> str:
    """The profile's digest as the posture names it (`sha256:` cut off)."""
    return profile_sha256(text).removeprefix("sha256:")


def write_profile(profile_json: str, directory: Path | None = None) -> str:
    """The path of a file holding exactly `profile_json` (by its canonical hash),
    written once and checked every time: Podman reads it when the box is created."""
    try:
        digest = _canonical_sha256(profile_json)
    except ValueError:
        raise EngineError("The box's seccomp profile is not JSON; it was not sent.") from None
    folder = directory or profile_dir()
    path = folder / f"seccomp-{digest}.json"
    try:
        if not (path.is_file() and _canonical_sha256(path.read_text("utf-8")) == digest):
            folder.mkdir(parents=True, exist_ok=True, mode=0o755)
            handle, temporary = tempfile.mkstemp(dir=folder, prefix=".seccomp-")
            with os.fdopen(handle, "w", encoding="utf-8") as out:
                out.write(profile_json)
            os.chmod(temporary, 0o644)
            os.replace(temporary, path)
        if _canonical_sha256(path.read_text("utf-8")) != digest:
            raise EngineError(f"The seccomp profile file {path} changed while pybox wrote it.")
    except (OSError, ValueError) as exc:
        raise EngineError(
            f"pybox could not keep its seccomp profile for Podman in {path}: {exc}. "
            f"Make {folder} writable by this user."
        ) from exc
    return str(path)


class PodmanEngine(DockerEngine):
    """The Engine API calls, with create and inspect in Podman's own terms."""

    name = ENGINE_NAME
    seal: SealTranslation = PODMAN_SEAL
    stdin_keeper = True
    commit_how = "export and import: one flat layer"

    def create_network(self, name: str, body: JSONObject) -> str:
        """Refused before any call where Podman would make the network weaker."""
        options = dict(body.get("Options") or {})
        if options.get(INHIBIT_IPV4) == "true":
            raise PodmanUnsupported(f"Options[{INHIBIT_IPV4}]", "true", NO_HOSTLESS_NETWORK)
        # Podman drops Docker's bridge options; its bridge always lets its members
        # talk, which is what enable_icc=true asks (an `open` box is its only member).
        icc = options.pop(ENABLE_ICC, "true")
        if icc != "true":
            raise PodmanUnsupported(f"Options[{ENABLE_ICC}]", icc, NO_BRIDGE_OPTIONS)
        for key, value in options.items():
            raise PodmanUnsupported(f"Options[{key}]", value, NO_BRIDGE_OPTIONS)
        return super().create_network(name, {**body, "Options": {}})

    def create_container(self, name: str, body: JSONObject) -> str:
        spec = specgen(name, body, write_profile)
        result = self._call("POST", f"{LIBPOD}/containers/create", body=spec, versioned=False)
        container_id = self._field(result, "Id")
        if not isinstance(container_id, str) or not container_id:
            raise EngineError(f"Podman created {name} but returned no container ID: {result!r}")
        self._refuse_another_runtime(container_id, str(spec.get("oci_runtime") or ""))
        if needs_keeper(body):
            try:
                start_keeper(self.endpoint.socket_path, self.api_version, container_id)
            except BaseException:
                self.remove_container(container_id)
                raise
        return container_id

    def commit(self, container_id: str, repo: str, tag: str, config: JSONObject) -> str:
        """The stopped box's filesystem exported and imported as one flat layer, with
        exactly `config` said as changes (`pybox._engine.podman_commit`): Podman's own
        commits cannot say it. The export streams into the import, never held whole;
        the image is read back and removed again if its configuration differs."""
        # Imported here, as the registry calls are: a run never commits or pushes,
        # and exec's start-up stays small (tests/unit/test_cli_entry.py).
        from pybox._engine.podman_commit import (
            EXPORT_DEADLINE_S,
            EXPORT_IDLE_TIMEOUT_S,
            EXPORT_MAX_BYTES,
            config_problem,
            import_changes,
        )

        changes = import_changes(config)
        export = self._download(
            f"/containers/{container_id}/export",
            what=f"the export of {container_id[:12]}'s filesystem",
            max_body_bytes=EXPORT_MAX_BYTES,
            idle_timeout_s=EXPORT_IDLE_TIMEOUT_S,
            deadline_s=EXPORT_DEADLINE_S,
        )
        try:
            with closing(export):
                image_id = self.import_image(export, repo, tag, changes)
        except EngineAnswerTooLarge as exc:
            raise EngineError(
                f"The filesystem of {container_id[:12]} is larger than {exc.limit_bytes} bytes "
                f"({exc.limit_bytes / 1024**3:.3g} GiB), the most pybox exports into an image "
                "on Podman; the import was cut short and no image was made."
            ) from None
        problem = config_problem(config, self.inspect_image(image_id))
        if problem is not None:
            self.remove_image(image_id)
            raise EngineError(
                f"Podman imported {repo}:{tag} as {image_id[:19]} but {problem}; "
                "the image was removed."
            )
        return image_id

    def import_image(
        self, tar_chunks: Iterable[bytes], repo: str, tag: str, changes: list[str]
    ) -> str:
        """Podman 4.3's compatible import names the image `repo:latest`, whatever tag
        it is asked for (measured): the asked tag is added and that `latest` dropped."""
        image_id = super().import_image(tar_chunks, repo, tag, changes)
        if tag == "latest":
            return image_id
        self.tag_image(image_id, repo, tag)
        found = self.inspect_image(image_id) or {}
        for reference in found.get("RepoTags") or []:
            # Podman names a short `repo` with its registry (`docker.io/pybox/...`).
            if str(reference) == f"{repo}:latest" or str(reference).endswith(f"/{repo}:latest"):
                self.remove_image(str(reference))  # an untag: the asked tag stays
        return image_id

    def _registry_query(self, repository: str) -> dict[str, str]:
        from pybox._engine.registry_calls import tls_query

        return tls_query(repository)

    def pull_image(self, repo: str, digest: str, platform: str) -> None:
        """Through Podman's own pull: its compatible one ignores `tlsVerify`."""
        from pybox._engine.registry_calls import pull_query, pulled_id

        reference = f"{repo}@{digest}"
        events = self._progress(
            f"to pull {reference}",
            f"{LIBPOD}/images/pull",
            query=pull_query(repo, digest, platform),
            versioned=False,
            extra_headers=NO_AUTH,
        )
        pulled_id(events, reference)

    def attach(self, container_id: str) -> DockerAttachStream:
        """Through the box's keeper when it has one, else the engine's attach."""
        kept = connect_keeper(container_id)
        return kept if kept is not None else super().attach(container_id)

    def _refuse_another_runtime(self, container_id: str, asked: str) -> None:
        """Podman 4.3 creates a box whose runtime it does not know with its default
        runtime, silently: such a box is removed and refused like a create."""
        if not asked:
            return
        own: Any = self._call(
            "GET", f"{LIBPOD}/containers/{container_id}/json", versioned=False, answers={404: None}
        )
        got = own.get("OCIRuntime") if isinstance(own, dict) else None
        if got == asked:
            return
        self.remove_container(container_id)
        raise PodmanUnsupported(
            "HostConfig.Runtime",
            asked,
            f"Podman does not know this runtime and made the box with {got!r} instead",
        )

    @staticmethod
    def box_files(container_id: str, hostname: str) -> dict[str, tuple[str, str]]:
        """Podman 4.3 cannot leave these out; both are written per box under
        .../overlay-containers/<id>/userdata/ and hold nothing of the host's."""
        return {
            "/etc/hostname": (f"/{container_id}/userdata/hostname", f"read {hostname}\n"),
            # Empty for a box that is not privileged (its content names the engine,
            # the box and its image only for a privileged one).
            "/run/.containerenv": (f"/{container_id}/userdata/.containerenv", "read "),
        }

    def list_containers(self, labels: Mapping[str, str | None]) -> list[JSONObject]:
        listed = super().list_containers(labels)
        return [
            {**item, "State": DOCKER_STATES.get(str(item.get("State")), item.get("State"))}
            for item in listed
        ]

    def inspect_container(self, container_id: str) -> JSONObject | None:
        compat = super().inspect_container(container_id)
        if compat is None:
            return None
        own: Any = self._call(
            "GET",
            f"{LIBPOD}/containers/{container_id}/json",
            versioned=False,
            answers={404: None},
        )
        if own is None:
            return None
        return {**docker_state(compat), LIBPOD_KEY: own}

    def cgroup_path(self, container_id: str) -> str | None:
        """The started box's cgroup, as Podman reports it (None: not reported)."""
        own: Any = self._call(
            "GET",
            f"{LIBPOD}/containers/{container_id}/json",
            versioned=False,
            answers={404: None},
        )
        state = own.get("State") if isinstance(own, dict) else None
        path = state.get("CgroupPath") if isinstance(state, dict) else None
        return path if isinstance(path, str) and path else None
