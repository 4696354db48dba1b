"""Hostile: spin every CPU in several threads, forever.

hashlib releases Python's lock on large buffers, so the threads really run at once.
"""

import hashlib
import threading

BLOCK = b"x" * (1 << 20)


def spin():
    while True:
        hashlib.sha256(BLOCK).digest()


for _ in range(4):
    threading.Thread(target=spin, daemon=True).start()
print("spinning in 5 threads", flush=True)
spin()
