"""Hostile, as an MCP agent's command in an experiment: find the server's environment."""

import json
import os

report = {"environ": dict(os.environ), "proc": {}}


def read(path):
    try:
        with open(path, "rb") as handle:
            return handle.read().decode("latin-1")
    except OSError as exc:
        return f"error {exc.errno}"


# Every process's environment and command line this program can read.
for pid in filter(str.isdigit, os.listdir("/proc")):
    for part in ("environ", "cmdline"):
        report["proc"][f"{pid}/{part}"] = read(f"/proc/{pid}/{part}").replace("\0", " ")
print(json.dumps(report))
