"""The stdio transport: newline-delimited JSON-RPC on stdin and stdout.

stdout carries protocol messages only. `claim_stdio()` moves the real stdout
to a private descriptor that no child process inherits and points file
descriptor 1 (and `sys.stdout`) at stderr, so a stray print or a child's
output can never corrupt the stream. Every message is flushed as it is
written. End of input ends the server: runs still going are stopped and their
boxes removed before it exits.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import BinaryIO

from pybox._frontends.mcp._connection import Connection, log
from pybox._frontends.mcp._dispatcher import Dispatcher
from pybox._frontends.mcp._protocol import JSONObject, encode

DISCARD_CHUNK_BYTES = 1 << 16
SHUTDOWN_WAIT_S = 60.0


@contextmanager
def claim_stdio() -> Iterator[tuple[BinaryIO, BinaryIO]]:
    """The protocol's input and output; fd 0 reads /dev/null and fd 1 goes to stderr
    meanwhile. `os.dup` descriptors are not inherited by child processes."""
    sys.stdout.flush()
    protocol_in = os.dup(0)
    protocol_out = os.dup(1)
    saved_stdout = sys.stdout
    devnull = os.open(os.devnull, os.O_RDONLY)
    saved_fd0, saved_fd1 = os.dup(0), os.dup(1)
    try:
        os.dup2(devnull, 0)
        os.dup2(2, 1)
        sys.stdout = sys.stderr
        with os.fdopen(protocol_in, "rb") as reader, os.fdopen(protocol_out, "wb") as writer:
            yield reader, writer
    finally:
        sys.stdout = saved_stdout
        os.dup2(saved_fd0, 0)
        os.dup2(saved_fd1, 1)
        for fd in (devnull, saved_fd0, saved_fd1):
            os.close(fd)


class StdioServer:
    def __init__(self, dispatcher: Dispatcher, reader: BinaryIO, writer: BinaryIO) -> None:
        self.dispatcher = dispatcher
        self.reader = reader
        self.writer = writer
        self._write_lock = threading.Lock()
        self._broken = False

    def send(self, message: JSONObject | None) -> None:
        if message is None or self._broken:
            return
        data = encode(message) + b"\n"
        with self._write_lock:
            try:
                self.writer.write(data)
                self.writer.flush()
            except (BrokenPipeError, ValueError, OSError):
                self._broken = True  # the client is gone; the read loop ends at EOF

    def _frames(self) -> Iterator[bytes | int]:
        """Lines without their newline, or the size of a line that was too long."""
        limit = self.dispatcher.max_frame_bytes
        while True:
            line = self.reader.readline(limit + 1)
            if not line:
                return
            if len(line) > limit and not line.endswith(b"\n"):
                size = len(line)
                while True:  # drop the rest of the line without holding it
                    rest = self.reader.readline(DISCARD_CHUNK_BYTES)
                    size += len(rest)
                    if not rest or rest.endswith(b"\n"):
                        break
                yield size
                continue
            yield line.rstrip(b"\r\n")

    def serve(self) -> int:
        conn = Connection()
        log("serving MCP on stdio (newline-delimited JSON-RPC); logs go to stderr")
        try:
            for frame in self._frames():
                if isinstance(frame, int):
                    self.send(self.dispatcher.oversized(frame))
                elif frame.strip():
                    self.dispatcher.handle_frame(conn, frame, self.send)
        except KeyboardInterrupt:  # SIGTERM or Ctrl-C: the client's other way to say stop
            log("stopping on a signal")
        finally:
            conn.cancel_all()
            self.dispatcher.toolbox.registry.close(SHUTDOWN_WAIT_S)
            conn.join_workers(SHUTDOWN_WAIT_S)
            log("input closed; every run stopped and its box removed; exiting")
        return 0
