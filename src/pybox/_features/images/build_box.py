"""The build box: its spec and posture table read back before start (on Podman
with its answers mapped, `pybox._engine.podman_seal`), the inputs put
into it as an archive, and its steps (each an exec, timed, with the engine's view
of its networks)."""

from __future__ import annotations

import io
import json
import tarfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pybox._adapters.piptool import PipSettings
from pybox._adapters.rootfs import Progress
from pybox._core.build_posture import BuildBoxSpec, build_box
from pybox._core.display import plural
from pybox._core.errors import ImageBuildError, PyboxError
from pybox._core.limits import MIB
from pybox._core.posture import (
    DEFAULT_PATH,
    LABEL_EXPIRES_AT,
    LABEL_MANAGED,
    LABEL_OWNER,
    LABEL_RUN_ID,
    LABEL_VERSION,
)
from pybox._core.seal import PostureReport, check
from pybox._core.seccomp import Confinement
from pybox._engine import Engine

BASE_PYTHON = "/usr/bin/python3"
# Under /opt, which the box's root owns writable: the image's `/` is 0555 on
# Podman (the layer's root directory in its storage), so without capabilities the
# box could not remove a folder of `/` before the commit (Docker shows `/` 0755).
BUILD_DIR = "/opt/pybox-build"
BUILD_NETWORK = "bridge"
BUILD_TIMEOUT_S = 3600
BUILD_MEMORY_BYTES = 4096 * MIB
BUILD_TMP_BYTES = 2048 * MIB
BUILD_PIDS = 1024
BUILD_BOX_LABELS = (LABEL_MANAGED, LABEL_RUN_ID, LABEL_OWNER, LABEL_EXPIRES_AT, LABEL_VERSION)


@dataclass(frozen=True)
class BoxPython:
    """The build box's Python, as it reported itself (None: it did not say)."""

    implementation: str
    version: str
    tag: str
    machine: str

    def describe(self) -> str:
        return f"{self.implementation} {self.version} ({self.tag}) on {self.machine}"


def box_python(lines: list[str]) -> BoxPython | None:
    for line in reversed(lines):
        try:
            found = json.loads(line)
            return BoxPython(
                str(found["implementation"]),
                str(found["version"]),
                str(found["tag"]),
                str(found["machine"]),
            )
        except (ValueError, TypeError, KeyError):
            continue
    return None


@dataclass(frozen=True)
class BuildStep:
    """One step of a build, with the networks the engine showed the box on."""

    name: str
    elapsed_s: float
    networks: tuple[str, ...]


def build_box_spec(
    image_id: str,
    *,
    run_id: str,
    owner: str,
    pybox_version: str,
    cpus: int,
    confinement: Confinement,
    python: str = BASE_PYTHON,
    lifetime_s: int = BUILD_TIMEOUT_S,
    memory_bytes: int = BUILD_MEMORY_BYTES,
    tmp_bytes: int = BUILD_TMP_BYTES,
) -> BuildBoxSpec:
    """A build box's spec; an install box (pybox._features.sandboxes.install) is one
    too, with the sandbox's image and Python, a shorter life and smaller caps."""
    return BuildBoxSpec(
        image_id=image_id,
        # The box ends itself if pybox never comes back; pybox kills it sooner.
        entrypoint=(python, "-I", "-S", "-c", f"import time; time.sleep({lifetime_s})"),
        env=(f"PATH={DEFAULT_PATH}", "LANG=C.UTF-8", "HOME=/root", "TMPDIR=/tmp"),
        labels=(
            (LABEL_MANAGED, "1"),
            (LABEL_RUN_ID, run_id),
            (LABEL_OWNER, owner),
            (LABEL_EXPIRES_AT, str(int(time.time()) + lifetime_s)),
            (LABEL_VERSION, pybox_version),
        ),
        # Created on the bridge so it can be attached later; detached before start.
        network=BUILD_NETWORK,
        tmp_bytes=tmp_bytes,
        memory_bytes=memory_bytes,
        cpus=cpus,
        pids=BUILD_PIDS,
        confinement=confinement,
    )


def create_build_box(engine: Engine, name: str, spec: BuildBoxSpec) -> str:
    """The build box, created from its rules through the engine's translation."""
    return engine.create_box(name, build_box(spec))


