"""The keeper of a Podman sandbox box, over real sockets (no engine): it relays one
client at a time, drops what the box says while nobody is connected, refuses
another uid, ends with the box's stream, and a client finds a dead keeper out.
"""

from __future__ import annotations

import os
import shutil
import socket
import stat
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from pybox._engine.keeper import (
    HELLO_PREFIX,
    KeeperGone,
    Relay,
    connect_keeper,
    listen,
    own_directory,
    socket_path,
)
from pybox._engine.stream import DockerAttachStream, frame

CONTAINER = "k" * 64


class _Box:
    """The engine's side of the keeper's attach connection."""

    def __init__(self) -> None:
        self.engine_side, keeper_side = socket.socketpair()
        self.stream = DockerAttachStream(keeper_side, b"")

    def say(self, data: bytes, source: int = 1) -> None:
        self.engine_side.sendall(frame(source, data))

    def heard(self, size: int) -> bytes:
        self.engine_side.settimeout(5)
        data = b""
        while len(data) < size:
            data += self.engine_side.recv(size - len(data))
        return data


@contextmanager
def _relaying(listener: socket.socket, name: str) -> Iterator[tuple[_Box, threading.Thread]]:
    """A keeper's relay in a thread, for a box; the box's stream ends at the end."""
    box = _Box()
    relay = Relay(box.stream, listener, name)
    thread = threading.Thread(target=relay.run, daemon=True)
    thread.start()
    try:
        yield box, thread
    finally:
        box.engine_side.close()
        thread.join(5)
        relay.close()


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A folder whose sockets fit the 107 bytes of a unix socket's address, which
    pytest's numbered tmp_path can exceed."""
    with tempfile.TemporaryDirectory(prefix="pbx-", dir="/tmp") as name:
        yield Path(name)


@pytest.fixture
def kept(short_tmp: Path) -> Iterator[tuple[_Box, Path, threading.Thread]]:
    folder = own_directory(short_tmp / "keepers")
    with _relaying(listen(socket_path(CONTAINER, folder)), CONTAINER) as (box, thread):
        yield box, folder, thread


def _read_until(stream: DockerAttachStream, wanted: bytes) -> bytes:
    got = b""
    deadline = time.monotonic() + 5
    while wanted not in got and time.monotonic() < deadline:
        chunk = stream.read(0.2)
        if chunk is not None:
            assert chunk[0] != 0, f"the stream ended after {got!r}"
            got += chunk[1]
    return got


def test_a_client_s_bytes_reach_the_box_and_the_box_s_output_comes_back_framed(
    kept: tuple[_Box, Path, threading.Thread],
) -> None:
    box, folder, _ = kept
    client = connect_keeper(CONTAINER, folder)
    assert client is not None
    client.send(b"hello box")
    assert box.heard(9) == b"hello box"
    box.say(b"out")
    box.say(b"err", source=2)
    assert client.read(5) == (1, b"out")
    assert client.read(5) == (2, b"err")
    client.close()


def test_what_the_box_says_between_clients_is_dropped_and_the_next_client_is_served(
    kept: tuple[_Box, Path, threading.Thread],
) -> None:
    box, folder, _ = kept
    first = connect_keeper(CONTAINER, folder)
    assert first is not None
    first.send(b"1")
    assert box.heard(1) == b"1"
    first.close()
    time.sleep(0.2)  # the keeper notices the first client has gone
    box.say(b"nobody hears this")
    time.sleep(0.2)
    second = connect_keeper(CONTAINER, folder)
    assert second is not None
    second.send(b"2")
    assert box.heard(1) == b"2"  # the box's stdin stayed open across clients
    box.say(b"ready")
    assert _read_until(second, b"ready") == b"ready"
    second.close()


def test_the_keeper_ends_with_the_box_s_stream_and_its_client_sees_the_end(
    kept: tuple[_Box, Path, threading.Thread],
) -> None:
    box, folder, thread = kept
    client = connect_keeper(CONTAINER, folder)
    assert client is not None
    box.engine_side.close()
    thread.join(5)
    assert not thread.is_alive()
    assert client.read(5) == (0, b"")
    client.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to connect as another uid")
def test_another_uid_is_refused_without_a_word() -> None:
    # pytest's own temporary folders are closed to other users: the socket must be
    # reachable for the keeper itself to be what refuses.
    folder = Path(tempfile.mkdtemp(prefix="pybox-keeper-test-"))
    os.chmod(folder, 0o755)
    path = folder / "k.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    os.chmod(path, 0o777)
    listener.listen(1)
    read_fd, write_fd = os.pipe()
    try:
        with _relaying(listener, CONTAINER):
            pid = os.fork()
            if pid == 0:  # the child: another uid
                try:
                    os.setuid(65534)
                    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                    sock.settimeout(5)
                    sock.connect(str(path))
                    os.write(write_fd, b"got:" + sock.recv(100))
                except BaseException as exc:
                    os.write(write_fd, repr(exc).encode())
                finally:
                    os._exit(0)
            os.close(write_fd)
            os.waitpid(pid, 0)
            answer = os.read(read_fd, 200)
    finally:
        os.close(read_fd)
        shutil.rmtree(folder)
    assert answer == b"got:"  # accepted, then closed: no hello, nothing relayed


def test_the_hello_names_the_container_and_the_keeper_s_pid(
    kept: tuple[_Box, Path, threading.Thread],
) -> None:
    _, folder, _ = kept
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(5)
    sock.connect(str(socket_path(CONTAINER, folder)))
    line = sock.recv(256)
    sock.close()
    assert line == HELLO_PREFIX + f"{CONTAINER} {os.getpid()}\n".encode()


def test_a_box_without_a_keeper_has_no_socket_and_a_dead_keeper_is_found_out(
    short_tmp: Path,
) -> None:
    folder = own_directory(short_tmp / "keepers")
    assert connect_keeper(CONTAINER, folder) is None
    # A keeper that was killed leaves its socket file: nobody listens there.
    listener = listen(socket_path(CONTAINER, folder))
    listener.close()
    with pytest.raises(KeeperGone, match="Destroy the sandbox"):
        connect_keeper(CONTAINER, folder)
    # A new keeper replaces the stale file; a live one is never replaced.
    live = listen(socket_path(CONTAINER, folder))
    with pytest.raises(Exception, match="already listens"):
        listen(socket_path(CONTAINER, folder))
    live.close()


def test_a_socket_that_answers_as_another_box_s_keeper_is_refused(short_tmp: Path) -> None:
    folder = own_directory(short_tmp / "keepers")
    other = "o" * 64
    with (
        _relaying(listen(socket_path(CONTAINER, folder)), other),
        pytest.raises(KeeperGone, match="did not answer as the keeper"),
    ):
        connect_keeper(CONTAINER, folder)


def test_the_keepers_directory_and_socket_are_the_user_s_alone(short_tmp: Path) -> None:
    folder = own_directory(short_tmp / "keepers")
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    listener = listen(socket_path(CONTAINER, folder))
    assert stat.S_IMODE(socket_path(CONTAINER, folder).stat().st_mode) == 0o600
    listener.close()
    open_folder = short_tmp / "open"
    open_folder.mkdir(mode=0o755)
    os.chmod(open_folder, 0o755)
    with pytest.raises(Exception, match="not this user's alone"):
        own_directory(open_folder)
    # Socket paths stay short: unix socket paths are at most 108 bytes.
    assert len(socket_path(CONTAINER, Path("/run/pybox/keepers")).as_posix()) < 108
