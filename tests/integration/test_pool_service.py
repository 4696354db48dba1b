"""The CLI pool service on the real engine: exec through it, cold without it, another
uid refused, and no box outlives a killed service. Each test starts its own
service on a state directory of its own, and stops it (or kills it) itself."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pybox._core.posture import LABEL_OWNER
from pybox._engine import Engine
from tests.integration.conftest import boxes, run_cli
from tests.integration.test_cli import validate_exec_record

WAIT_S = 60.0


def owned_by(engine: Engine, pid: int) -> list[dict[str, object]]:
    found = []
    for box in boxes(engine):
        labels = box["Labels"]
        assert isinstance(labels, dict)
        if str(labels.get(LABEL_OWNER, "")).split(":")[1:2] == [str(pid)]:
            found.append(box)
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _until(what: str, check: object, timeout_s: float = WAIT_S) -> None:
    assert callable(check)
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"not within {timeout_s:g} s: {what}"
        time.sleep(0.1)


class Service:
    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        started = run_cli(["pool", "start"], env)
        assert started.returncode == 0, started.stderr.decode()
        self.pid = int(str(self.status()["pid"]))

    def status(self) -> dict[str, object]:
        result = run_cli(["pool", "status", "--json"], self.env)
        assert result.returncode == 0, result.stderr.decode()
        status: dict[str, object] = json.loads(result.stdout)
        assert status["pybox_pool_version"] == 1
        return status

    def waiting(self) -> int:
        profiles = self.status().get("profiles")
        assert isinstance(profiles, list)
        return sum(int(p["waiting"]) for p in profiles)

    def stop(self) -> None:
        if _alive(self.pid):
            run_cli(["pool", "stop"], self.env)
        if _alive(self.pid):  # pragma: no cover - a stop that did not work
            os.kill(self.pid, signal.SIGKILL)
        run_cli(["sweep"], self.env)


def _state(root: Path, state_dir: Path) -> dict[str, str]:
    state = root / "state"
    state.mkdir(mode=0o700)
    shutil.copy(state_dir / "images.json", state / "images.json")
    env = dict(os.environ)
    env["PYBOX_STATE_DIR"] = str(state)
    env["XDG_CONFIG_HOME"] = str(root / "config")
    env["PYBOX_POOL_BOXES"] = "1"
    env.pop("PYBOX_CONFIG", None)
    env.pop("PYBOX_POOL", None)
    return env


@pytest.fixture
def pool_env(tmp_path: Path, state_dir: Path) -> dict[str, str]:
    return _state(tmp_path, state_dir)


@pytest.fixture
def service(pool_env: dict[str, str]) -> Iterator[Service]:
    running = Service(pool_env)
    try:
        yield running
    finally:
        running.stop()


def _exec_json(env: dict[str, str]) -> dict[str, object]:
    result = run_cli(["exec", "--json", "-"], env, stdin=b"print(6*7)\n")
    assert result.returncode == 0, result.stderr.decode()
    record: dict[str, object] = json.loads(result.stdout)
    validate_exec_record(record)
    assert record["stdout"] == "42\n"
    return record


def _pybox_observed(record: dict[str, object]) -> dict[str, object]:
    receipt = record["receipt"]
    assert isinstance(receipt, dict)
    observed: dict[str, object] = receipt["observed_by_pybox"]
    return observed


def test_exec_runs_through_the_service_and_the_receipt_says_so(
    service: Service, engine: Engine
) -> None:
    _until("the service holds a warm box", lambda: service.waiting() >= 1)
    observed = _pybox_observed(_exec_json(service.env))
    assert observed["pool_service"] is True and observed["box_source"] == "warm_pool"
    # Plain output too: the program's on stdout, the receipt on stderr.
    result = run_cli(["exec", "-"], service.env, stdin=b"print(6*7)\n")
    assert (result.returncode, result.stdout) == (0, b"42\n")
    assert result.stderr.decode().startswith("pybox: succeeded, exit 0")
    assert "posture verified" in result.stderr.decode()
    status = service.status()
    assert status["served"] == 2 and status["refused"] == 0
    assert int(str(status["hits"])) >= 1
    service.stop()
    _until("the stopped service's boxes are gone", lambda: owned_by(engine, service.pid) == [])


def test_exec_runs_cold_when_the_service_is_gone_and_its_boxes_are_swept(
    service: Service, engine: Engine
) -> None:
    _until("the service holds a warm box", lambda: service.waiting() >= 1)
    assert owned_by(engine, service.pid) != []
    os.kill(service.pid, signal.SIGKILL)
    _until("the killed service is gone", lambda: not _alive(service.pid))
    # The socket is still there, with nobody listening: the run is cold, and its
    # session's start-up sweep removes the killed service's boxes.
    observed = _pybox_observed(_exec_json(service.env))
    assert observed["pool_service"] is False and observed["box_source"] == "fresh"
    assert int(str(observed["leftovers_swept"])) >= 1
    assert owned_by(engine, service.pid) == []


def test_no_box_outlives_a_killed_service(pool_env: dict[str, str], engine: Engine) -> None:
    first = Service(pool_env)
    second: Service | None = None
    try:
        _until("the service holds a warm box", lambda: first.waiting() >= 1)
        assert owned_by(engine, first.pid) != []
        os.kill(first.pid, signal.SIGKILL)
        _until("the killed service is gone", lambda: not _alive(first.pid))
        # The next service's start-up sweep removes them (`pybox sweep` would too).
        second = Service(pool_env)
        _until("the killed service's boxes are gone", lambda: owned_by(engine, first.pid) == [])
    finally:
        first.stop()
        if second is not None:
            second.stop()


CONNECT_AS_ANOTHER_USER = """
import json, socket, struct, sys
sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
sock.settimeout(10)
try:
    sock.connect(sys.argv[1])
