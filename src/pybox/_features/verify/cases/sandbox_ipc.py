# A persistent sandbox, two runs of this program (argument `first`, then
# `second`). The first leaves IPC objects behind: SysV shared memory, a
# semaphore set and a message queue under a known key, a POSIX message queue by
# name and a file in /dev/shm. The second looks for each. None may be left.
import ctypes
import json
import os
import sys

KEY = 0x50425831
QUEUE = b"/pybox-verify"
libc = ctypes.CDLL(None, use_errno=True)


def first():
    create = 0o1000 | 0o600  # IPC_CREAT
    made = {
        "shm": libc.shmget(KEY, 4096, create),
        "sem": libc.semget(KEY, 1, create),
        "msg": libc.msgget(KEY, create),
        "mqueue": libc.mq_open(QUEUE, os.O_CREAT | os.O_RDWR, 0o600, None),
    }
    with open("/dev/shm/canary", "w") as handle:
        handle.write("left")
    print(json.dumps({"made": sorted(kind for kind, ident in made.items() if ident >= 0)}))


def second():
    found = {
        "shm": libc.shmget(KEY, 0, 0),
        "sem": libc.semget(KEY, 0, 0),
        "msg": libc.msgget(KEY, 0),
        "mqueue": libc.mq_open(QUEUE, os.O_RDONLY, 0, None),
        "dev_shm": 0 if os.listdir("/dev/shm") else -1,
    }
    print(json.dumps({"found": sorted(kind for kind, ident in found.items() if ident >= 0)}))


first() if sys.argv[1] == "first" else second()
