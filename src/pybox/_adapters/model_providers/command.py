"""A local command as the model: the prompt on stdin, the reply on stdout.

The command runs without a shell, in a process group of its own, so it can be
ended whole when the time or the reply bytes run out or the repair is
cancelled.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Mapping
from typing import IO

from pybox._core.display import escape_text
from pybox._core.errors import ModelError, ModelReplyTooLarge, ModelTimeout
from pybox._core.repair import Prompt

POLL_S = 0.1
STDERR_TAIL_BYTES = 2000
READ_CHUNK = 64 * 1024


class CommandProvider:
    """Runs `argv` (never through a shell) once per call: prompt on stdin, reply on stdout."""

    def __init__(self, argv: tuple[str, ...], environ: Mapping[str, str]) -> None:
        self.argv = argv
        self.environ = dict(environ)

    def ask(
        self,
        prompt: Prompt,
        *,
        timeout_s: float,
        max_reply_bytes: int,
        cancel: threading.Event | None = None,
    ) -> str:
        deadline = time.monotonic() + timeout_s
        name = self.argv[0]
        try:
            process = subprocess.Popen(
                self.argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=self.environ,
                start_new_session=True,  # its own process group, so it can be ended whole
            )
        except OSError as exc:
            raise ModelError(
                f"Cannot start the model command {name!r}: {exc.strerror or exc}. Check that "
                "it is installed and on PATH."
            ) from exc
        try:
            return self._talk(process, prompt, deadline, max_reply_bytes, cancel)
        finally:
            if process.poll() is None:
                _end_group(process)

    def _talk(
        self,
        process: subprocess.Popen[bytes],
        prompt: Prompt,
        deadline: float,
        max_reply_bytes: int,
        cancel: threading.Event | None,
    ) -> str:
        assert process.stdin is not None and process.stdout is not None
        assert process.stderr is not None
        writer = threading.Thread(
            target=_feed, args=(process.stdin, prompt.text.encode("utf-8")), daemon=True
        )
        writer.start()
        reply = bytearray()
        stderr_tail = bytearray()
        with selectors.DefaultSelector() as selector:
            selector.register(process.stdout, selectors.EVENT_READ, "out")
            selector.register(process.stderr, selectors.EVENT_READ, "err")
            while selector.get_map():
                if cancel is not None and cancel.is_set():
                    raise ModelError("The model command was stopped: the repair was cancelled.")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ModelTimeout(
                        f"The model command {self.argv[0]!r} did not answer in time; it was ended."
                    )
                for key, _ in selector.select(min(left, POLL_S)):
                    stream: IO[bytes] = key.fileobj  # type: ignore[assignment]
                    data = os.read(stream.fileno(), READ_CHUNK)
                    if not data:
                        selector.unregister(stream)
                    elif key.data == "out":
                        reply += data
                        if len(reply) > max_reply_bytes:
                            raise ModelReplyTooLarge(
                                f"The model command's reply passed {max_reply_bytes} bytes "
                                "(the reply bytes left); it was ended."
                            )
                    else:
                        stderr_tail = (stderr_tail + data)[-STDERR_TAIL_BYTES:]
        try:
            code = process.wait(timeout=max(deadline - time.monotonic(), 0.01))
        except subprocess.TimeoutExpired:
            raise ModelTimeout(
                f"The model command {self.argv[0]!r} closed its output but did not exit in "
                "time; it was ended."
            ) from None
        if code != 0:
            # The command's own words, on one line and with nothing a terminal acts on.
            detail = escape_text(stderr_tail.decode("utf-8", "replace").strip())
            raise ModelError(
                f"The model command {self.argv[0]!r} failed with exit status {code}"
                + (f": {detail}" if detail else " and printed nothing on stderr")
            )
        return reply.decode("utf-8", "replace")


def _feed(stdin: IO[bytes], data: bytes) -> None:
    try:
        stdin.write(data)
    except (BrokenPipeError, OSError):
        pass  # the command stopped reading; its exit status and output say the rest
    finally:
        try:
            stdin.close()
        except OSError:
            pass


def _end_group(process: subprocess.Popen[bytes]) -> None:
    """End the command pybox started and whatever it started in its group."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        process.kill()
    process.wait()
