"""Hostile: find anything of the host's: its environment, its name, its hosts file."""

import json
import os
import socket

report = {"environ": dict(os.environ)}


def read(path):
    try:
        with open(path, "rb") as handle:
            return handle.read().decode("latin-1")
    except OSError as exc:
        return f"error {exc.errno}"


# Every process's environment and command line this program can read.
report["proc"] = {}
for pid in filter(str.isdigit, os.listdir("/proc")):
    for part in ("environ", "cmdline"):
        report["proc"][f"{pid}/{part}"] = read(f"/proc/{pid}/{part}").replace("\0", " ")
report["hostnames"] = {
    "gethostname": socket.gethostname(),
    "uname": os.uname().nodename,
    "/etc/hostname": read("/etc/hostname").strip(),
    "/proc/sys/kernel/hostname": read("/proc/sys/kernel/hostname").strip(),
}
report["etc_hosts"] = read("/etc/hosts")
print(json.dumps(report))
