# A persistent sandbox's first run: leave a daemon behind (double fork, new
# session) and put the canary outside the workspace, in every writable place,
# and a marker inside it. pybox must end the daemon and clear the rest before
# the next run; only the workspace is kept.
import json
import os
import time

canary = os.environ["VERIFY_CANARY"]
placed = []
for path in ("/tmp/canary", "/dev/shm/canary", "/pybox/canary", "/pybox/output/canary"):
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
