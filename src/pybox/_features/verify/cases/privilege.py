"""Hostile: become root, or gain any privilege the box does not grant."""

import ctypes
import errno
import json
import os
import socket
import stat
import subprocess

libc = ctypes.CDLL(None, use_errno=True)
report = {"attempts": {}}


def outcome(result):
    return "succeeded" if result == 0 else errno.errorcode.get(ctypes.get_errno(), "?")


def attempt(name, action):
    """Make one attempt in a child process, so that one that works (a new user
    namespace, a chroot) changes nothing for the attempts after it."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        try:
            result = action()
        except OSError as exc:
            result = errno.errorcode.get(exc.errno, str(exc.errno))
        except BaseException as exc:  # the report names it
            result = f"raised {type(exc).__name__}"
        os.write(write_end, str(result).encode())
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as handle:
        result = handle.read().decode() or "no answer"
    os.waitpid(pid, 0)
    report["attempts"][name] = result


status = dict(line.rstrip("\n").split(":\t", 1) for line in open("/proc/self/status"))
report["ids"] = {"uid": os.getuid(), "euid": os.geteuid(), "gid": os.getgid(), "egid": os.getegid()}
# A field the kernel does not give (gVisor's Sentry has no CapAmb) is reported as null.
caps = ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")
report["caps"] = {key: status.get(key) for key in caps}
# The kernel's own answer (gVisor's /proc/self/status has no NoNewPrivs line).
report["no_new_privs"] = str(libc.prctl(39, 0, 0, 0, 0))  # PR_GET_NO_NEW_PRIVS
report["seccomp"] = status.get("Seccomp")

# Setuid and setgid files anywhere on the root filesystem: a way to run as someone else.
root_device = os.stat("/").st_dev
report["setuid_files"] = []
for top, dirs, files in os.walk("/", onerror=lambda exc: None):
    dirs[:] = [d for d in dirs if os.lstat(os.path.join(top, d)).st_dev == root_device]
    for name in files:
        mode = os.lstat(os.path.join(top, name)).st_mode
        if stat.S_ISREG(mode) and mode & (stat.S_ISUID | stat.S_ISGID):
            report["setuid_files"].append(os.path.join(top, name))

attempt("setuid(0)", lambda: outcome(libc.setuid(0)))
attempt("mount(2) tmpfs", lambda: outcome(libc.mount(b"none", b"/tmp", b"tmpfs", 0, None)))
attempt("unshare(CLONE_NEWUSER)", lambda: outcome(libc.unshare(0x10000000)))
attempt("unshare(CLONE_NEWNS)", lambda: outcome(libc.unshare(0x00020000)))
attempt("chroot(2)", lambda: outcome(libc.chroot(b"/tmp")))
# PID 1 is pybox's bootstrap: a process this program did not start.
attempt("ptrace(ATTACH, 1)", lambda: outcome(libc.ptrace(16, 1, None, None)))
attempt("raw socket", lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, 1) and "succeeded")
attempt(
    "packet socket", lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0) and "succeeded"
)
attempt(
    "mknod /tmp/mem",
    lambda: os.mknod("/tmp/mem", stat.S_IFCHR | 0o600, os.makedev(1, 1)) or "succeeded",
)


def read_node():
    with open("/tmp/mem", "rb") as handle:
        handle.read(1)
    return "succeeded"


# Where mknod is allowed (gVisor's tmpfs), the node must still lead nowhere.
attempt("read the /tmp/mem node", read_node)
for command in (
    ["mount", "-t", "tmpfs", "none", "/tmp"],
    ["unshare", "-U", "true"],
    ["unshare", "-r", "true"],
):
    run = subprocess.run(command, capture_output=True, timeout=10)
    report["attempts"][" ".join(command)] = (
        "succeeded" if run.returncode == 0 else f"exit {run.returncode}"
    )
for path in (
    "/proc/sys/kernel/hostname",
    "/proc/sys/vm/drop_caches",
    "/proc/sysrq-trigger",
    "/sys/kernel/uevent_helper",
    "/sys/class/net/lo/mtu",
    "/sys/fs/cgroup/pids/pids.max",
    "/sys/fs/cgroup/memory/memory.limit_in_bytes",
):

    def write(path=path):
        with open(path, "w") as handle:
            handle.write("1")
        return "succeeded"

    attempt("write " + path, write)

# Every device node under /dev: type and numbers.
report["devices"] = []
for top, dirs, files in os.walk("/dev"):
    for name in files + dirs:
        path = os.path.join(top, name)
        mode = os.lstat(path).st_mode
        if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
            rdev = os.lstat(path).st_rdev
            kind = "char" if stat.S_ISCHR(mode) else "block"
            report["devices"].append([path, kind, os.major(rdev), os.minor(rdev)])
print(json.dumps(report))
