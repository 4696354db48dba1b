"""`pybox exec` through the CLI pool service, when one is running (docs/pool.md).

This module is the client: it runs before the command line is even parsed and
imports almost nothing (no argparse, no session, no receipt), so a run through
the service costs a fresh interpreter, a connection and the run itself. It
sends the command line, the files the command names and the terminal's
facts; the service parses the same command line with the same parser,
prepares and runs the request with the same session code, and its
presentation (the same code as a cold run's) comes back as bytes for stdout
and stderr. Anything the client cannot hand over as it is, or any refusal or
failure before the service has been told to go, means `None`: the caller runs
the command cold, in this process. After "go" it never runs cold: the program
may have started.

It hands its program to no one but its own user's service: a socket in a
folder another user could write is not used, and after connecting the
kernel's word on the listener's uid (SO_PEERCRED) must be the client's own;
otherwise it says why and the command runs cold (`poolwire.folder_refusal`,
`poolwire.listener_refusal`).
"""

from __future__ import annotations

import _socket  # not socket: its enums and selectors cost every run (~3 ms)
import os
import struct
import sys

from pybox._core.locations import config_path, pool_socket_path, state_dir_path
from pybox._core.poolwire import (
    MAX_OUTPUT_BODY_BYTES,
    MAX_REQUEST_BODY_BYTES,
    PREFIX,
    WIRE_VERSION,
    WireError,
    decode_header,
    encode_frame,
    folder_refusal,
    frame_lengths,
    identity_of,
    listener_refusal,
)

EXIT_PYBOX_FAILED = 125
EXIT_STOPPED = 130
PREPARE_TIMEOUT_S = 30.0
# Which of exec's options take a value is its parser's word: this table is written
# from that parser by `python -m pybox._frontends.cli._execoptions`, and a unit test
# fails when it is stale (tests/unit/test_pool_wire.py).
# BEGIN exec's options (generated from its parser: do not edit).
# Options that take no value.
VALUELESS = frozenset(
    {
        "--help",
        "--json",
        "--quiet",
        "-h",
        "-q",
    }
)
# Options that take one value: the next word, or after "=".
ONE_VALUE = frozenset(
    {
        "--config",
        "--cpus",
        "--egress",
        "--engine",
        "--env",
        "--image",
        "--input",
        "--memory",
        "--open-files",
        "--output",
        "--output-limit",
        "--pids",
        "--runtime",
        "--stdin",
        "--timeout",
        "--writable",
    }
)
# END exec's options.
# These the service does not serve: printed or written here, so run cold.
COLD_OPTIONS = frozenset({"-h", "--help", "--output"})
# The options whose value is a file the service needs (the client sends it).
FILE_OPTIONS = frozenset({"--input", "--stdin"})


class _Plan:
    __slots__ = ("config", "files", "program", "stdin_file")

    def __init__(self) -> None:
        self.config: str | None = None
        self.program: str | None = None
        self.files: list[str] = []  # --input paths, as given
        self.stdin_file: str | None = None


def _plan(argv: list[str]) -> _Plan | None:
    """What the command line names, if it is a plain `pybox [--config F] exec ...`."""
    plan = _Plan()
    at = 0
    while at < len(argv) and argv[at] != "exec":
        item = argv[at]
        if item == "--config" and at + 1 < len(argv):
            plan.config, at = argv[at + 1], at + 2
        elif item.startswith("--config="):
            plan.config, at = item.partition("=")[2], at + 1
        else:
            return None
    at += 1
    while at < len(argv):
        item = argv[at]
        at += 1
        if item == "--":
            break
        if item == "-" or not item.startswith("-"):
            if plan.program is not None:
                return None  # the parser refuses it: let the cold path say so
            plan.program = item
            continue
        given, eq, value = item.partition("=")
        name = exec_option(given)
        if name is None or name in COLD_OPTIONS:
            return None  # unknown or ambiguous (the parser says so), or served here
        if name in VALUELESS:
            if eq:
                return None  # a value for a flag: the parser refuses it
            continue
        if not eq:
            if at >= len(argv):
                return None
            value, at = argv[at], at + 1
        if name == "--input":
            plan.files.append(value)
        elif name == "--stdin":
            plan.stdin_file = value
    return plan if plan.program is not None else None


