"""The install box: libraries installed for a sandbox by a box that never sees the
agent's code, handed back as a safe tar.

The sandbox itself never gets a network interface. An install box is a build
box (its posture table in `pybox._core.build_posture`, read back before start)
made from the sandbox's own image: root in its container with every
capability dropped, pybox's seccomp profile, nothing of this machine mounted,
created on the bridge, detached before start and attached only while pip runs.
Its pip is pybox's locked pip, fetched by this machine's pip as image builds do,
told this machine's index, CA and proxy (`pybox._adapters.piptool`). It
installs wheels only (no package's code runs at install time), into a target
folder that pip builds in the box's size-capped /tmp. The folder's size is
checked in the box; it is read out through the engine with a cap and rewritten
into a tar of regular files and directories (`site_tar`); the box is removed,
and confirmed gone, on every path. It carries pybox's labels (owner, expiry),
so a sweep removes it if pybox dies first.

Steps: check the request -> fetch pip's wheel -> create -> read back -> detach ->
put pip's wheel, the CA bundle and the (empty) install folder -> start -> ask the
Python -> attach, pip install --target --report, detach -> measure -> read the
report and the folder -> remove.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from pybox._adapters.confinement import confinement as engine_confinement
from pybox._adapters.piptool import PipSettings, download_pip_wheel, host_pip_settings, read_cert
from pybox._boxes.cleanup import remove_and_confirm
from pybox._core.build_posture import BuildBoxSpec
from pybox._core.display import plural
from pybox._core.errors import (
    CleanupError,
    EngineAnswerTooLarge,
    EngineError,
    ImageBuildError,
    InvalidRequest,
    LibraryInstallError,
)
from pybox._core.images import ImageRecord
from pybox._core.limits import MIB
from pybox._core.requirements import parse_libraries
from pybox._core.seccomp import Confinement
from pybox._engine import Engine
from pybox._features.images.build_box import (
    BUILD_NETWORK,
    BuildBox,
    box_python,
    build_box_spec,
    build_inputs_tar,
    create_build_box,
    pip_install_argv,
    read_back_build_box,
)
from pybox._features.images.checks import verify_for_run
from pybox._features.images.lock_plans import read_pip_lock
from pybox._features.sandboxes.site_tar import (
    InstalledPackage,
    describe_bytes,
    measured_size,
    packages_from_report,
    pip_failure,
    read_member,
    safe_site_tar,
    site_relpath,
)
from pybox._version import __version__

__all__ = ["InstalledLibraries", "InstalledPackage", "install_libraries"]

# On the root filesystem: the engine reads no archive out of a tmpfs. pip builds
# the folder in /tmp first, so the tmpfs bounds it.
INSTALL_DIR = "/pybox-install"
TARGET_NAME = "target"
REPORT_NAME = "report.json"
REPORT_MAX_BYTES = 16 * MIB
# pip's own work (downloads, unpacking) beside the files on /tmp, in the box's memory.
WORK_MEMORY_BYTES = 1024 * MIB
TMP_SPARE_BYTES = 256 * MIB
# The box ends itself this long after its time limit if pybox never comes back.
LIFETIME_SPARE_S = 120
_PIP_OPTIONS = (
    "--only-binary=:all:",
    "--no-cache-dir",
    "--no-compile",
    "--no-warn-script-location",
    "--target",
    f"{INSTALL_DIR}/{TARGET_NAME}",
    "--report",
    f"{INSTALL_DIR}/{REPORT_NAME}",
)
_SHOWN_PIP_LINES = ("Collecting", "Successfully installed", "ERROR")
# Which Python this is, and its user site relative to HOME (the install folder
# arrives with pip's wheel: see `_start`).
_PYTHON_SCRIPT = (
    "import json, os, platform, site, sys\n"
    "print(json.dumps({'implementation': platform.python_implementation(),"
    " 'version': platform.python_version(), 'tag': 'cp%d%d' % sys.version_info[:2],"
    " 'machine': platform.machine(),"
    " 'site': os.path.relpath(site.getusersitepackages(), os.path.expanduser('~'))}))\n"
)
_MEASURE_SCRIPT = (
    "import json, os\n"
    "size = entries = 0\n"
    f"for top, dirs, files in os.walk({INSTALL_DIR + '/' + TARGET_NAME!r}):\n"
    "    entries += 1 + len(files)\n"
    "    size += sum(os.lstat(os.path.join(top, name)).st_size for name in files)\n"
    "print(json.dumps({'bytes': size, 'entries': entries}))\n"
)


@dataclass(frozen=True)
class InstalledLibraries:
    """What an install box installed, as a tar for the sandbox's user site."""

    requested: tuple[str, ...]
    packages: tuple[InstalledPackage, ...]
    site_relpath: str  # the box Python's user site, relative to HOME
    tar_bytes: bytes  # regular files and directories only, relative names, owner 0
    duration_s: float
    install_box: str  # the install box's container name; its removal was confirmed
    skipped: tuple[str, ...] = ()  # entries left out of the tar, each with why


