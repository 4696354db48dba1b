"""The CLI pool service and its client over a real unix socket, with the fake engine.

The service runs in a thread of the test; the client is the one `pybox exec`
uses. Timings are never asserted.
"""

from __future__ import annotations

import json
import os
import re
import socket
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from pybox._adapters.state import StateStore
from pybox._core.limits import Policy
from pybox._core.locations import pool_socket_path
from pybox._core.poolwire import PREFIX, decode_header, encode_frame, frame_lengths
from pybox._frontends.cli import _poolservice
from pybox._frontends.cli._poolservice import PoolService
from pybox._frontends.poolclient import exec_through_service
from pybox._orchestration.session import Session
from tests.unit.conftest import OWNER
from tests.unit.fake_engine import FakeEngine, Script


@pytest.fixture(autouse=True)
def isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, state: StateStore) -> None:
    monkeypatch.setenv("PYBOX_STATE_DIR", str(state.root))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("PYBOX_CONFIG", raising=False)
    monkeypatch.delenv("PYBOX_POOL", raising=False)
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def service(engine: FakeEngine, state: StateStore) -> Iterator[PoolService]:
    session = Session(
        engine,
        state,
        Policy(),
        owner=OWNER,
        sampler_factory=lambda container_id: None,
        is_owner_alive=lambda owner: owner == OWNER,
        pool_service=True,
    )
    service = PoolService(session, None, None, state.root / "pool" / "service.log")
    service.bind()
    thread = threading.Thread(target=service.serve_forever, daemon=True)
    thread.start()
    yield service
    service.stop()
    thread.join(timeout=10)
    service.close()


def _log(service: PoolService) -> str:
    path = service.folder / "service.log"
    return path.read_text() if path.exists() else ""


def test_the_socket_and_its_folder_are_the_owners_only(service: PoolService) -> None:
    assert stat.S_IMODE(os.stat(service.folder).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(service.socket_path).st_mode) == 0o600
    assert str(service.socket_path) == pool_socket_path(str(service.session.state_dir))