def read_back_build_box(
    engine: Engine,
    spec: BuildBoxSpec,
    container_id: str,
    *,
    box: str = "build box",
    outcome: str = "Nothing was built",
    error: type[PyboxError] = ImageBuildError,
) -> PostureReport:
    """The build box as the engine made it, checked against its table before start."""
    facts = engine.box_facts(container_id)
    if facts is None:
        raise error(f"The {box} vanished between create and inspect.")
    report = check(build_box(spec), facts)
    if not report.ok:
        details = "; ".join(m.describe() for m in report.mismatches[:5])
        raise error(
            f"The {box} was refused before start: "
            f"{plural(len(report.mismatches), 'setting')} "
            f"{'differs' if len(report.mismatches) == 1 else 'differ'} from what pybox asked "
            f"for: {details}. {outcome}; check the "
            "engine's configuration (`pybox doctor`)."
        )
    return report


def build_inputs_tar(files: Mapping[str, bytes], directories: Sequence[str] = ()) -> bytes:
    """A tar holding BUILD_DIR with `files`, and the empty `directories`, owned by
    root, readable by root only. The engine makes them: the box's root, with every
    capability dropped, cannot write where the image's directory modes forbid it
    (Podman shows the image's `/` as 0555)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for path in (BUILD_DIR, *directories):
            directory = tarfile.TarInfo(path.lstrip("/"))
            directory.type = tarfile.DIRTYPE
            directory.mode = 0o700
            archive.addfile(directory)
        for name, data in files.items():
            info = tarfile.TarInfo(f"{BUILD_DIR.lstrip('/')}/{name}")
            info.size = len(data)
            info.mode = 0o600
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def pip_install_argv(
    python: str, wheel_name: str, options: Sequence[str], pip: PipSettings, with_cert: bool
) -> list[str]:
    """`pip install` in a box, run from pip's wheel put into BUILD_DIR, told this
    machine's index, CA (as BUILD_DIR/ca.pem) and proxy, and nothing else. The
    interpreter starts isolated (`-I`: no PYTHON* variables, no user site), as
    every one of pybox's own programs in a box does; pip's wheel is still its
    sys.path[0] (a zip's own path is, even so)."""
    return [
        python,
        "-I",
        f"{BUILD_DIR}/{wheel_name}/pip",
        "install",
        "--isolated",
        "--no-input",
        "--disable-pip-version-check",
        "--root-user-action=ignore",
        "--progress-bar=off",
        "--no-color",
        *options,
        *pip.install_args(f"{BUILD_DIR}/ca.pem" if with_cert else None),
    ]


class BuildBox:
    """The build box's steps: each one an exec, timed, with the engine's network view."""

    def __init__(self, engine: Engine, container_id: str, progress: Progress) -> None:
        self.engine = engine
        self.container_id = container_id
        self.progress = progress
        self.started = time.monotonic()
        self.steps: list[BuildStep] = []

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def say(self, message: str) -> None:
        self.progress(f"[{self.elapsed():6.1f}s] {message}")

    def networks(self) -> tuple[str, ...]:
        found = self.engine.inspect_container(self.container_id) or {}
        settings = found.get("NetworkSettings") or {}
        return tuple(sorted((settings.get("Networks") or {}).keys()))

    def step(self, name: str, action: Callable[[], Any]) -> Any:
        networks = self.networks()
        shown = ", ".join(networks) if networks else "none"
        self.say(f"{name} (network: {shown})")
        began = time.monotonic()
        result = action()
        taken = time.monotonic() - began
        self.steps.append(BuildStep(name, round(taken, 2), networks))
        self.say(f"{name}: done in {taken:.1f}s")
        return result

    def run(
        self,
        argv: list[str],
        timeout_s: float,
        show: Callable[[str], str | None] = lambda line: None,
    ) -> tuple[int | None, list[str]]:
        """Run argv in the box as root; its exit code and output lines."""
        exec_id = self.engine.exec_create(self.container_id, argv, "0:0")
        stream = self.engine.exec_start(exec_id)
        lines: list[str] = []
        pending = b""
        deadline = time.monotonic() + timeout_s
        try:
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise ImageBuildError(
                        f"A build step did not finish within {timeout_s:g} s: {argv[:3]}."
                    )
                chunk = stream.read(min(remaining, 1.0))
                if chunk is None:
                    continue
                source, data = chunk
                if source == 0:
                    break
                pending += data
                *complete, pending = pending.split(b"\n")
                for raw in complete:
                    line = raw.decode("utf-8", "replace").rstrip()
                    lines.append(line)
                    shown = show(line)
                    if shown is not None:
                        self.say(f"  {shown[:160]}")
        finally:
            stream.close()
        if pending:
            lines.append(pending.decode("utf-8", "replace").rstrip())
        code = None
        for _ in range(50):
            code = self.engine.exec_exit_code(exec_id)
            if code is not None:
                break
            time.sleep(0.1)
        return code, lines
