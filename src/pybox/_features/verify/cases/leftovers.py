"""Hostile by accident: still running when its controller is killed (SIGKILL)."""

import time

print("working", flush=True)
time.sleep(600)