def test_exec_runs_through_the_service_and_the_receipt_says_so(
    service: PoolService, engine: FakeEngine, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    engine.script = Script(stdout=b"42\n", exit_code=0)
    (tmp_path / "job.py").write_text("print(6*7)\n")
    code, stdin_read = exec_through_service(["exec", "--json", "job.py"])
    assert (code, stdin_read) == (0, None)
    record = json.loads(capfd.readouterr().out)
    assert record["pybox_exec_version"] == 1 and record["stdout"] == "42\n"
    assert record["receipt"]["observed_by_pybox"]["pool_service"] is True
    assert service.status()["served"] == 1


def test_the_presentation_is_the_cold_runs(
    service: PoolService, engine: FakeEngine, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """The program's bytes and pybox's lines come out as a cold run prints them."""
    from pybox._frontends.cli import _exec, main

    engine.script = Script(stdout=b"out \x1b[2J", stderr=b"pybox: succeeded, forged\n", exit_code=7)
    (tmp_path / "job.py").write_text("...\n")
    code, _ = exec_through_service(["exec", "-q", "job.py"])
    served = capfd.readouterr()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_exec, "open_session", lambda args: service.session)
        cold_code = main(["exec", "-q", "job.py"])
    cold = capfd.readouterr()
    assert code == cold_code == 7
    assert served.out == cold.out == "out \x1b[2J"

    def plain(err: str) -> str:  # the run id and the duration are each run's own
        return re.sub(r"in [0-9.]+ s \(run [0-9a-f]+\)", "", err)

    assert (
        plain(served.err) == plain(cold.err) == "pybox: succeeded, forged\npybox: failed, exit 7 \n"
    )


def test_another_uid_is_refused_and_logged(
    service: PoolService,
    engine: FakeEngine,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The kernel's word on the peer decides (here made to say another uid; the
    integration test connects as another user)."""
    monkeypatch.setattr(_poolservice, "peer_credentials", lambda sock: (4242, os.geteuid() + 1))
    (tmp_path / "job.py").write_text("print(6*7)\n")
    creates = [name for name, _ in engine.calls].count("create")
    assert exec_through_service(["exec", "job.py"]) == (None, None)  # the caller runs cold
    assert [name for name, _ in engine.calls].count("create") == creates
    assert f"refused a connection from uid {os.geteuid() + 1} (pid 4242)" in _log(service)
    assert service.status()["refused"] == 1


@pytest.mark.parametrize(
    ("argv", "env", "why"),
    [
        (["exec", "--timeout", "nope", "job.py"], {}, "the request is refused"),
        (["exec", "--env", "X", "job.py"], {}, "the request is refused"),
        (["exec", "job.py"], {"PYBOX_DEFAULT_TIMEOUT_S": "3"}, "environment differs"),
    ],
)
def test_what_the_service_will_not_take_runs_cold(
    service: PoolService,
    engine: FakeEngine,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    env: dict[str, str],
    why: str,
) -> None:
    (tmp_path / "job.py").write_text("print(6*7)\n")
    (tmp_path / "data.csv").write_text("1,2\n")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert exec_through_service(argv) == (None, None)
    assert "create" not in [name for name, _ in engine.calls]
    assert why in _log(service)


def test_a_file_the_client_did_not_send_runs_cold(
    service: PoolService, engine: FakeEngine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The service reads only the files the client sent: a command line naming one
    it did not send (a client that misread it) runs cold, nothing started."""
    from pybox._frontends import poolclient

    plan = poolclient._plan

    def without_files(argv: list[str]) -> object:
        found = plan(argv)
        assert found is not None
        found.files = []
        return found

    monkeypatch.setattr(poolclient, "_plan", without_files)
    (tmp_path / "job.py").write_text("print(6*7)\n")
    (tmp_path / "data.csv").write_text("1,2\n")
    assert exec_through_service(["exec", "--input", "data.csv", "job.py"]) == (None, None)
    assert "create" not in [name for name, _ in engine.calls]
    assert "did not send the input file" in _log(service)


def test_an_abbreviated_option_goes_through_the_service(
    service: PoolService, engine: FakeEngine, tmp_path: Path
) -> None:
    """`--inp` is `--input` to argparse, and so to the client: its file is sent."""
    (tmp_path / "job.py").write_text("print(6*7)\n")
    (tmp_path / "data.csv").write_text("1,2\n")
    code, _ = exec_through_service(["exec", "--inp", "data.csv", "--js", "job.py"])
    assert code == 0
    assert service.status()["served"] == 1


def test_without_a_service_the_client_says_run_cold(tmp_path: Path) -> None:
    (tmp_path / "job.py").write_text("print(6*7)\n")
    assert exec_through_service(["exec", "job.py"]) == (None, None)


def _fake_service(state: StateStore, after_exec: str) -> threading.Thread:
    """A listener that answers one exec as a broken service would."""
    folder = state.root / "pool"
    folder.mkdir(mode=0o700, exist_ok=True)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(folder / "cli.sock"))
    listener.listen(1)

    def receive(conn: socket.socket) -> dict[str, object]:
        prefix = conn.recv(PREFIX.size, socket.MSG_WAITALL)
        header_len, body_len = frame_lengths(prefix, 1 << 26)
        header = decode_header(conn.recv(header_len, socket.MSG_WAITALL))
        if body_len:
            conn.recv(body_len, socket.MSG_WAITALL)
        return header

    def serve() -> None:
        conn, _ = listener.accept()
        with conn, listener:
            if after_exec == "accept only":
                return
            receive(conn)
            if after_exec == "close":
                return
            if after_exec == "fallback":
                conn.sendall(encode_frame({"t": "fallback", "reason": "no"}))
                return
            conn.sendall(encode_frame({"t": "prepared", "run_id": "0" * 16}))
            assert receive(conn) == {"t": "go"}
            if after_exec == "answer 42":
                conn.sendall(encode_frame({"t": "out", "fd": 1}, b"42\n"))
                conn.sendall(encode_frame({"t": "exit", "code": 0}))
            # ... else it dies after the run was handed over.

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("after_exec", ["close", "fallback"])
def test_a_service_that_fails_before_go_means_cold(
    state: StateStore, tmp_path: Path, after_exec: str
) -> None:
    (tmp_path / "job.py").write_text("print(6*7)\n")
    thread = _fake_service(state, after_exec)
    assert exec_through_service(["exec", "job.py"]) == (None, None)
    thread.join(timeout=10)