def install_libraries(
    engine: Engine,
    image: ImageRecord,
    libraries: Sequence[str],
    *,
    owner: str,
    environ: Mapping[str, str],
    max_bytes: int,
    timeout_s: float = 300.0,
    say: Callable[[str], None] | None = None,
    pip: PipSettings | None = None,
    confinement: Confinement | None = None,
) -> InstalledLibraries:
    """Install `libraries` in an install box of `image`; the result, or a PyboxError.

    Nothing is created for a refused request. `pip` and `confinement` default to
    this machine's pip configuration and the engine's confinement."""
    requested = parse_libraries(libraries)
    if not requested:
        raise InvalidRequest("No libraries were given to install; name at least one.")
    if max_bytes <= 0 or timeout_s <= 0:
        raise InvalidRequest(
            f"An install needs a positive size and time limit, not {max_bytes} bytes and "
            f"{timeout_s:g} s."
        )
    progress = say or (lambda _message: None)
    started = time.monotonic()
    verify_for_run(engine, image)
    settings = pip if pip is not None else host_pip_settings(environ)
    try:
        wheel_name, wheel = download_pip_wheel(read_pip_lock(environ), environ)
        cert = read_cert(settings)
    except ImageBuildError as exc:
        raise LibraryInstallError(f"{exc} Nothing was installed.") from exc
    progress(f"pip's configuration: {settings.describe()}; fetched {wheel_name}")
    info = engine.info()
    run_id = secrets.token_hex(8)
    tmp_bytes = 2 * max_bytes + TMP_SPARE_BYTES
    spec = build_box_spec(
        image.image_id,
        run_id=run_id,
        owner=owner,
        pybox_version=__version__,
        cpus=max(1, int(info.get("NCPU") or 1)),
        confinement=confinement or engine_confinement(info, local_host=True),
        python=image.python_path,
        lifetime_s=int(timeout_s) + LIFETIME_SPARE_S,
        memory_bytes=tmp_bytes + WORK_MEMORY_BYTES,
        tmp_bytes=tmp_bytes,
    )
    inputs = {wheel_name: wheel} | ({"ca.pem": cert} if cert is not None else {})
    argv = pip_install_argv(image.python_path, wheel_name, _PIP_OPTIONS, settings, cert is not None)
    run = _InstallRun(engine, f"pybox-install-{run_id}", progress, started, timeout_s)
    try:
        result = run.install(spec, image, inputs, [*argv, *requested], max_bytes)
    except BaseException as exc:
        run.remove(failure=exc)
        raise
    run.remove(failure=None)
    duration_s = time.monotonic() - started
    progress(
        f"[{duration_s:6.1f}s] installed {plural(len(result.packages), 'package')} "
        f"({describe_bytes(result.file_bytes)}); install box {run.name} removed (confirmed)"
    )
    return InstalledLibraries(
        requested=requested,
        packages=result.packages,
        site_relpath=result.site_relpath,
        tar_bytes=result.tar_bytes,
        duration_s=round(duration_s, 3),
        install_box=run.name,
        skipped=result.skipped,
    )


@dataclass(frozen=True)
class _Result:
    packages: tuple[InstalledPackage, ...]
    site_relpath: str
    tar_bytes: bytes
    file_bytes: int
    skipped: tuple[str, ...]