def exec_option(given: str) -> str | None:
    """The option of exec's that argparse takes `given` for: itself, or the one long
    option it is an unambiguous prefix of (`--out` is not one: `--output`,
    `--output-limit`); None when there is none."""
    if given in VALUELESS or given in ONE_VALUE:
        return given
    if not given.startswith("--") or len(given) < 3:
        return None
    found = [name for name in (*VALUELESS, *ONE_VALUE) if name.startswith(given)]
    return found[0] if len(found) == 1 else None


def _state_dir(config: str | None) -> str | None:
    home = os.path.expanduser("~")
    state = state_dir_path(os.environ, home)
    path, _ = config_path(os.environ, home, config)
    try:
        with open(path, "rb") as handle:
            text = handle.read(MAX_REQUEST_BODY_BYTES)
    except OSError:
        return state
    if b"state_dir" in text and "PYBOX_STATE_DIR" not in os.environ:
        import tomllib  # only a config that names a state_dir pays for it

        try:
            chosen = tomllib.loads(text.decode("utf-8")).get("state_dir")
        except (UnicodeDecodeError, tomllib.TOMLDecodeError):
            return None  # the cold path says what is wrong with it
        if not isinstance(chosen, str):
            return None
        state = os.path.expanduser(chosen)
    return state


def _read_all(sock: _socket.socket, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise ConnectionResetError("the pool service closed the connection")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _receive(sock: _socket.socket) -> tuple[dict[str, object], bytes]:
    header_len, body_len = frame_lengths(_read_all(sock, PREFIX.size), MAX_OUTPUT_BODY_BYTES)
    header = decode_header(_read_all(sock, header_len))
    return header, _read_all(sock, body_len) if body_len else b""


class _Connection:
    def __init__(self, sock: _socket.socket) -> None:
        self.sock = sock
        self.closed_fds: set[int] = set()

    def send(self, header: dict[str, object]) -> None:
        try:
            self.sock.sendall(encode_frame(header))
        except OSError:
            pass  # the service is gone: the next receive says so

    def write(self, fd: int, data: bytes) -> None:
        if fd in self.closed_fds:
            return
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        except OSError:  # EPIPE: the reader went away; the service notes it
            self.closed_fds.add(fd)
            self.send({"t": "closed", "fd": fd})


def _request(plan: _Plan, argv: list[str], code_stdin: bytes | None) -> bytes | None:
    files: dict[str, list[int]] = {}
    parts: list[bytes] = []
    size = 0

    def add(path: str) -> list[int] | None:
        nonlocal size
        try:
            with open(path, "rb") as handle:
                data = handle.read(MAX_REQUEST_BODY_BYTES + 1)
        except OSError:
            return None
        where = [size, len(data)]
        size += len(data)
        parts.append(data)
        return where

    wanted = [*plan.files, *([plan.stdin_file] if plan.stdin_file else [])]
    if plan.program != "-":
        wanted.append(str(plan.program))
    for path in wanted:
        if path not in files:
            where = add(path)
            if where is None:
                return None  # the cold path names the file it cannot read
            files[path] = where
    stdin = None
    if code_stdin is not None:
        stdin, size = [size, len(code_stdin)], size + len(code_stdin)
        parts.append(code_stdin)
    if size > MAX_REQUEST_BODY_BYTES:
        return None
    header: dict[str, object] = {
        "t": "exec",
        "wire": WIRE_VERSION,
        "argv": argv,
        "cwd": os.getcwd(),
        "files": files,
        "stdin": stdin,
        "identity": identity_of(os.environ),
        "tty": [os.isatty(1), os.isatty(2)],
        "term": os.environ.get("TERM", ""),
    }
    return encode_frame(header, b"".join(parts))


def exec_through_service(argv: list[str]) -> tuple[int | None, bytes | None]:
    """Run `pybox exec` through the service: (its exit code, None), or (None, what
    was read from stdin, to hand to the cold path) when it must run here."""
    if os.environ.get("PYBOX_POOL", "").lower() in ("0", "off", "no"):
        return None, None
    plan = _plan(argv)
    if plan is None:
        return None, None
    state = _state_dir(plan.config)
    if state is None:
        return None, None
    path = pool_socket_path(state)
    folder = os.path.dirname(path)
    try:
        info = os.lstat(folder)
        os.lstat(path)
    except OSError:
        return None, None  # no folder or no socket: no service
    # Checked before connecting, and the listener after: code goes only to this user's own.
    refusal = folder_refusal(folder, info.st_uid, info.st_mode, os.geteuid())
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        if refusal is None:
            sock.connect(path)
            refusal = listener_refusal(path, _peer_uid(sock), os.geteuid())
    except OSError:
        sock.close()
        return None, None
    if refusal is not None:
        sock.close()
        _say(f"pybox: not using the pool service: {refusal}. Running cold.")
        return None, None
    try:
        code_stdin = sys.stdin.buffer.read() if plan.program == "-" else None
        return _exchange(sock, plan, argv, code_stdin), code_stdin
    except KeyboardInterrupt:  # before go: nothing ran (after it, _follow answers)
        _say("pybox: stopped before a box was started.")
        return EXIT_STOPPED, None
    finally:
        sock.close()


def _peer_uid(sock: _socket.socket) -> int | None:
    """The listening process's uid, from the kernel; None where it cannot say."""
    option = getattr(_socket, "SO_PEERCRED", None)
    if option is None:
        return None
    _pid, uid, _gid = struct.unpack("3i", sock.getsockopt(_socket.SOL_SOCKET, option, 12))
    return int(uid)


def _exchange(sock: _socket.socket, plan: _Plan, argv: list[str], code: bytes | None) -> int | None:
    frame = _request(plan, argv, code)
    if frame is None:
        return None
    sock.settimeout(PREPARE_TIMEOUT_S)
    try:
        sock.sendall(frame)
        header, _ = _receive(sock)
    except (OSError, WireError):
        return None  # refused or gone before anything ran: cold
    if header.get("t") != "prepared":
        return None  # "fallback": the service will not run it
    connection = _Connection(sock)
    try:
        sock.settimeout(None)
        sock.sendall(encode_frame({"t": "go"}))
    except OSError:
        return None  # not sent: the service never runs it
    # From here the program may run: never again in this process.
    return _follow(connection)


def _follow(connection: _Connection) -> int:
    # signal's enums cost ~1 ms; the C module does the same with plain numbers.
    import _signal  # type: ignore[import-not-found,unused-ignore]

    stops = 0

    def stop(signum: int, frame: object) -> None:
        nonlocal stops
        stops += 1
        if stops > 1:
            raise KeyboardInterrupt
        connection.send({"t": "cancel"})

    previous = {n: _signal.signal(n, stop) for n in (_signal.SIGINT, _signal.SIGTERM)}
    try:
        while True:
            header, body = _receive(connection.sock)
            kind = header.get("t")
            if kind == "out" and header.get("fd") in (1, 2):
                connection.write(int(str(header["fd"])), body)
            elif kind == "exit" and isinstance(header.get("code"), int):
                return int(str(header["code"]))
            else:
                raise WireError(f"unexpected frame {kind!r}")
    except KeyboardInterrupt:
        _say("pybox: stopped; the pool service ends the run and removes its box.")
        return EXIT_STOPPED
    except (OSError, WireError) as exc:
        _say(
            f"pybox: the pool service's connection failed after the run was handed over "
            f"({exc}); it was not run again here. See `pybox runs list` for its receipt, "
            "and `pybox pool status`."
        )
        return EXIT_PYBOX_FAILED
    finally:
        for signum, handler in previous.items():
            _signal.signal(signum, handler)


def _say(message: str) -> None:
    try:
        os.write(2, (message + "\n").encode("utf-8", "backslashreplace"))
    except OSError:
        pass
