"""Images from hash-locked lock files, built in a build box from the stdlib image.

The build box is a container pybox makes from the recorded stdlib image. It
runs as root in the container (every capability dropped, no-new-privileges,
pybox's seccomp profile, memory, CPU and process caps) with a writable root,
because the packages are installed into it. Its posture is a table
(`pybox._core.build_posture`) read back from the engine before it starts.
Its network is detached before it starts and attached only for the install
step, which the engine's own view confirms at every step.
Nothing of this machine is mounted: the lock, pip's wheel and the CA bundle
arrive as an archive put into the box, and are deleted before the commit.

Steps: create -> read back -> detach network -> put build inputs -> start -> venv ->
attach network, pip install --require-hashes --only-binary=:all:
--no-cache-dir, detach network -> check (installed == locked, no network) ->
clean -> stop -> commit (sane environment, pybox labels) -> record. The box is
removed, and confirmed gone, on every exit path.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import secrets
import tarfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pybox._adapters.confinement import confinement as engine_confinement
from pybox._adapters.piptool import PipSettings, download_pip_wheel, read_cert, redact
from pybox._adapters.rootfs import Progress
from pybox._adapters.state import StateStore
from pybox._boxes.cleanup import remove_and_confirm
from pybox._core.build_posture import BuildBoxSpec, build_requirements
from pybox._core.errors import (
    ConfigError,
    EngineError,
    ImageBuildError,
    ImageError,
    InvalidRequest,
)
from pybox._core.images import (
    IMAGE_REPO_PREFIX,
    LABEL_IMAGE,
    LABEL_PYTHON,
    LABEL_RECIPE,
    LABEL_STATE,
    ImageRecord,
    Recipe,
    check_image_name,
    state_mark,
)
from pybox._core.limits import MIB
from pybox._core.locks import Lock, normalize_name, parse_lock, wheel_pythons, wheels_missing
from pybox._core.posture import (
    BOX_USER,
    DEFAULT_PATH,
    LABEL_EXPIRES_AT,
    LABEL_MANAGED,
    LABEL_OWNER,
    LABEL_RUN_ID,
    LABEL_VERSION,
    WORK_DIR,
    PostureReport,
    body_from,
    check_requirements,
)
from pybox._core.seccomp import Confinement
from pybox._engine import Engine, JSONObject
from pybox._orchestration.images import Replaced

LOCK_BUILDER_VERSION = 1
VENV_DIR = "/opt/venv"
VENV_PYTHON = f"{VENV_DIR}/bin/python3"
BASE_PYTHON = "/usr/bin/python3"
BUILD_DIR = "/pybox-build"
BUILD_NETWORK = "bridge"
INSTALL_OPTIONS = ("--require-hashes", "--only-binary=:all:", "--no-cache-dir")
BUILD_TIMEOUT_S = 3600
INSTALL_TIMEOUT_S = 1800.0
STEP_TIMEOUT_S = 300.0
BUILD_MEMORY_BYTES = 4096 * MIB
BUILD_TMP_BYTES = 2048 * MIB
BUILD_PIDS = 1024
PIP_LOCK_NAME = "pip.lock"
BUILD_BOX_LABELS = (LABEL_MANAGED, LABEL_RUN_ID, LABEL_OWNER, LABEL_EXPIRES_AT, LABEL_VERSION)

# The committed image's environment. Caches point at the box's tmpfs; thread
# counts follow each run's CPU limit and are set per run (see BoxSpec).
IMAGE_ENV: tuple[tuple[str, str], ...] = (
    ("PATH", f"{VENV_DIR}/bin:{DEFAULT_PATH}"),
    ("VIRTUAL_ENV", VENV_DIR),
    ("MPLBACKEND", "Agg"),
    ("MPLCONFIGDIR", "/tmp/matplotlib"),
    ("XDG_CACHE_HOME", "/tmp/.cache"),
)

_CHECK_SCRIPT = (
    "import json, os, importlib.metadata as m\n"
    "print(json.dumps({'interfaces': sorted(os.listdir('/sys/class/net')),"
    " 'packages': sorted('%s==%s' % (d.metadata['Name'], d.version)"
    " for d in m.distributions())}))\n"
)
_CLEAN_SCRIPT = f"import shutil; shutil.rmtree({BUILD_DIR!r})\n"
# The venv step also says which Python the packages are installed for.
_VENV_SCRIPT = (
    "import json, platform, sys, venv\n"
    f"venv.create({VENV_DIR!r}, with_pip=False, symlinks=True)\n"
    "print(json.dumps({'implementation': platform.python_implementation(),"
    " 'version': platform.python_version(), 'tag': 'cp%d%d' % sys.version_info[:2],"
    " 'machine': platform.machine()}))\n"
)


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


_SHOWN_PIP_LINES = ("Collecting", "Installing collected", "Successfully installed", "ERROR")


def locks_dir(environ: Mapping[str, str]) -> Path:
    """Where pybox's shipped lock files are: PYBOX_LOCKS_DIR, else inside the package.

    They live in `pybox/_locks` (the repository's `locks/` points there), so an
    installed pybox has them as well as a checkout.
    """
    explicit = environ.get("PYBOX_LOCKS_DIR")
    if explicit:
        return Path(explicit)
    return Path(__file__).resolve().parents[1] / "_locks"


def read_lock(path: Path) -> Lock:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidRequest(
            f"Cannot read the lock file {path}: {exc.strerror or exc}. Give a lock file made "
            "with `pip-compile --generate-hashes` or `uv pip compile --generate-hashes`."
        ) from exc
    except UnicodeDecodeError as exc:
        raise InvalidRequest(f"The lock file {path} is not UTF-8 text.") from exc
    return parse_lock(text, str(path))


def shipped_lock(name: str, environ: Mapping[str, str]) -> Path:
    path = locks_dir(environ) / f"{name}.lock"
    if not path.is_file():
        raise ConfigError(
            f"No shipped lock file for {name!r} at {path}. Pass --lock FILE, or set "
            "PYBOX_LOCKS_DIR to the folder holding pybox's locks/."
        )
    return path


@dataclass(frozen=True)
class LockBuildPlan:
    name: str
    lock: Lock
    lock_path: Path
    pip_lock: Lock
    base: ImageRecord
    recipe: Recipe
    reference: str
    up_to_date: bool
    recorded: ImageRecord | None


def plan_lock_image(
    engine: Engine,
    state: StateStore,
    name: str,
    lock_path: Path,
    environ: Mapping[str, str],
) -> LockBuildPlan:
    """What building `name` from `lock_path` would do, without doing it."""
    check_image_name(name)
    if name == "stdlib":
        raise InvalidRequest(
            "stdlib is the base image, built with debootstrap; it takes no lock file. "
            "Choose another name for a lock-built image."
        )
    lock = read_lock(lock_path)
    pip_lock = read_lock(locks_dir(environ) / PIP_LOCK_NAME)
    if len(pip_lock.requirements) != 1 or pip_lock.requirements[0].key != "pip":
        raise ConfigError(f"{pip_lock.source} must lock exactly one package: pip.")
    base = state.image("stdlib")
    if base is None:
        raise ImageError(
            f"A {name} image is built on the stdlib image, which is not recorded in "
            f"{state.root}. Run `pybox setup --yes` first."
        )
    found = engine.inspect_image(base.image_id)
    if found is None or found.get("Id") != base.image_id:
        raise ImageError(
            f"The recorded stdlib image {base.image_id} is not in the engine. Rebuild it with "
            "`pybox image build stdlib`."
        )
    recipe = Recipe(
        name=name,
        base=base.image_id,
        suite="",
        mirror="",
        packages=lock.pins,
        builder_version=LOCK_BUILDER_VERSION,
        extra=(
            ("lock_sha256", lock.sha256),
            ("pip", pip_lock.requirements[0].line()),
            ("install_options", " ".join(INSTALL_OPTIONS)),
            ("venv", VENV_DIR),
            ("env", json.dumps(IMAGE_ENV)),
        ),
    )
    recorded = state.image(name)
    up_to_date = (
        recorded is not None
        and recorded.recipe_hash == recipe.hash
        and (image := engine.inspect_image(recorded.image_id)) is not None
        and image.get("Id") == recorded.image_id
    )
    reference = f"{IMAGE_REPO_PREFIX}{name}:{recipe.hash.split(':')[1][:12]}"
    return LockBuildPlan(
        name, lock, lock_path, pip_lock, base, recipe, reference, bool(up_to_date), recorded
    )


@dataclass(frozen=True)
class BuildStep:
    """One step of a build, with the networks the engine showed the box on."""

    name: str
    elapsed_s: float
    networks: tuple[str, ...]


@dataclass(frozen=True)
class BuildResult:
    record: ImageRecord
    built: bool
    steps: tuple[BuildStep, ...] = ()
    interfaces_after_install: tuple[str, ...] = ()
    # The image this build replaced (set by ImageOperations.build), if any.
    replaced: Replaced | None = None


def build_box_spec(
    image_id: str,
    *,
    run_id: str,
    owner: str,
    pybox_version: str,
    cpus: int,
    confinement: Confinement,
) -> BuildBoxSpec:
    return BuildBoxSpec(
        image_id=image_id,
        # The box ends itself if pybox never comes back; pybox kills it sooner.
        entrypoint=(BASE_PYTHON, "-I", "-S", "-c", f"import time; time.sleep({BUILD_TIMEOUT_S})"),
        env=(f"PATH={DEFAULT_PATH}", "LANG=C.UTF-8", "HOME=/root", "TMPDIR=/tmp"),
        labels=(
            (LABEL_MANAGED, "1"),
            (LABEL_RUN_ID, run_id),
            (LABEL_OWNER, owner),
            (LABEL_EXPIRES_AT, str(int(time.time()) + BUILD_TIMEOUT_S)),
            (LABEL_VERSION, pybox_version),
        ),
        # Created on the bridge so it can be attached later; detached before start.
        network=BUILD_NETWORK,
        tmpfs=(("/tmp", f"rw,nosuid,nodev,noexec,size={BUILD_TMP_BYTES},mode=1777"),),
        memory_bytes=BUILD_MEMORY_BYTES,
        cpus=cpus,
        pids=BUILD_PIDS,
        confinement=confinement,
    )


def build_box_body(spec: BuildBoxSpec) -> JSONObject:
    """The build box's create body, built from its posture table only."""
    return body_from(build_requirements(spec))


def read_back_build_box(engine: Engine, spec: BuildBoxSpec, container_id: str) -> PostureReport:
    """The build box as the engine made it, checked against its table before start."""
    inspected = engine.inspect_container(container_id)
    if inspected is None:
        raise ImageBuildError("The build box vanished between create and inspect.")
    report = check_requirements(build_requirements(spec), inspected)
    if not report.ok:
        details = "; ".join(m.describe() for m in report.mismatches[:5])
        raise ImageBuildError(
            f"The build box was refused before start: {len(report.mismatches)} setting(s) "
            f"differ from what pybox asked for: {details}. Nothing was built; check the "
            "engine's configuration (`pybox doctor`)."
        )
    return report


def _tar(files: Mapping[str, bytes]) -> bytes:
    """A tar holding BUILD_DIR with `files`, owned by root, readable by root only."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        directory = tarfile.TarInfo(BUILD_DIR.lstrip("/"))
        directory.type = tarfile.DIRTYPE
        directory.mode = 0o700
        archive.addfile(directory)
        for name, data in files.items():
            info = tarfile.TarInfo(f"{BUILD_DIR.lstrip('/')}/{name}")
            info.size = len(data)
            info.mode = 0o600
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


# pip 23-26: "    six==1.17.0 from https://.../six-...whl (from -r FILE (line 1)):"
_HASH_FAILURE_RE = re.compile(r"^\s+(?P<pin>\S+==\S+) from (?P<url>\S+?)(?: \(from .*\))?:?$")
# "Expected sha256 HEX", then "Expected     or HEX" for each further allowed hash.
_EXPECTED_RE = re.compile(r"^\s+Expected\s+(?:sha256|or)\s+(?P<hex>[0-9a-f]+)")
_GOT_RE = re.compile(r"^\s+Got\s+(?P<hex>\S+)")
_NOT_FOUND_RE = re.compile(
    r"(?:Could not find a version that satisfies the requirement|"
    r"No matching distribution found for) (?P<pin>\S+)"
)
_COLLECTING_RE = re.compile(r"^Collecting (?P<pin>\S+)")
_UNREACHABLE_RE = re.compile(
    r"Retrying|NewConnectionError|Max retries exceeded|SSLError|CERTIFICATE_VERIFY_FAILED|"
    r"Temporary failure in name resolution|Could not fetch URL"
)


def explain_pip_failure(lines: list[str]) -> tuple[str | None, str]:
    """(package, why) from pip's output, as far as pip said."""
    for index, line in enumerate(lines):
        if "DO NOT MATCH THE HASHES" in line:
            for follow_index in range(index + 1, len(lines)):
                match = _HASH_FAILURE_RE.match(lines[follow_index])
                if match:
                    expected: list[str] = []
                    got = "?"
                    for after in lines[follow_index + 1 : follow_index + 40]:
                        if m := _EXPECTED_RE.match(after):
                            expected.append(m.group("hex"))
                        elif m := _GOT_RE.match(after):
                            got = m.group("hex")
                            break
                    return (
                        match.group("pin"),
                        f"the downloaded file's sha256 is {got}, but the lock allows only "
                        f"{' or '.join(expected) or '?'}: the lock is wrong or the file was "
                        "tampered with",
                    )
    unreachable = [line.strip() for line in lines if _UNREACHABLE_RE.search(line)]
    for line in lines:
        if unreachable and (match := _NOT_FOUND_RE.search(line)):
            return (
                match.group("pin"),
                f"the index could not be reached ({unreachable[-1][:200]}); check pip's index "
                "URL and CA bundle (pip config list) and this machine's network",
            )
        if match := _NOT_FOUND_RE.search(line):
            return (
                match.group("pin"),
                "no wheel of that version for this image's Python and platform on the index "
                "(only wheels are installed)",
            )
    collecting = [m.group("pin") for line in lines if (m := _COLLECTING_RE.match(line))]
    errors = [line.strip() for line in lines if line.startswith("ERROR")]
    why = errors[-1] if errors else (lines[-1].strip() if lines else "pip printed nothing")
    return (collecting[-1] if collecting else None, why)


class _PipProgress:
    """pip's milestones, with how many of the locked packages it has reached."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.collected = 0

    def __call__(self, line: str) -> str | None:
        if not line.startswith(_SHOWN_PIP_LINES):
            return None
        if line.startswith("Collecting"):
            self.collected += 1
            percent = 100 * self.collected // max(self.total, 1)
            requirement = line.split(" (from", maxsplit=1)[0]
            return f"[{self.collected}/{self.total} {percent:3d}%] {requirement}"
        return line


class _BuildBox:
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


def build_lock_image(
    engine: Engine,
    state: StateStore,
    plan: LockBuildPlan,
    pip: PipSettings,
    progress: Progress,
    *,
    owner: str,
    pybox_version: str,
    environ: Mapping[str, str],
    force: bool = False,
    confinement: Confinement | None = None,
) -> BuildResult:
    """Build, commit and record the image `plan` describes."""
    if plan.up_to_date and not force and plan.recorded is not None:
        progress(
            f"{plan.name} is up to date ({plan.recorded.image_id[:19]}, recipe "
            f"{plan.recipe.hash[:19]}); nothing to build"
        )
        return BuildResult(plan.recorded, built=False)
    progress(
        f"building {plan.name} as {plan.reference}: {len(plan.lock.requirements)} locked "
        f"package(s) from {plan.lock_path} on stdlib {plan.base.image_id[:19]}"
    )
    progress(f"pip's configuration: {pip.describe()}")
    for option, why in pip.skipped:
        progress(f"  not passed to the build box: {option} ({why})")
    started = time.monotonic()
    wheel_name, wheel = download_pip_wheel(plan.pip_lock, environ)
    progress(f"[{time.monotonic() - started:6.1f}s] fetched {wheel_name} (hash checked)")
    cert = read_cert(pip)
    files = {"requirements.txt": plan.lock.requirements_text().encode(), wheel_name: wheel}
    if cert is not None:
        files["ca.pem"] = cert
    info = engine.info()
    cpus = max(1, int(info.get("NCPU") or 1))
    run_id = secrets.token_hex(8)
    spec = build_box_spec(
        plan.base.image_id,
        run_id=run_id,
        owner=owner,
        pybox_version=pybox_version,
        cpus=cpus,
        confinement=confinement or engine_confinement(info, local_host=True),
    )
    container_id: str | None = None
    name = f"pybox-build-{run_id}"
    try:
        container_id = engine.create_container(name, build_box_body(spec))
        box = _BuildBox(engine, container_id, progress)
        box.started = started
        box.say(f"created build box {name} from stdlib")
        posture = read_back_build_box(engine, spec, container_id)
        box.say(
            f"posture read back before start: {len(posture.checked)} fields as asked "
            f"(seccomp profile {spec.confinement.seccomp_sha256[:19]})"
        )
        engine.disconnect_network(BUILD_NETWORK, container_id)
        if box.networks():
            raise ImageBuildError(f"The build box is still on {box.networks()} after detaching.")
        box.step(
            "put the lock, pip's wheel and the CA bundle into the box",
            lambda: engine.put_archive(container_id, "/", _tar(files)),
        )
        engine.start_container(container_id)
        venv_outcome = box.step(
            f"create a virtual environment at {VENV_DIR}",
            lambda: box.run([BASE_PYTHON, "-I", "-c", _VENV_SCRIPT], STEP_TIMEOUT_S),
        )
        _checked(venv_outcome, "creating the virtual environment")
        python = box_python(venv_outcome[1])
        _check_python(plan, python, box.say)
        install_argv = [
            VENV_PYTHON,
            f"{BUILD_DIR}/{wheel_name}/pip",
            "install",
            "--isolated",
            "--no-input",
            "--disable-pip-version-check",
            "--root-user-action=ignore",
            "--progress-bar=off",
            "--no-color",
            *INSTALL_OPTIONS,
            *pip.install_args(f"{BUILD_DIR}/ca.pem" if cert is not None else None),
            "-r",
            f"{BUILD_DIR}/requirements.txt",
        ]
        engine.connect_network(BUILD_NETWORK, container_id)
        try:
            code, lines = box.step(
                "install the locked packages (network attached for this step only)",
                lambda: box.run(
                    install_argv,
                    INSTALL_TIMEOUT_S,
                    show=_PipProgress(len(plan.lock.requirements)),
                ),
            )
        finally:
            engine.disconnect_network(BUILD_NETWORK, container_id)
        if code != 0:
            package, why = explain_pip_failure(lines)
            tail = "\n  ".join(redact(line) for line in lines[-12:])
            which = f" while installing {package}" if package else ""
            if python is not None:
                which += f" for {python.describe()}"
            raise ImageBuildError(
                f"Building {plan.name} failed{which}: {why.rstrip('.')}.\n"
                f"pip's last lines (exit {code}):\n  {tail}\n"
                f"Fix the lock file {plan.lock_path} and build again."
            )
        check_code, check_lines = box.step(
            "check the installed packages against the lock (network detached)",
            lambda: box.run([VENV_PYTHON, "-I", "-c", _CHECK_SCRIPT], STEP_TIMEOUT_S),
        )
        _checked((check_code, check_lines), "checking the installed packages")
        report = json.loads(check_lines[-1])
        installed = tuple(sorted(_normalized_pin(p) for p in report["packages"]))
        _compare(plan, installed)
        interfaces = tuple(report["interfaces"])
        if interfaces != ("lo",):
            raise ImageBuildError(
                f"The build box still had network interfaces {interfaces} after the install "
                "step; refusing to commit it."
            )
        _checked(
            box.step(
                "remove the build inputs",
                lambda: box.run([BASE_PYTHON, "-I", "-S", "-c", _CLEAN_SCRIPT], STEP_TIMEOUT_S),
            ),
            "removing the build inputs",
        )
        engine.kill_container(container_id)
        engine.wait_container(container_id, timeout_s=30.0)
        repo, tag = plan.reference.split(":", 1)
        image_id = box.step(
            f"commit as {plan.reference}",
            lambda: engine.commit(
                container_id, repo, tag, _image_config(plan, state_mark(str(state.root)))
            ),
        )
    except EngineError as exc:
        raise ImageBuildError(f"Building {plan.name} failed: the engine said: {exc}") from exc
    finally:
        if container_id is not None:
            confirmed = remove_and_confirm(engine, container_id)
            progress(
                f"build box {name} removed"
                + (" (confirmed)" if confirmed else ": NOT confirmed; run `pybox sweep`")
            )
    record = ImageRecord(
        name=plan.name,
        image_id=image_id,
        recipe_hash=plan.recipe.hash,
        python_path=VENV_PYTHON,
        built_at=datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
        env=IMAGE_ENV,
        packages=installed,
        recipe=plan.recipe.to_dict(),
        lock_path=str(plan.lock_path.resolve()),
        python=python.describe() if python is not None else None,
    )
    state.record_image(record)
    progress(
        f"[{time.monotonic() - started:6.1f}s] recorded {plan.name} as {image_id} "
        f"(recipe {plan.recipe.hash}, packages for "
        f"{record.python or 'a Python that did not say which it is'}) in {state.images_file}"
    )
    return BuildResult(record, True, tuple(box.steps), interfaces)


def _check_python(plan: LockBuildPlan, python: BoxPython | None, say: Progress) -> None:
    """Say which Python the packages are for; refuse, before the network is
    attached, a lock whose named wheels leave out this Python or machine."""
    if python is None:
        say("the image's Python did not say which it is; pip decides what fits")
        return
    say(f"installing for the image's Python: {python.describe()}, {BASE_PYTHON} of stdlib")
    missing = wheels_missing(plan.lock, python.tag, python.machine)
    if missing:
        covered = ", ".join(wheel_pythons(plan.lock)) or "none"
        raise ImageBuildError(
            f"{plan.lock_path} has no wheel for the image's Python, {python.describe()}, of "
            f"{', '.join(missing)} (its wheels are for {covered}). Regenerate the lock for "
            f"{python.tag} (scripts/lock), or build stdlib on a Debian suite whose python3 "
            "the lock covers."
        )


def _normalized_pin(pin: str) -> str:
    name, _, version = pin.partition("==")
    return f"{normalize_name(name)}=={version}"


def _checked(outcome: tuple[int | None, list[str]], what: str) -> None:
    code, lines = outcome
    if code != 0:
        tail = "\n  ".join(lines[-10:])
        raise ImageBuildError(f"The build failed {what} (exit {code}):\n  {tail}")


def _compare(plan: LockBuildPlan, installed: tuple[str, ...]) -> None:
    locked = set(plan.lock.pins)
    missing = sorted(locked - set(installed))
    extra = sorted(set(installed) - locked)
    if missing or extra:
        raise ImageBuildError(
            f"The installed packages differ from {plan.lock_path}: missing {missing or 'none'}, "
            f"not locked {extra or 'none'}. Regenerate the lock with all dependencies."
        )


def _image_config(plan: LockBuildPlan, state: str) -> JSONObject:
    """The committed image's whole configuration (the build box's own is not kept)."""
    return {
        "User": BOX_USER,
        "WorkingDir": WORK_DIR,
        "Env": [f"{key}={value}" for key, value in IMAGE_ENV] + ["LANG=C.UTF-8"],
        "Cmd": [VENV_PYTHON],
        "Entrypoint": None,
        "Hostname": "",
        "Labels": {
            # The engine merges the build box's labels into the image; blank them so
            # no container made from the image looks like a pybox box to a sweep.
            **dict.fromkeys(BUILD_BOX_LABELS, ""),
            LABEL_IMAGE: plan.name,
            LABEL_RECIPE: plan.recipe.hash,
            LABEL_PYTHON: VENV_PYTHON,
            LABEL_STATE: state,
        },
        "Healthcheck": {"Test": ["NONE"]},
    }


def lock_changed(record: ImageRecord) -> str | None:
    """Why the lock a record was built from no longer matches, or None.

    A lock file that is gone cannot be compared; the image is still pinned by ID
    and recipe label, so that alone does not stop a run.
    """
    if not record.lock_path or not record.lock_sha256:
        return None
    try:
        text = Path(record.lock_path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    now = "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()
    if now != record.lock_sha256:
        return (
            f"its lock file {record.lock_path} changed since the image was built "
            f"({record.lock_sha256[:19]} then, {now[:19]} now)"
        )
    return None
