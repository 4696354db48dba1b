"""Hostile: make the system calls pybox's seccomp profile denies, io_uring first.

Each call is made raw (ctypes, by number) with arguments that do nothing
harmful if it went through. Without a filter, most of them succeed or fail
with the kernel's own answer (EBADF, EFAULT, EINVAL...); io_uring_setup,
unshare(0), settimeofday(NULL, NULL), adjtimex, keyctl and userfaultfd
succeed outright. The filter answers EPERM instead.
"""

import ctypes
import errno
import json
import os
import platform

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long

# Numbers differ per architecture; io_uring and newer calls share one table.
NUMBERS = {
    "x86_64": {
        "userfaultfd": 323, "keyctl": 250, "add_key": 248, "request_key": 249, "bpf": 321,
        "perf_event_open": 298, "ptrace": 101, "process_vm_readv": 310, "personality": 135,
        "unshare": 272, "setns": 308, "name_to_handle_at": 303, "open_by_handle_at": 304,
        "settimeofday": 164, "adjtimex": 159, "clock_adjtime": 305, "clock_settime": 227,
        "fanotify_init": 300, "mount": 165, "pivot_root": 155, "kexec_load": 246,
        "init_module": 175, "acct": 163, "swapon": 167, "reboot": 169, "syslog": 103,
    },
    "aarch64": {
        "userfaultfd": 282, "keyctl": 219, "add_key": 217, "request_key": 218, "bpf": 280,
        "perf_event_open": 241, "ptrace": 117, "process_vm_readv": 270, "personality": 92,
        "unshare": 97, "setns": 268, "name_to_handle_at": 264, "open_by_handle_at": 265,
        "settimeofday": 170, "adjtimex": 171, "clock_adjtime": 266, "clock_settime": 112,
        "fanotify_init": 262, "mount": 40, "pivot_root": 41, "kexec_load": 104,
        "init_module": 105, "acct": 89, "swapon": 224, "reboot": 142, "syslog": 116,
    },
}  # fmt: skip
SHARED = {"io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "fsopen": 430}

NO_PID = 0x3FFFFFF0  # no process has it
params = ctypes.create_string_buffer(120)  # struct io_uring_params, zeroed
timex = ctypes.create_string_buffer(512)  # struct timex, modes 0: only a read
# What each call is given: harmless if the call went through.
ARGUMENTS = {
    "io_uring_setup": (1, params),
    "io_uring_enter": (-1, 0, 0, 0, None, 0),
    "io_uring_register": (-1, 0, None, 0),
    "userfaultfd": (0o2000000 | 1,),  # O_CLOEXEC | UFFD_USER_MODE_ONLY
    "keyctl": (0, -3, 0),  # KEYCTL_GET_KEYRING_ID of the session keyring
    "add_key": (None, None, None, 0, -3),
    "request_key": (None, None, None, 0),
    "bpf": (0, None, 0),
    "perf_event_open": (None, 0, -1, -1, 0),
    "ptrace": (12, NO_PID, None, None),  # PTRACE_GETREGS of no process
    "process_vm_readv": (NO_PID, None, 0, None, 0, 0),
    "personality": (0x0040000,),  # ADDR_NO_RANDOMIZE
    "unshare": (0,),  # a no-op where allowed
    "setns": (-1, 0),
    "name_to_handle_at": (-100, b"/", None, None, 0),
    "open_by_handle_at": (-1, None, 0),
    "settimeofday": (None, None),  # sets nothing where allowed
    "adjtimex": (timex,),
    "clock_adjtime": (0, timex),
    "clock_settime": (0, None),
    "fanotify_init": (0x200, 0),  # FAN_REPORT_FID: allowed unprivileged where not filtered
    "fsopen": (b"tmpfs", 0),
    "mount": (None, None, None, 0, None),
    "pivot_root": (None, None),
    "kexec_load": (0, 0, None, 0),
    "init_module": (None, 0, None),
    "acct": (None,),
    "swapon": (None, 0),
    "reboot": (0, 0, 0, None),  # wrong magic numbers
    "syslog": (3, None, 0),  # SYSLOG_ACTION_READ_ALL of nothing
}

machine = platform.machine()
report = {"arch": machine, "attempts": {}}
status = dict(line.rstrip("\n").split(":\t", 1) for line in open("/proc/self/status"))
report["seccomp"] = status.get("Seccomp")
report["seccomp_filters"] = status.get("Seccomp_filters")

if machine in NUMBERS:
    numbers = {**SHARED, **NUMBERS[machine]}
    for name, arguments in ARGUMENTS.items():
        ctypes.set_errno(0)
        result = libc.syscall(numbers[name], *arguments)
        code = ctypes.get_errno()
        if result >= 0:
            report["attempts"][name] = "succeeded"
            if name in ("io_uring_setup", "userfaultfd", "fanotify_init"):
                os.close(result)
        else:
            report["attempts"][name] = errno.errorcode.get(code, str(code))

print(json.dumps(report))