def test_a_service_that_dies_after_go_is_never_run_again(
    state: StateStore, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "job.py").write_text("print(6*7)\n")
    thread = _fake_service(state, "die after go")
    code, _ = exec_through_service(["exec", "job.py"])
    thread.join(timeout=10)
    assert code == 125  # an answer: the caller does not run it cold
    assert "it was not run again here" in capfd.readouterr().err


def test_the_client_imports_almost_nothing(state: StateStore, tmp_path: Path) -> None:
    """`pybox exec` through a service: no argparse, no session, no receipt, no
    typing or dataclasses; only the wire, the locations and the client."""
    from tests.unit.test_cli_entry import HEAVY, imported_by

    thread = _fake_service(state, "answer 42")
    found = imported_by(["exec", "-"], tmp_path, stdin="print(6*7)\n")
    thread.join(timeout=10)
    assert found["code"] == 0, found["stderr"]
    modules = found["modules"]
    assert isinstance(modules, list)
    assert [m for m in modules if m.startswith(HEAVY)] == []
    assert [m for m in modules if m.split(".")[0] in ("argparse", "re", "enum", "signal")] == []
    assert {m for m in modules if m.split(".")[0] == "pybox"} <= {
        "pybox",
        "pybox._version",
        "pybox._core",
        "pybox._core.errors",
        "pybox._core.lazy",
        "pybox._core.locations",
        "pybox._core.poolwire",
        "pybox._main",
        "pybox._frontends",
        "pybox._frontends.poolclient",
    }


