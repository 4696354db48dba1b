"""The CLI pool service: a per-user process holding warm boxes for `pybox exec`.

`pybox pool start` starts it detached (`pybox pool serve`, a session of its
own). It listens on a unix socket in pybox's state directory (the folder
0700, the socket 0600) and checks every connection's peer credentials
(SO_PEERCRED): another uid is refused, and the refusal is logged. Its boxes
come from the one warm pool (`pybox._boxes.pool`, the same settings, ceilings
and memory budget as the MCP server's), made by the same `Box` type; they
carry this process's owner label and an expiry, so if it dies the next pybox's
sweep removes them. See docs/pool.md.
"""

from __future__ import annotations

import os
import signal
import socket
import stat
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, BinaryIO

from pybox._core.errors import PyboxError, StateError
from pybox._core.locations import POOL_FOLDER, POOL_LOG, POOL_SOCKET, config_path
from pybox._core.poolwire import (
    MAX_REQUEST_BODY_BYTES,
    PREFIX,
    WIRE_VERSION,
    ExecRequest,
    WireError,
    decode_header,
    encode_frame,
    frame_lengths,
    identity_of,
)
from pybox._frontends.cli._poolexec import Fallback, Link, run_for_client
from pybox._orchestration.services import listen_owner_only, peer_credentials
from pybox._orchestration.session import Session

FIRST_FRAME_TIMEOUT_S = 10.0
# On stop, runs in progress may finish for this long before their boxes are removed.
STOP_GRACE_S = 120.0
MAX_CLIENTS = 64  # connections served at once; more are told to run cold
POOL_JSON_VERSION = 1


def pool_folder(state_dir: Path) -> Path:
    return state_dir / POOL_FOLDER


def own_folder(folder: Path) -> Path:
    """The service's folder, made owner-only (0700), and refused if anyone else
    owns it or it is a link."""
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        info = os.lstat(folder)
    except OSError as exc:
        raise StateError(
            f"Cannot make the pool service's folder {folder}: {exc.strerror}."
        ) from exc
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
        raise StateError(
            f"{folder} is not a folder of uid {os.geteuid()}: move it aside and start again."
        )
    os.chmod(folder, 0o700)
    return folder


def open_log(path: Path) -> BinaryIO:
    """The service's log, appended to, owner-only (0600) like its folder."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    os.fchmod(fd, 0o600)  # one made before, by hand or by an older pybox
    return os.fdopen(fd, "ab")


def _read_exactly(sock: socket.socket, size: int, deadline: float | None = None) -> bytes:
    chunks, left = [], size
    while left:
        if deadline is not None:
            # The whole frame within the time, however it is dripped: a client
            # sending a byte just before each recv's timeout is still cut off.
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise WireError("the frame did not arrive in time")
            sock.settimeout(remaining)
        try:
            chunk = sock.recv(min(left, 1 << 20))
        except TimeoutError:
            if deadline is None:
                raise
            raise WireError("the frame did not arrive in time") from None
        if not chunk:
            raise WireError("the connection ended within a frame")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def receive_frame(
    sock: socket.socket, max_body_bytes: int = 1 << 16, within_s: float | None = None
) -> tuple[dict[str, object], bytes]:
    """One frame; with `within_s`, all of it within that many seconds (else WireError).
    The socket's own timeout applies to each read otherwise."""
    deadline = None if within_s is None else time.monotonic() + within_s
    prefix = _read_exactly(sock, PREFIX.size, deadline)
    header_len, body_len = frame_lengths(prefix, max_body_bytes)
    header = decode_header(_read_exactly(sock, header_len, deadline))
    return header, _read_exactly(sock, body_len, deadline) if body_len else b""


def _config_stat(path: str | None) -> tuple[int, int, int, int] | None:
    if path is None:
        return None
    try:
        info = os.stat(path)
    except OSError:
        return None
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)


