# A persistent sandbox's second run: look for the first run's canary outside
# the workspace and for any process but PID 1 and this one; read the marker
# the first run left inside the workspace.
import json
import os

found = {}
for path in ("/tmp/canary", "/dev/shm/canary", "/pybox/canary", "/pybox/output/canary"):
    try:
        with open(path) as handle:
            found[path] = handle.read()
    except OSError:
        pass
others = [
    int(pid) for pid in os.listdir("/proc") if pid.isdigit() and int(pid) not in (1, os.getpid())
]
with open("inside.txt") as handle:
    inside = handle.read()
print(json.dumps({"found": found, "other_processes": others, "inside": inside}))