except OSError as exc:
    print(json.dumps({"connect": exc.__class__.__name__}))
    raise SystemExit(0)
raw = json.dumps({"t": "status", "wire": 1}).encode()
try:
    sock.sendall(struct.pack("!II", len(raw), 0) + raw)
except OSError:
    pass  # refused before the request was read: the answer is still there to read
prefix = sock.recv(8, socket.MSG_WAITALL)
size = struct.unpack("!II", prefix)[0] if len(prefix) == 8 else 0
print(json.dumps({"answer": json.loads(sock.recv(size, socket.MSG_WAITALL)) if size else None}))
"""


def _as_user(user: pwd.struct_passwd, python: str, socket_path: Path) -> dict[str, object]:
    result = subprocess.run(
        [python, "-c", CONNECT_AS_ANOTHER_USER, str(socket_path)],
        user=user.pw_uid,
        group=user.pw_gid,
        extra_groups=[],
        capture_output=True,
        timeout=30,
        check=False,
        cwd="/",
        env={"PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stderr.decode()
    found: dict[str, object] = json.loads(result.stdout)
    return found


def test_another_uid_is_refused(state_dir: Path, engine: Engine) -> None:
    if os.geteuid() != 0:
        pytest.skip("connecting as another uid needs root to switch to it")
    try:
        other = pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no user `nobody` to connect as")
    python = "/usr/bin/python3"
    if not os.access(python, os.X_OK):
        pytest.skip(f"no {python} the other user can run")
    # Under /tmp, so that the other user can reach the folder once it is opened up.
    root = Path(tempfile.mkdtemp(prefix="pybox-pool-uid-"))
    running: Service | None = None
    try:
        env = _state(root, state_dir)
        running = Service(env)
        folder = Path(env["PYBOX_STATE_DIR"]) / "pool"
        sock = folder / "cli.sock"
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
        assert stat.S_IMODE(sock.stat().st_mode) == 0o600
        os.chmod(root, 0o711)
        os.chmod(folder.parent, 0o711)
        # As set up, another user cannot even reach the socket.
        assert _as_user(other, python, sock) == {"connect": "PermissionError"}
        # Opened up by mistake, the service still refuses it on its peer credentials.
        os.chmod(folder, 0o711)
        os.chmod(sock, 0o666)
        answer = _as_user(other, python, sock)["answer"]
        assert isinstance(answer, dict) and answer["t"] == "fallback", answer
        assert "another user" in str(answer["reason"])
        log = (folder / "service.log").read_text()
        assert f"refused a connection from uid {other.pw_uid}" in log
        assert running.status()["refused"] == 1
    finally:
        if running is not None:
            running.stop()
        shutil.rmtree(root, ignore_errors=True)


def test_the_client_never_uses_a_socket_in_a_folder_others_can_write(
    service: Service, engine: Engine
) -> None:
    """The real service's folder opened to the group: `pybox exec` runs cold and says
    why, `pybox pool status` refuses; made private again, the service is used."""
    folder = Path(service.env["PYBOX_STATE_DIR"]) / "pool"
    os.chmod(folder, 0o770)
    try:
        result = run_cli(["exec", "--json", "-"], service.env, stdin=b"print(6*7)\n")
        assert result.returncode == 0, result.stderr.decode()
        assert "can be written by other users (mode 0770)" in result.stderr.decode()
        assert "Running cold." in result.stderr.decode()
        observed = _pybox_observed(json.loads(result.stdout))
        assert observed["pool_service"] is False
        status = run_cli(["pool", "status"], service.env)
        assert status.returncode != 0 and b"can be written by other users" in status.stderr
    finally:
        os.chmod(folder, 0o700)
    assert _pybox_observed(_exec_json(service.env))["pool_service"] is True
    assert service.status()["served"] == 1


def test_the_client_sends_nothing_to_another_users_listener(
    pool_env: dict[str, str], engine: Engine
) -> None:
    """A listener of uid 65534 where the service's socket would be (the folder is
    ours): the kernel names its uid, `pybox exec` sends it nothing and runs cold."""
    if os.geteuid() != 0:
        pytest.skip("listening as another uid needs root to switch to it")
    folder = Path(pool_env["PYBOX_STATE_DIR"]) / "pool"
    folder.mkdir(mode=0o700)
    listener = (
        "import os, socket, sys\n"
        "s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
        "s.bind(sys.argv[1])\n"
        "os.setgid(65534); os.setuid(65534)\n"  # the kernel notes the uid at listen()
        "s.listen(1); s.settimeout(120); print('ready', flush=True)\n"
        "c, _ = s.accept(); c.settimeout(10)\n"
        "print(len(c.recv(1 << 16)), flush=True)\n"
    )
    child = subprocess.Popen(
        ["/usr/bin/python3", "-c", listener, str(folder / "cli.sock")],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        result = run_cli(["exec", "--json", "-"], pool_env, stdin=b"print(6*7)\n")
        out, _ = child.communicate(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert result.returncode == 0, result.stderr.decode()
    assert out == "0\n"  # connected, closed, not a byte of the program sent
    assert "runs as uid 65534, not as you (uid 0)" in result.stderr.decode()
    assert _pybox_observed(json.loads(result.stdout))["pool_service"] is False
