"""Hostile: outlive the deadline. Ignore SIGTERM, fork, daemonize, sleep."""

import os
import signal
import time

signal.signal(signal.SIGTERM, signal.SIG_IGN)
for _ in range(3):
    if os.fork() == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if os.fork() == 0:
            os.setsid()  # a daemon: double fork and a session of its own
            if os.fork() == 0:
                time.sleep(100000)
            os._exit(0)
        time.sleep(100000)
print("children and daemons started", flush=True)
time.sleep(100000)