class _InstallRun:
    """One install box, from its create to its confirmed removal."""

    def __init__(
        self,
        engine: Engine,
        name: str,
        progress: Callable[[str], None],
        started: float,
        timeout_s: float,
    ) -> None:
        self.engine = engine
        self.name = name
        self.progress = progress
        self.started = started
        self.timeout_s = timeout_s
        self.container_id: str | None = None

    def remaining(self) -> float:
        left = self.started + self.timeout_s - time.monotonic()
        if left <= 0:
            raise self.over_time()
        return left

    def over_time(self) -> LibraryInstallError:
        return LibraryInstallError(
            f"Installing the libraries did not finish within {self.timeout_s:g} s; the "
            f"install box {self.name} was killed and removed, and nothing was installed. "
            "Ask for fewer libraries, or for a longer time limit."
        )

    def step(self, box: BuildBox, name: str, argv: list[str]) -> tuple[int | None, list[str]]:
        try:
            outcome: tuple[int | None, list[str]] = box.step(
                name, lambda: box.run(argv, self.remaining(), _shown_pip_line)
            )
        except ImageBuildError:  # BuildBox.run's own error: the step's time ran out
            raise self.over_time() from None
        return outcome

    def install(
        self,
        spec: BuildBoxSpec,
        image: ImageRecord,
        inputs: dict[str, bytes],
        pip_argv: list[str],
        max_bytes: int,
    ) -> _Result:
        try:
            box = self._start(spec, image, inputs)
            relpath = self._ask_python(box, image)
            self._pip(box, pip_argv, max_bytes)
            cap = self._measure(box, image, max_bytes)
            report = read_member(self._read(f"{INSTALL_DIR}/{REPORT_NAME}", REPORT_MAX_BYTES))
            packages = packages_from_report(json.loads(report))
            raw = self._read(f"{INSTALL_DIR}/{TARGET_NAME}", cap)
        except EngineAnswerTooLarge as exc:
            raise LibraryInstallError(
                f"The install box's folder is larger than it measured ({exc}); nothing was "
                "installed."
            ) from exc
        except EngineError as exc:
            if time.monotonic() >= self.started + self.timeout_s:
                raise self.over_time() from exc
            raise LibraryInstallError(
                f"Installing the libraries failed: the engine said: {exc} Nothing was installed."
            ) from exc
        except ValueError as exc:  # the report is not JSON
            raise LibraryInstallError(
                f"pip's install report is not JSON ({exc}); nothing was installed."
            ) from exc
        site = safe_site_tar(raw, TARGET_NAME, max_bytes)
        for skipped in site.skipped:
            box.say(f"  left out of the installed files: {skipped}")
        return _Result(packages, relpath, site.tar_bytes, site.file_bytes, site.skipped)

    def _read(self, path: str, max_bytes: int) -> bytes:
        assert self.container_id is not None
        return self.engine.get_archive(
            self.container_id, path, max_bytes=max_bytes, timeout_s=self.remaining()
        )

    def _start(self, spec: BuildBoxSpec, image: ImageRecord, inputs: dict[str, bytes]) -> BuildBox:
        """The install box created, read back, detached, given pip's wheel, started."""
        engine = self.engine
        self.container_id = container_id = create_build_box(engine, self.name, spec)
        box = BuildBox(engine, container_id, self.progress)
        box.started = self.started
        posture = read_back_build_box(
            engine,
            spec,
            container_id,
            box="install box",
            outcome="Nothing was installed",
            error=LibraryInstallError,
        )
        box.say(
            f"created install box {self.name} from {image.name}; posture read back before "
            f"start: {len(posture.checked)} fields as asked"
        )
        engine.disconnect_network(BUILD_NETWORK, container_id)
        if box.networks():
            raise LibraryInstallError(
                f"The install box is still on {', '.join(box.networks())} after detaching; "
                "nothing was installed."
            )
        engine.put_archive(container_id, "/", build_inputs_tar(inputs, (INSTALL_DIR,)))
        engine.start_container(container_id)
        return box

    def _ask_python(self, box: BuildBox, image: ImageRecord) -> str:
        """Which Python the packages are for, and its user site relative to HOME."""
        argv = [image.python_path, "-I", "-c", _PYTHON_SCRIPT]
        code, lines = self.step(box, "ask the image's Python", argv)
        python, relpath = box_python(lines), site_relpath(lines)
        if code != 0 or python is None or relpath is None:
            raise LibraryInstallError(
                f"The image's Python {image.python_path} did not say which it is (exit "
                f"{code}); nothing was installed."
            )
        box.say(f"installing for {python.describe()}, into a copy of its user site ~/{relpath}")
        return relpath

    def _pip(self, box: BuildBox, argv: list[str], max_bytes: int) -> None:
        """pip install, with the network attached for this step only."""
        self.engine.connect_network(BUILD_NETWORK, box.container_id)
        try:
            code, lines = self.step(box, "pip install (network attached for this step only)", argv)
        finally:
            self.engine.disconnect_network(BUILD_NETWORK, box.container_id)
        if code != 0:
            room = 2 * max_bytes + TMP_SPARE_BYTES
            message, quote = pip_failure(code, lines, room_bytes=room, max_bytes=max_bytes)
            raise LibraryInstallError(message, quote=quote)

    def _measure(self, box: BuildBox, image: ImageRecord, max_bytes: int) -> int:
        """The installed size, checked against `max_bytes` in the box (network
        detached); the most the engine's tar of the folder may then be."""
        argv = [image.python_path, "-I", "-S", "-c", _MEASURE_SCRIPT]
        code, lines = self.step(box, "measure the installed files (network detached)", argv)
        return measured_size(code, lines, max_bytes)

    def _kill(self) -> None:
        """Killed before removal: Podman's forced removal of a running box sends
        SIGTERM, which the box's sleep ignores, and waits 10 s before SIGKILL. A box
        that never started cannot be killed (Podman: HTTP 500); removal follows."""
        assert self.container_id is not None
        try:
            self.engine.kill_container(self.container_id)
        except EngineError:
            pass

    def remove(self, failure: BaseException | None) -> None:
        """Remove the box and confirm it; an unconfirmed removal is an error."""
        if self.container_id is None:
            return
        try:
            self._kill()
            confirmed = remove_and_confirm(self.engine, self.container_id)
            why = "the engine still lists it"
        except EngineError as exc:
            confirmed, why = False, f"the engine said: {exc}"
        if confirmed:
            return
        message = (
            f"The install box {self.name} could not be confirmed removed ({why}); "
            "run `pybox sweep`."
        )
        self.progress(message)
        if failure is None:
            raise CleanupError(message)
        raise CleanupError(f"{failure}\nAnd: {message}") from failure


def _shown_pip_line(line: str) -> str | None:
    return line if line.startswith(_SHOWN_PIP_LINES) else None
