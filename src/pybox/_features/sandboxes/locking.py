"""One operation at a time per sandbox, across threads and pybox processes.

An exclusive `flock` on a file per sandbox in pybox's state directory: held for
the whole operation, released by the kernel if the process dies, so a killed
server never leaves a sandbox locked. Every operation re-reads the sandbox's
record under the lock.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pybox._core.errors import SandboxBusy, StateError

POLL_S = 0.02


@contextmanager
def sandbox_lock(
    folder: Path, sandbox_id: str, wait_s: float, cancel: threading.Event | None = None
) -> Iterator[None]:
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(folder / f"{sandbox_id}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise StateError(
            f"Cannot open the lock of sandbox {sandbox_id} in {folder}: {exc.strerror}. "
            "Check that pybox's state directory is writable."
        ) from exc
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline or (cancel is not None and cancel.is_set()):
                    raise SandboxBusy(
                        f"Sandbox {sandbox_id} is busy with another operation (another run or "
                        f"another pybox process) for longer than {wait_s:g} s. Retry when it "
                        "is done."
                    ) from None
                time.sleep(POLL_S)
        yield
    finally:
        os.close(fd)  # releases the lock
