"""Hostile: write everywhere on the root filesystem, then fill every writable place."""

import errno
import json
import os

report = {"root_probes": 0, "root_errors": {}, "root_written": [], "named": {}, "fills": {}}


def probe(directory):
    path = os.path.join(directory, ".pybox-verify-probe")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as exc:
        return errno.errorcode.get(exc.errno, str(exc.errno))
    os.close(fd)
    os.unlink(path)
    return "written"


# Every directory of the root filesystem (not the tmpfs, /proc or /sys mounted on it).
root_device = os.stat("/").st_dev
for top, dirs, _ in os.walk("/", onerror=lambda exc: None):
    dirs[:] = [d for d in dirs if os.lstat(os.path.join(top, d)).st_dev == root_device]
    result = probe(top)
    report["root_probes"] += 1
    if result == "written":
        report["root_written"].append(top)
    else:
        report["root_errors"][result] = report["root_errors"].get(result, 0) + 1
for directory in ("/", "/usr", "/etc", "/root", "/home", "/var", "/usr/lib/python3"):
    report["named"][directory] = probe(directory)
report["root_read_only_flag"] = bool(os.statvfs("/").f_flag & os.ST_RDONLY)
# The mount table's word for / (gVisor's statvfs has no read-only flag; its table does).
with open("/proc/self/mounts") as mounts:
    root_options = [line.split()[3] for line in mounts if line.split()[1:2] == ["/"]]
report["root_mount_read_only"] = bool(root_options) and "ro" in root_options[-1].split(",")

# $HOME is one of the writable places; fill each until the kernel says no.
chunk = b"x" * (1 << 20)
for directory in ("/tmp", os.environ["HOME"], "/dev/shm"):
    path = os.path.join(directory, "fill")
    written = 0
    outcome = "no error"
    try:
        with open(path, "wb", buffering=0) as handle:
            while written < 1 << 34:
                written += handle.write(chunk)
    except OSError as exc:
        outcome = errno.errorcode.get(exc.errno, str(exc.errno))
    report["fills"][directory] = {"error": outcome, "bytes": written}
    os.unlink(path)
report["home"] = os.environ["HOME"]
print(json.dumps(report))