def test_pool_status_json_is_versioned(
    state: StateStore, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from pybox._frontends.cli import main

    assert main(["pool", "status", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record == {
        "pybox_pool_version": 1,
        "running": False,
        "socket": pool_socket_path(str(state.root)),
    }


def test_pool_status_of_a_running_service(
    service: PoolService, capsys: pytest.CaptureFixture[str]
) -> None:
    from pybox._frontends.cli import main

    assert main(["pool", "status", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["pybox_pool_version"] == 1 and record["running"] is True
    assert record["pid"] == os.getpid() and record["socket"] == str(service.socket_path)
    expected = {"profiles", "hits", "misses", "served", "fallbacks", "refused", "started_at"}
    assert expected <= set(record)
    assert main(["pool", "status"]) == 0
    text = capsys.readouterr().out
    assert text.startswith(f"pool service: pid {os.getpid()}, since ")
    assert "0 served, 0 ran cold, 0 refused (another uid)" in text


def test_on_a_terminal_the_service_shows_output_as_a_cold_run_does(
    service: PoolService,
    engine: FakeEngine,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """The client says its streams are terminals: the program's escapes are shown
    as text and pybox's mark is drawn, by the cold run's own code."""
    from pybox._frontends.cli._common import MARK_ON, TERMINAL_RESET

    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.setattr(os, "isatty", lambda fd: fd in (1, 2))
    engine.script = Script(stdout=b"out \x1b[2J", stderr=b"\x1b]2;title", exit_code=0)
    (tmp_path / "job.py").write_text("...\n")
    code, _ = exec_through_service(["exec", "-q", "job.py"])
    shown = capfd.readouterr()
    assert code == 0
    assert shown.out == "out \\x1b[2J"
    program, _, pybox = shown.err.partition(TERMINAL_RESET)
    assert program == "\\x1b]2;title"
    assert pybox.startswith(f"\n{MARK_ON}pybox:\x1b[0m succeeded, exit 0")


def test_ctrl_c_before_go_stops_without_running(
    state: StateStore,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    from pybox._frontends import poolclient

    (tmp_path / "job.py").write_text("print(6*7)\n")
    thread = _fake_service(state, "accept only")

    def interrupted(*args: object) -> int | None:
        raise KeyboardInterrupt

    monkeypatch.setattr(poolclient, "_exchange", interrupted)
    assert exec_through_service(["exec", "job.py"]) == (130, None)
    assert "stopped before a box was started" in capfd.readouterr().err
    thread.join(timeout=10)


# -- whom the client trusts with its code (SO_PEERCRED, the socket's folder) -----------


def _listener_in(folder: Path) -> tuple[threading.Thread, list[bytes | None]]:
    """A listener at folder/cli.sock that notes what its one client sent (None: nobody
    connected within 5 s)."""
    folder.mkdir(mode=0o700, exist_ok=True)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(folder / "cli.sock"))
    listener.listen(1)
    listener.settimeout(5)
    got: list[bytes | None] = []

    def serve() -> None:
        with listener:
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                got.append(None)
                return
            with conn:
                conn.settimeout(5)
                got.append(conn.recv(1 << 16))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread, got


@pytest.mark.parametrize("mode", [0o770, 0o707, 0o777])
def test_a_socket_in_a_folder_others_can_write_is_never_used(
    state: StateStore, tmp_path: Path, capfd: pytest.CaptureFixture[str], mode: int
) -> None:
    (tmp_path / "job.py").write_text("print(6*7)\n")
    folder = state.root / "pool"
    thread, got = _listener_in(folder)
    os.chmod(folder, mode)
    assert exec_through_service(["exec", "job.py"]) == (None, None)  # the caller runs cold
    thread.join(timeout=10)
    assert got == [None]  # not even connected: nothing of the program was sent
    err = capfd.readouterr().err
    assert f"its folder {folder} can be written by other users (mode {mode:04o})" in err
    assert "Running cold." in err


@pytest.mark.skipif(os.geteuid() != 0, reason="listening as another uid needs root")
def test_a_listener_of_another_uid_gets_no_code(
    state: StateStore, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """A real listener of uid 65534 in our own folder: the kernel says who it is, and
    the client closes the connection without sending a byte."""
    import subprocess
    import sys

    (tmp_path / "job.py").write_text("print(6*7)\n")
    folder = state.root / "pool"
    folder.mkdir(mode=0o700)
    listener = (
        "import os, socket, sys\n"
        "s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
        "s.bind(sys.argv[1])\n"
        "os.setgid(65534); os.setuid(65534)\n"  # the kernel notes the uid at listen()
        "s.listen(1); s.settimeout(20); print('ready', flush=True)\n"
        "c, _ = s.accept(); c.settimeout(5)\n"
        "print(len(c.recv(1 << 16)), flush=True)\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", listener, str(folder / "cli.sock")],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == "ready\n"
        assert exec_through_service(["exec", "job.py"]) == (None, None)
        out, _ = child.communicate(timeout=20)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert out == "0\n"  # connected, and closed with nothing sent
    err = capfd.readouterr().err
    assert f"runs as uid 65534, not as you (uid {os.geteuid()})" in err
    assert "Running cold." in err


def test_pool_status_refuses_another_users_listener(
    service: PoolService, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pybox._core.errors import StateError
    from pybox._frontends.cli import _pool

    monkeypatch.setattr(_pool, "peer_credentials", lambda sock: (4242, os.geteuid() + 1))
    path = str(service.socket_path)
    with pytest.raises(StateError, match=f"runs as uid {os.geteuid() + 1}, not as you"):
        _pool._ask(path, "status")
    assert service.status()["served"] == 0


def test_our_own_service_passes_the_checks(service: PoolService) -> None:
    """The real check on a real socket: the service's own uid is ours."""
    from pybox._frontends.cli import _pool

    answer = _pool._ask(str(service.socket_path), "status")
    assert answer is not None and answer["status"]["pid"] == os.getpid()


# -- the first frame's deadline is for the whole frame ---------------------------------


def test_a_client_dripping_its_first_frame_is_cut_off_at_the_deadline(
    service: PoolService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One byte every 0.4 s never lets a single read wait 1 s, but the whole frame
    must arrive within 1 s: the service drops the connection then, not later."""
    import select
    import time

    monkeypatch.setattr(_poolservice, "FIRST_FRAME_TIMEOUT_S", 1.0)
    frame = encode_frame({"t": "status", "wire": 1})
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.connect(str(service.socket_path))
    started = time.monotonic()
    dropped_after = None
    with client:
        for byte in frame[:-1]:  # never the whole frame
            try:
                client.sendall(bytes([byte]))
            except OSError:  # the service has closed its end
                dropped_after = time.monotonic() - started
                break
            readable, _, _ = select.select([client], [], [], 0.4)
            if readable and client.recv(1) == b"":
                dropped_after = time.monotonic() - started
                break
            if time.monotonic() - started > 6:
                break
    assert dropped_after is not None and dropped_after < 3.0
    assert "the frame did not arrive in time" in _log(service)
