"""A scripted stand-in for a model command: `python fake_model.py DIR`.

Call N (counted in DIR/calls, its pid in DIR/pid-N) saves the prompt it got on
stdin as DIR/prompt-N.txt and prints DIR/reply-N.txt. Optional per call: DIR/sleep-N
(seconds to wait first) and DIR/fail-N (printed on stderr, then exit 1).
Without reply-N.txt it fails, so a test sees any call it did not script.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path


def scripted(folder: Path, replies: list[str]) -> list[str]:
    """Script `replies` into a new `folder`; the argv of a model command answering them."""
    folder.mkdir()
    for number, reply in enumerate(replies, 1):
        (folder / f"reply-{number}.txt").write_text(reply)
    return [sys.executable, str(Path(__file__).resolve()), str(folder)]


def main() -> int:
    folder = Path(sys.argv[1])
    counter = folder / "calls"
    number = int(counter.read_text()) + 1 if counter.exists() else 1
    counter.write_text(str(number))
    (folder / f"pid-{number}").write_text(str(os.getpid()))
    (folder / f"prompt-{number}.txt").write_bytes(sys.stdin.buffer.read())
    sleep = folder / f"sleep-{number}"
    if sleep.exists():
        time.sleep(float(sleep.read_text()))
    fail = folder / f"fail-{number}"
    if fail.exists():
        sys.stderr.write(fail.read_text())
        return 1
    reply = folder / f"reply-{number}.txt"
    if not reply.exists():
        sys.stderr.write(f"fake model: no reply scripted for call {number}\n")
        return 1
    sys.stdout.buffer.write(reply.read_bytes())
    return 0


if __name__ == "__main__":
    sys.exit(main())
