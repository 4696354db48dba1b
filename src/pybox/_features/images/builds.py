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
removed, and confirmed gone, on every exit path. On Podman the commit is an
export of the box's filesystem imported with the image's configuration, one
flat layer (`pybox._engine.podman_commit`).
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from pybox._adapters.confinement import confinement as engine_confinement
from pybox._adapters.piptool import PipSettings, download_pip_wheel, read_cert, redact
from pybox._adapters.rootfs import Progress
from pybox._adapters.state import StateStore
from pybox._boxes.cleanup import remove_and_confirm
from pybox._core.display import plural
from pybox._core.errors import EngineError, ImageBuildError
from pybox._core.images import (
    LABEL_IMAGE,
    LABEL_PYTHON,
    LABEL_RECIPE,
    LABEL_STATE,
    ImageRecord,
    state_mark,
)
from pybox._core.locks import normalize_name, wheel_pythons, wheels_missing
from pybox._core.posture import BOX_USER, WORK_DIR
from pybox._core.preload import HOOK_FILE, hook_line
from pybox._core.seccomp import Confinement
from pybox._engine import Engine, JSONObject
from pybox._features.images.build_box import (
    BASE_PYTHON,
    BUILD_BOX_LABELS,
    BUILD_DIR,
    BUILD_NETWORK,
    BoxPython,
    BuildBox,
    BuildStep,
    box_python,
    build_box_spec,
    build_inputs_tar,
    create_build_box,
    pip_install_argv,
    read_back_build_box,
)
from pybox._features.images.lock_plans import (
    IMAGE_ENV,
    INSTALL_OPTIONS,
    VENV_DIR,
    VENV_PYTHON,
    LockBuildPlan,
)
from pybox._features.images.pip_output import PipProgress, explain_pip_failure
from pybox._features.images.records import Replaced

INSTALL_TIMEOUT_S = 1800.0
STEP_TIMEOUT_S = 300.0

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


def _venv_script(preload: tuple[str, ...]) -> str:
    """The venv step; for an image that preloads, it also writes the hook
    (pybox._core.preload.hook_line) into the venv's site-packages."""
    if not preload:
        return _VENV_SCRIPT
    return _VENV_SCRIPT + (
        f"site = {VENV_DIR!r} + '/lib/python%d.%d/site-packages' % sys.version_info[:2]\n"
        f"with open(site + '/' + {HOOK_FILE!r}, 'x') as hook: hook.write({hook_line()!r})\n"
    )


@dataclass(frozen=True)
class BuildResult:
    record: ImageRecord
    built: bool
    steps: tuple[BuildStep, ...] = ()
    interfaces_after_install: tuple[str, ...] = ()
    # The image this build replaced (set by ImageOperations.build), if any.
    replaced: Replaced | None = None


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
        f"building {plan.name} as {plan.reference}: "
        f"{plural(len(plan.lock.requirements), 'locked package')} from {plan.lock_path} "
        f"on stdlib {plan.base.image_id[:19]}"
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
        container_id = create_build_box(engine, name, spec)
        box = BuildBox(engine, container_id, progress)
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
            lambda: engine.put_archive(container_id, "/", build_inputs_tar(files)),
        )
        engine.start_container(container_id)
        venv_outcome = box.step(
            f"create a virtual environment at {VENV_DIR}",
            lambda: box.run(
                [BASE_PYTHON, "-I", "-c", _venv_script(plan.lock.preload)], STEP_TIMEOUT_S
            ),
        )
        _checked(venv_outcome, "creating the virtual environment")
        python = box_python(venv_outcome[1])
        _check_python(plan, python, box.say)
        install_argv = [
            *pip_install_argv(VENV_PYTHON, wheel_name, INSTALL_OPTIONS, pip, cert is not None),
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
                    show=PipProgress(len(plan.lock.requirements)),
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
        how = f" ({engine.commit_how})" if engine.commit_how else ""
        image_id = box.step(
            f"commit as {plan.reference}{how}",
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
