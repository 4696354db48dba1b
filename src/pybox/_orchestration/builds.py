"""Images from hash-locked lock files, built in a build box from the stdlib image.

The build box is a container pybox makes from the recorded stdlib image. It
runs as root in the container (every capability dropped, no-new-privileges,
memory, CPU and process caps) with a writable root, because the packages are
installed into it. Its network is detached before it starts and attached only
for the install step, which the engine's own view confirms at every step.
Nothing of this machine is mounted: the lock, pip's wheel and the CA bundle
arrive as an archive put into the box, and are deleted before the commit.

Steps: create -> detach network -> put build inputs -> start -> venv ->
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

from pybox._adapters.piptool import PipSettings, download_pip_wheel, read_cert, redact
from pybox._adapters.rootfs import Progress
from pybox._adapters.state import StateStore
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
    ImageRecord,
    Recipe,
    check_image_name,
)
from pybox._core.limits import MIB
from pybox._core.locks import Lock, normalize_name, parse_lock
from pybox._core.posture import (
    BOX_USER,
    DEFAULT_PATH,
    LABEL_EXPIRES_AT,
    LABEL_MANAGED,
    LABEL_OWNER,
    LABEL_RUN_ID,
    LABEL_VERSION,
    WORK_DIR,
)
from pybox._engine import Engine, JSONObject
from pybox._orchestration.cleanup import remove_and_confirm

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


def build_box_body(
    image_id: str, *, run_id: str, owner: str, pybox_version: str, cpus: int
) -> JSONObject:
    return {
        "Image": image_id,
        "User": "0:0",
        # The box ends itself if pybox never comes back; pybox kills it sooner.
        "Entrypoint": [
            BASE_PYTHON,
            "-I",
            "-S",
            "-c",
            f"import time; time.sleep({BUILD_TIMEOUT_S})",
        ],
        "Cmd": [],
        "Env": [f"PATH={DEFAULT_PATH}", "LANG=C.UTF-8", "HOME=/root", "TMPDIR=/tmp"],
        "WorkingDir": "/",
        "Hostname": "pybox-build",
        "Labels": {
            LABEL_MANAGED: "1",
            LABEL_RUN_ID: run_id,
            LABEL_OWNER: owner,
            LABEL_EXPIRES_AT: str(int(time.time()) + BUILD_TIMEOUT_S),
            LABEL_VERSION: pybox_version,
        },
        "Healthcheck": {"Test": ["NONE"]},
        "HostConfig": {
            # Created on the bridge so it can be attached later; detached before start.
            "NetworkMode": BUILD_NETWORK,
            "ReadonlyRootfs": False,
            "Tmpfs": {"/tmp": f"rw,nosuid,nodev,noexec,size={BUILD_TMP_BYTES},mode=1777"},
            "Binds": [],
            "Mounts": [],
            "Privileged": False,
            "CapDrop": ["ALL"],
            "CapAdd": [],
            "SecurityOpt": ["no-new-privileges"],
            "Devices": [],
            "IpcMode": "private",
            "CgroupnsMode": "private",
            "Memory": BUILD_MEMORY_BYTES,
            "MemorySwap": BUILD_MEMORY_BYTES,
            "NanoCpus": cpus * 1_000_000_000,
            "PidsLimit": BUILD_PIDS,
            "LogConfig": {"Type": "none", "Config": {}},
            "AutoRemove": False,
            "RestartPolicy": {"Name": "no"},
        },
    }


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


_HASH_FAILURE_RE = re.compile(r"^\s+(?P<pin>\S+==\S+) from (?P<url>\S+?):?$")
_EXPECTED_RE = re.compile(r"^\s+Expected sha256 (?P<hex>\S+)")
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
                    expected = got = "?"
                    for after in lines[follow_index + 1 : follow_index + 8]:
                        if m := _EXPECTED_RE.match(after):
                            expected = m.group("hex")
                        if m := _GOT_RE.match(after):
                            got = m.group("hex")
                    return (
                        match.group("pin"),
                        f"the downloaded file's sha256 is {got}, but the lock allows only "
                        f"{expected}: the lock is wrong or the file was tampered with",
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
    cpus = max(1, int(engine.info().get("NCPU") or 1))
    run_id = secrets.token_hex(8)
    body = build_box_body(
        plan.base.image_id, run_id=run_id, owner=owner, pybox_version=pybox_version, cpus=cpus
    )
    container_id: str | None = None
    name = f"pybox-build-{run_id}"
    try:
        container_id = engine.create_container(name, body)
        box = _BuildBox(engine, container_id, progress)
        box.started = started
        box.say(f"created build box {name} from stdlib")
        engine.disconnect_network(BUILD_NETWORK, container_id)
        if box.networks():
            raise ImageBuildError(f"The build box is still on {box.networks()} after detaching.")
        box.step(
            "put the lock, pip's wheel and the CA bundle into the box",
            lambda: engine.put_archive(container_id, "/", _tar(files)),
        )
        engine.start_container(container_id)
        _checked(
            box.step(
                f"create a virtual environment at {VENV_DIR}",
                lambda: box.run(
                    [BASE_PYTHON, "-m", "venv", "--without-pip", VENV_DIR], STEP_TIMEOUT_S
                ),
            ),
            "creating the virtual environment",
        )
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
            raise ImageBuildError(
                f"Building {plan.name} failed{which}: {why}.\n"
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
            lambda: engine.commit(container_id, repo, tag, _image_config(plan)),
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
    )
    state.record_image(record)
    progress(
        f"[{time.monotonic() - started:6.1f}s] recorded {plan.name} as {image_id} "
        f"(recipe {plan.recipe.hash}) in {state.images_file}"
    )
    return BuildResult(record, True, tuple(box.steps), interfaces)


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


def _image_config(plan: LockBuildPlan) -> JSONObject:
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
