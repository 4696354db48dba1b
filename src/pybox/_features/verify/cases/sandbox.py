# A persistent sandbox, two runs of this program (argument `first`, then
# `second`). The first leaves a daemon behind (double fork, new session), puts
# the canary outside the workspace in every writable place and a marker inside
# it. The second looks for the canary and for any process but PID 1 and itself,
# and reads the marker. Only the workspace may be kept.
import json
import os
import sys
import time

PLACES = ("/tmp/canary", "/dev/shm/canary", "/pybox/canary", "/pybox/output/canary")


def first():
    canary = os.environ["VERIFY_CANARY"]
    placed = []
    for path in PLACES:
        try:
            with open(path, "w") as handle:
                handle.write(canary)
            placed.append(path)
        except OSError:
            pass
    with open("inside.txt", "w") as handle:
        handle.write("inside-kept")
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            time.sleep(600)
        os._exit(0)
    os.wait()
    print(json.dumps({"placed": placed, "pid": os.getpid()}))


def second():
    found = {}
    for path in PLACES:
        try:
            with open(path) as handle:
                found[path] = handle.read()
        except OSError:
            pass
    others = [
        int(pid)
        for pid in os.listdir("/proc")
        if pid.isdigit() and int(pid) not in (1, os.getpid())
    ]
    with open("inside.txt") as handle:
        inside = handle.read()
    print(json.dumps({"found": found, "other_processes": others, "inside": inside}))


first() if sys.argv[1] == "first" else second()
