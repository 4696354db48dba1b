"""One `pybox exec` run by the CLI pool service for its client (docs/pool.md).

The client's command line is parsed by the same parser, its request built by
the same function from the files the client sent, and prepared, run and
presented by the same code as a cold run (`_exec.exec_in_session`), with the
client's stdout and stderr (its terminal facts included) as the streams and
its signals as the stop. Until the client says "go" nothing has run, and any
refusal or failure tells the client to run cold instead; after it, a failure
is reported the way a cold run reports it.
"""

from __future__ import annotations

import argparse
import os
import socket
import threading
from typing import Protocol, TextIO, cast

from pybox._core.errors import InvalidRequest, PyboxError
from pybox._core.events import EventSink, RunEvent
from pybox._core.poolwire import (
    MAX_OUTPUT_BODY_BYTES,
    ExecRequest,
    WireError,
    encode_frame,
)
from pybox._core.request import PreparedRun, RunRequest
from pybox._orchestration.session import Session

GO_TIMEOUT_S = 10.0


class Fallback(Exception):
    """The client runs the command cold instead (nothing ran here)."""


class ReceiveFrame(Protocol):
    def __call__(
        self, sock: socket.socket, max_body_bytes: int = ..., within_s: float | None = ...
    ) -> tuple[dict[str, object], bytes]: ...


class Link:
    """The connection to one client: frames out under one lock, its frames read
    by a thread of their own once the run is handed over."""

    def __init__(
        self,
        sock: socket.socket,
        receive: ReceiveFrame,
    ) -> None:
        self.sock = sock
        self._receive = receive
        self._lock = threading.Lock()
        self.closed_fds: set[int] = set()
        self.cancel = threading.Event()
        self.gone = False
        self.handed_over = False  # the client said go: from now on it never runs cold

    def send(self, header: dict[str, object], body: bytes = b"") -> None:
        with self._lock:
            self.sock.sendall(encode_frame(header, body))

    def receive(self, within_s: float | None = None) -> tuple[dict[str, object], bytes]:
        """The client's next frame; with `within_s`, all of it within that time."""
        return self._receive(self.sock, within_s=within_s)

    def follow(self) -> None:
        """The client's frames during the run: a stop, a closed stream, or its end
        (the client died: the run is stopped as on Ctrl-C)."""
        try:
            while True:
                header, _ = self._receive(self.sock)
                kind = header.get("t")
                if kind == "cancel":
                    self.cancel.set()
                elif kind == "closed" and header.get("fd") in (1, 2):
                    self.closed_fds.add(int(str(header["fd"])))
                else:
                    raise WireError(f"unexpected frame {kind!r} during a run")
        except (OSError, PyboxError):
            self.gone = True
            self.cancel.set()


class RelayedStream:
    """A text stream whose bytes go to the client's stdout or stderr. It says what
    the client's stream is (a terminal or not, its TERM), so the presentation
    code decides exactly as it would in the client's own process."""

    def __init__(self, link: Link, fd: int, terminal: bool, term: str) -> None:
        self._link, self._fd, self._terminal = link, fd, terminal
        self.pybox_term = term
        self.buffer = self  # the live output writes bytes to `.buffer`

    def isatty(self) -> bool:
        return self._terminal

    def fileno(self) -> int:
        raise ValueError("a relayed stream has no descriptor here")

    def flush(self) -> None:
        pass

    def write(self, data: str | bytes) -> int:
        raw = data.encode("utf-8", "backslashreplace") if isinstance(data, str) else bytes(data)
        if not self._link.handed_over:
            return len(data)  # before go (a refusal the cold path will print): not shown
        if self._fd in self._link.closed_fds or self._link.gone:
            raise BrokenPipeError(f"the client's fd {self._fd} was closed")
        for at in range(0, len(raw), MAX_OUTPUT_BODY_BYTES):
            self._link.send({"t": "out", "fd": self._fd}, raw[at : at + MAX_OUTPUT_BODY_BYTES])
        return len(data)

    def as_text(self) -> TextIO:
        return cast(TextIO, self)


class ClientStop:
    """`StopOnSignal` for a client's signals: its "cancel" frame (or its death)
    sets the run's cancel flag."""

    def __init__(self, cancel: threading.Event, on_event: EventSink | None) -> None:
        self.cancel = cancel
        self._on_event = on_event

    def sink(self, event: RunEvent) -> None:
        if self._on_event is not None:
            self._on_event(event)

    def __enter__(self) -> ClientStop:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


def parse_exec(request: ExecRequest, own_config: str | None) -> argparse.Namespace:
    """The client's command line, parsed by `pybox`'s own parser; only a plain exec."""
    from pybox._frontends.cli import build_parser, parse

    try:
        args = parse(build_parser(), request.argv)
    except SystemExit:  # argparse said what is wrong (to the log): the cold path says it again
        raise Fallback("the command line does not parse") from None
    if getattr(args, "command", None) != "exec":
        raise Fallback("not an exec command")
    if args.output is not None:
        raise Fallback("--output writes files in the client's process: run cold")
    given = (
        None if args.config is None else os.path.normpath(os.path.join(request.cwd, args.config))
    )
    mine = None if own_config is None else os.path.abspath(own_config)
    if given != mine:
        raise Fallback(f"--config {given} is not the service's ({mine})")
    return args


def build_request(args: argparse.Namespace, request: ExecRequest) -> RunRequest:
    """The RunRequest, from the files the client read (none read here)."""
    from pybox._frontends.cli._exec import _exec_request

    def read(path: str, what: str) -> bytes:
        if path not in request.files:
            raise Fallback(f"the client did not send the {what} {path}")
        return request.files[path]

    def stdin() -> bytes:
        if request.stdin is None:
            raise Fallback("the client did not send the program's stdin")
        return request.stdin

    try:
        return _exec_request(args, read=read, stdin=stdin)
    except InvalidRequest as exc:
        raise Fallback(f"the request is refused ({exc}): the cold path says so") from None


def run_for_client(
    session: Session, link: Link, request: ExecRequest, own_config: str | None
) -> int:
    """Run the client's exec and present it; its exit code (for the caller to send),
    or raise Fallback before anything ran."""
    from pybox._frontends.cli import command_failed
    from pybox._frontends.cli._exec import exec_in_session

    args = parse_exec(request, own_config)
    run_request = build_request(args, request)
    out = RelayedStream(link, 1, request.tty_out, request.term).as_text()
    err = RelayedStream(link, 2, request.tty_err, request.term).as_text()

    def before_run(prepared: PreparedRun) -> None:
        link.send({"t": "prepared", "run_id": prepared.run_id})
        try:
            header, _ = link.receive(within_s=GO_TIMEOUT_S)
        except (OSError, PyboxError):
            raise Fallback("the client went away before the run") from None
        if header.get("t") != "go":
            raise Fallback("the client did not say go")
        link.sock.settimeout(None)
        link.handed_over = True
        threading.Thread(target=link.follow, name="pybox-pool-client", daemon=True).start()

    try:
        code = exec_in_session(
            args,
            session,
            run_request,
            None,
            stdout=out,
            stderr=err,
            stopper=lambda on_event: ClientStop(link.cancel, on_event),
            before_run=before_run,
        )
    except Fallback:
        raise
    except Exception as exc:
        if not link.handed_over:
            raise Fallback(f"{type(exc).__name__}: {exc}") from None
        try:
            code = command_failed(exc, err)
        except OSError:  # the client is gone
            code = 125
    return code