class PoolService:
    def __init__(
        self, session: Session, config: str | None, config_file: str | None, log_path: Path
    ) -> None:
        self.session = session
        self.config = config  # the --config it was started with
        self._config_file = config_file  # the file its settings came from, or would
        self._config_seen = _config_stat(config_file)
        self.identity = identity_of(os.environ)
        self.folder = own_folder(pool_folder(session.state_dir))
        self.socket_path = self.folder / POOL_SOCKET
        self._log_path = log_path
        self._log_lock = threading.Lock()
        self._clients = threading.BoundedSemaphore(MAX_CLIENTS)
        self._stop = threading.Event()
        self._counts = {"served": 0, "fallbacks": 0, "refused": 0}
        self._counts_lock = threading.Lock()
        self.started_at = time.time()
        self._listener: socket.socket | None = None
        self._threads: set[threading.Thread] = set()

    # -- the log and the numbers ------------------------------------------------------

    def log(self, message: str) -> None:
        line = f"{time.strftime('%Y-%m-%dT%H:%M:%S')} pid {os.getpid()}: {message}\n"
        with self._log_lock:
            try:
                with open_log(self._log_path) as handle:
                    handle.write(line.encode("utf-8", "backslashreplace"))
            except OSError:
                pass

    def _count(self, what: str) -> None:
        with self._counts_lock:
            self._counts[what] += 1

    def status(self) -> dict[str, Any]:
        stats = self.session.pool_stats()
        profiles = [
            {
                "image": p.key.image_name,
                "image_id": p.key.image_id,
                "code_name": p.key.code_name,
                "runtime": p.key.runtime.lane,
                "memory_mib": p.key.limits.memory_bytes // (1024 * 1024),
                "timeout_s": p.key.limits.timeout_s,
                "waiting": p.waiting,
                "starting": p.starting,
                "in_use": p.in_use,
                "target": p.target,
                "misses": p.misses,
            }
            for p in self.session.pool_profiles()
        ]
        with self._counts_lock:
            counts = dict(self._counts)
        return {
            "pybox_pool_version": POOL_JSON_VERSION,
            "running": True,
            "pid": os.getpid(),
            "socket": str(self.socket_path),
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.started_at)),
            "profiles": profiles,
            "hits": stats.taken if stats else 0,
            "misses": stats.missed if stats else 0,
            "boxes_started": stats.started if stats else 0,
            "box_failures": stats.failed if stats else 0,
            "last_error": stats.last_error if stats else None,
            **counts,
        }

    # -- listening --------------------------------------------------------------------

    def bind(self) -> None:
        listener = listen_owner_only(self.socket_path, 64)
        if listener is None:
            raise StateError(
                f"A pool service already listens on {self.socket_path}: `pybox pool status`."
            )
        self._listener = listener

    def serve_forever(self) -> None:
        assert self._listener is not None
        self._listener.settimeout(0.5)
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                if self._stop.is_set():
                    break
                raise
            if not self._clients.acquire(blocking=False):
                self._say_fallback(conn, "the service is serving as many clients as it can")
                conn.close()
                continue
            thread = threading.Thread(target=self._serve_one, args=(conn,), daemon=True)
            with self._counts_lock:
                self._threads = {t for t in self._threads if t.is_alive()} | {thread}
            thread.start()

    def stop(self) -> None:
        self._stop.set()

    def close(self) -> None:
        """Stop listening, let the runs in progress end (within STOP_GRACE_S), then
        remove every waiting box, confirmed."""
        if self._listener is not None:
            self._listener.close()
        try:
            os.unlink(self.socket_path)
        except OSError:
            pass
        deadline = time.monotonic() + STOP_GRACE_S
        with self._counts_lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join(timeout=max(deadline - time.monotonic(), 0.0))
        if any(thread.is_alive() for thread in threads):
            self.log(f"stopping with runs still going after {STOP_GRACE_S:g} s")
        left = self.session.close()
        if left:
            self.log(f"stopping: {len(left)} boxes not confirmed removed ({', '.join(left)})")
        self.log("stopped")

    # -- one connection ---------------------------------------------------------------

    def _say_fallback(self, conn: socket.socket, reason: str) -> None:
        try:
            conn.sendall(encode_frame({"t": "fallback", "reason": reason}))
        except OSError:
            pass

    def _serve_one(self, conn: socket.socket) -> None:
        try:
            with conn:
                self._handle(conn)
        except Exception as exc:  # the service outlives any one connection
            self.log(f"a connection failed: {type(exc).__name__}: {exc}")
        finally:
            self._clients.release()

    def _handle(self, conn: socket.socket) -> None:
        pid, uid = peer_credentials(conn)
        if uid != os.geteuid():
            self._count("refused")
            self.log(f"refused a connection from uid {uid} (pid {pid}): not this service's user")
            self._say_fallback(conn, "this pool service serves another user")
            return
        try:
            header, body = receive_frame(conn, MAX_REQUEST_BODY_BYTES, FIRST_FRAME_TIMEOUT_S)
        except (OSError, WireError) as exc:
            self.log(f"a bad first frame from pid {pid}: {exc}")
            return
        conn.settimeout(FIRST_FRAME_TIMEOUT_S)  # each send until the run is handed over
        kind = header.get("t")
        if kind == "status" and header.get("wire") == WIRE_VERSION:
            conn.sendall(encode_frame({"t": "status", "status": self.status()}))
        elif kind == "stop" and header.get("wire") == WIRE_VERSION:
            self.log(f"asked to stop by pid {pid}")
            conn.sendall(encode_frame({"t": "stopping", "pid": os.getpid()}))
            self.stop()
        elif kind == "exec":
            self._exec(conn, pid, header, body)
        else:
            self._say_fallback(conn, f"unknown request {kind!r}")

    def _exec(self, conn: socket.socket, pid: int, header: dict[str, object], body: bytes) -> None:
        link = Link(conn, receive_frame)
        try:
            request = ExecRequest(header, body)
            self._check_identity(request.identity)
            code = run_for_client(self.session, link, request, self.config)
        except (Fallback, WireError) as exc:
            self._count("fallbacks")
            self.log(f"pid {pid} runs cold: {exc}")
            self._say_fallback(conn, str(exc))
            return
        self._count("served")  # before the client hears the end: its status sees it
        try:
            link.send({"t": "exit", "code": code})
        except OSError:
            pass  # the client is gone; its run is over and recorded

    def _check_identity(self, identity: Mapping[str, str]) -> None:
        if identity != self.identity:
            names = sorted(
                name
                for name in {*identity, *self.identity}
                if identity.get(name) != self.identity.get(name)
            )
            raise Fallback(f"the environment differs from the service's: {', '.join(names)}")
        if _config_stat(self._config_file) != self._config_seen:
            raise Fallback(
                f"the config file {self._config_file} changed since the service started: "
                "`pybox pool stop` and `pybox pool start` to apply it"
            )


class _LateLog:
    """The session's log, written to the service's log once the service exists."""

    def __init__(self) -> None:
        self.to: PoolService | None = None

    def __call__(self, message: str) -> None:
        if self.to is not None:
            self.to.log(message)


def serve(config: str | None) -> int:
    """The service's process: open the session, listen, warm the default profile,
    serve until SIGTERM, SIGINT or a stop request; then remove every waiting box."""
    late = _LateLog()
    session = Session.open(os.environ, config, warm_pool=True, log=late, pool_service=True)
    folder = own_folder(pool_folder(session.state_dir))
    config_file, _ = config_path(os.environ, os.path.expanduser("~"), config)
    service = PoolService(session, config, config_file, folder / POOL_LOG)
    late.to = service
    service.bind()
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, lambda *_: service.stop())
    service.log(f"listening on {service.socket_path}")

    def warm() -> None:
        try:
            session.warm_up()  # the start-up sweep first: a killed service's boxes go
        except PyboxError as exc:
            service.log(f"could not warm the default profile: {exc}")

    threading.Thread(target=warm, name="pybox-pool-warm", daemon=True).start()
    try:
        service.serve_forever()
    finally:
        service.close()
    return 0
