"""A keeper: the process that holds a Podman sandbox box's attach connection.

Podman's conmon closes a box's stdin as soon as an attach connection that
carried stdin ends (it is never started with `--leave-stdin-open`), so a box
that must outlive the process that made it (a sandbox, protocol 3) needs one
connection that lasts as long as the box. The keeper makes that connection
right after create and holds it; each pybox process that uses the box connects
to the keeper's unix socket instead, and the keeper relays: the client's bytes
to the box's stdin, the box's output to the client, framed as the engine frames
it (`DockerAttachStream` reads both the same way). What the box sends while no
client is connected is dropped whole-frame, as Docker drops it between attach
connections; `pybox._boxes.reattach.resync` finds its place either way.

One client at a time (operations on a sandbox hold its lock); others wait in
the listen queue. Only the keeper's own uid may connect (SO_PEERCRED). The
keeper ends when the box's stream ends (the box ended or was removed) or the
engine goes, and takes its socket with it. It interprets nothing it relays.
"""

from __future__ import annotations

import argparse
import os
import select
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

from pybox._adapters.unix_listener import listen_owner_only, peer_credentials
from pybox._core.errors import EngineError, PyboxError
from pybox._engine.client import DockerEngine
from pybox._engine.endpoint import EngineEndpoint
from pybox._engine.stream import DockerAttachStream, frame

HELLO_PREFIX = b"pybox-keeper 1 "
HELLO_MAX_BYTES = 256
CLIENT_SEND_TIMEOUT_S = 30.0
START_WAIT_S = 20.0
# How long a client waits to be accepted: the keeper serves one client at a
# time, and the one before (a process that was killed, say) may still be going.
HELLO_WAIT_S = 30.0
# The keeper runs isolated (-I: no PYTHON* variables, no user site, no current
# directory on sys.path), with this pybox's own tree first on its path.
_BOOT = (
    "import sys; sys.path.insert(0, sys.argv.pop(1)); "
    "from pybox._engine.keeper import main; sys.exit(main())"
)
_SOURCE_ROOT = Path(__file__).resolve().parents[2]
_RECV_BYTES = 65536
_SOCKET_NAME_CHARS = 32  # of the container ID: unix socket paths are short (108 bytes)


def keeper_dir() -> Path:
    """Where keepers' sockets are: a runtime directory, cleared at boot as boxes are."""
    if os.geteuid() == 0:
        return Path("/run/pybox/keepers")
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        return Path(runtime) / "pybox" / "keepers"
    return Path.home() / ".cache" / "pybox" / "keepers"


def socket_path(container_id: str, directory: Path | None = None) -> Path:
    return (directory or keeper_dir()) / f"{container_id[:_SOCKET_NAME_CHARS]}.sock"


def own_directory(directory: Path) -> Path:
    """`directory`, made if missing, owned by this user and closed to everyone else."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    info = directory.stat()
    if info.st_uid != os.geteuid() or stat.S_IMODE(info.st_mode) & 0o077:
        raise EngineError(
            f"The keepers' directory {directory} is not this user's alone (owner uid "
            f"{info.st_uid}, mode {stat.S_IMODE(info.st_mode):o}); remove it, and pybox "
            "makes it again with mode 700."
        )
    return directory


def hello(container_id: str) -> bytes:
    return HELLO_PREFIX + f"{container_id} {os.getpid()}\n".encode("ascii")


class KeeperGone(EngineError):
    """A sandbox box's keeper is not listening: Podman has closed the box's input."""


class Relay:
    """The keeper's loop: one attach stream to the box, one client at a time."""

    def __init__(
        self, stream: DockerAttachStream, listener: socket.socket, container_id: str
    ) -> None:
        self.stream = stream
        self.listener = listener
        self.container_id = container_id
        self.client: socket.socket | None = None

    def run(self) -> None:
        """Until the box's stream ends."""
        while True:
            if not self.stream.has_pending():
                other = self.client or self.listener
                readable, _, _ = select.select([self.stream.fileno(), other.fileno()], [], [])
                if other.fileno() in readable:
                    if self.client is None:
                        self._accept()
                    elif not self._from_client():
                        continue
            while self.stream.has_pending():
                chunk = self.stream.read(0)
                if chunk is None:
                    break
                source, data = chunk
                if source == 0:
                    self._drop_client()  # the client sees the end, as on the engine's attach
                    return
                self._to_client(source, data)

    def _accept(self) -> None:
        conn, _ = self.listener.accept()
        try:
            if peer_credentials(conn)[1] != os.geteuid():
                conn.close()  # another user's process: nothing said, nothing relayed
                return
            conn.settimeout(CLIENT_SEND_TIMEOUT_S)
            conn.sendall(hello(self.container_id))
        except OSError:
            conn.close()
            return
        self.client = conn

    def _from_client(self) -> bool:
        """Relay what the client sent; False when it has gone."""
        assert self.client is not None
        try:
            data = self.client.recv(_RECV_BYTES)
        except OSError:
            data = b""
        if not data:
            self._drop_client()
            return False
        self.stream.send(data)  # an EngineError here ends the keeper: the box is gone
        return True

    def _to_client(self, source: int, data: bytes) -> None:
        if self.client is None:
            return  # nobody attached: dropped, as the engine drops it
        try:
            self.client.sendall(frame(source, data))
        except OSError:
            self._drop_client()

    def _drop_client(self) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None

    def close(self) -> None:
        self._drop_client()
        self.listener.close()
        self.stream.close()


