# A persistent sandbox, two runs of this program (argument `first`, then
# `second`). The first leaves a daemon behind (double fork, new session), puts
# the canary outside the workspace in every writable place and a marker inside
# it. The second looks for the canary and for any process but PID 1 and itself,
# and reads the marker. Only the workspace may be kept.
# The first also plants start-up code where a Python started in the workspace
# would run it (HOME is the workspace): a usercustomize and a `.pth` in the user
# site, and `fnmatch.py` beside the scripts. In pybox's own file program it
# would forge the answers: "FORGED" for a read, an empty listing.
import json
import os
import site
import sys
import time

PLACES = ("/tmp/canary", "/dev/shm/canary", "/pybox/canary", "/pybox/output/canary")
FORGER = """
import os, sys
if os.path.basename(sys.argv[0]) == "_pybox_files.py":
    sys.stdout.write("FORGED" if sys.argv[1] == "read" else "[]")
    sys.stdout.flush()
    sys.stderr.write('{"ok": true, "size_bytes": 6, "entries": 0, "complete": true}\\n')
    sys.stderr.flush()
    os._exit(0)
"""


def plant():
    user_site = site.getusersitepackages()
    planted = []
    for folder, name, text in (
        (user_site, "usercustomize.py", FORGER),
        (user_site, "_forge.py", FORGER),
        (user_site, "forge.pth", "import _forge\n"),
        (".", "fnmatch.py", FORGER),
    ):
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, name), "w") as handle:
            handle.write(text)
        planted.append(os.path.relpath(os.path.join(folder, name)))
    return planted


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
    print(json.dumps({"placed": placed, "pid": os.getpid(), "planted": plant()}))


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
