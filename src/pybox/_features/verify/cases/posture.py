"""Runs only if a box whose posture was weakened ever starts: then it says so."""

import json
import os

status = dict(line.rstrip("\n").split(":\t", 1) for line in open("/proc/self/status"))
print(json.dumps({"started": True, "uid": os.getuid(), "CapEff": status["CapEff"]}))