def start_keeper(engine_socket: str, api_version: str, container_id: str) -> int:
    """Start the keeper of a created box (it attaches before the box starts); its pid.

    The keeper detaches from this process (its own session, and a fork, so that
    it is never this process's child to reap)."""
    path = socket_path(container_id)
    own_directory(path.parent)
    read_fd, write_fd = os.pipe()
    argv = [
        sys.executable, "-I", "-c", _BOOT, str(_SOURCE_ROOT),
        "--engine-socket", engine_socket, "--api-version", api_version,
        "--container", container_id, "--socket", str(path), "--ready-fd", str(write_fd),
    ]  # fmt: skip
    try:
        try:
            process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                pass_fds=(write_fd,),
                start_new_session=True,
            )
        finally:
            os.close(write_fd)
        answer = _read_line(read_fd, START_WAIT_S)
    except OSError as exc:
        raise EngineError(
            f"pybox could not start the keeper of box {container_id[:12]}: {exc}"
        ) from exc
    finally:
        os.close(read_fd)
    try:
        process.wait(timeout=START_WAIT_S)
    except subprocess.TimeoutExpired:
        process.kill()  # it never got as far as its fork: ours, by its pid
        process.wait()
    word, _, rest = answer.partition(" ")
    if word == "ready" and rest.strip().isdigit():
        return int(rest)
    raise EngineError(
        f"The keeper of box {container_id[:12]} did not start "
        f"({rest.strip() or 'it ended without a word'}); the box is removed."
    )


def _read_line(fd: int, wait_s: float) -> str:
    data = b""
    deadline = time.monotonic() + wait_s
    while b"\n" not in data and (left := deadline - time.monotonic()) > 0:
        readable, _, _ = select.select([fd], [], [], left)
        if not readable:
            break
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        data += chunk
    return data.partition(b"\n")[0].decode("utf-8", "replace")


def connect_keeper(container_id: str, directory: Path | None = None) -> DockerAttachStream | None:
    """An attach stream through the box's keeper; None when the box has none."""
    path = socket_path(container_id, directory)
    if not path.exists():
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(HELLO_WAIT_S)
    try:
        sock.connect(str(path))
        data = b""
        while b"\n" not in data and len(data) < HELLO_MAX_BYTES:
            chunk = sock.recv(HELLO_MAX_BYTES)
            if not chunk:
                break
            data += chunk
    except OSError as exc:
        sock.close()
        raise KeeperGone(
            f"The keeper of box {container_id[:12]}, which holds its input open on Podman, "
            f"is gone ({exc}); Podman has closed the box's input, so the box cannot take "
            "another program. Destroy the sandbox and create a new one."
        ) from exc
    line, _, leftover = data.partition(b"\n")
    fields = line.removeprefix(HELLO_PREFIX).split()
    if not line.startswith(HELLO_PREFIX) or not fields or fields[0] != container_id.encode():
        sock.close()
        raise KeeperGone(
            f"The keeper socket {path} did not answer as the keeper of box "
            f"{container_id[:12]} ({line[:80]!r}); destroy the sandbox and create a new one."
        )
    return DockerAttachStream(sock, leftover)


def listen(path: Path) -> socket.socket:
    """A listening socket at `path`, owner-only; a stale socket there is replaced."""
    own_directory(path.parent)
    listener = listen_owner_only(path, 8)
    if listener is None:
        raise EngineError(f"Another keeper already listens at {path}.")
    return listener


def _ended(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="pybox-keeper")
    parser.add_argument("--engine-socket", required=True)
    parser.add_argument("--api-version", required=True)
    parser.add_argument("--container", required=True)
    parser.add_argument("--socket", required=True)
    parser.add_argument("--ready-fd", type=int, required=True)
    args = parser.parse_args(argv)
    ready = os.fdopen(args.ready_fd, "w", encoding="utf-8")
    path = Path(args.socket)
    try:
        engine = DockerEngine(EngineEndpoint(args.engine_socket, "keeper"), args.api_version)
        stream = engine.attach(args.container)
        listener = listen(path)
    except (PyboxError, OSError) as exc:  # a socket path too long, say: told to the creator
        ready.write(f"error {exc}\n")
        ready.close()
        return 1
    if os.fork():
        os._exit(0)  # the creator reaps this one at once; the keeper is not its child
    signal.signal(signal.SIGTERM, _ended)
    signal.signal(signal.SIGINT, _ended)
    relay = Relay(stream, listener, args.container)
    ready.write(f"ready {os.getpid()}\n")
    ready.close()
    try:
        relay.run()
    except EngineError:
        pass  # the attach connection broke: the engine or the box is gone
    finally:
        relay.close()
        try:
            path.unlink()
        except OSError:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
