# The in-box bootstrap. pybox passes this file's text to the image's Python as
# `python3 -I -S -c <text>`; it is never imported on the host. It holds PID 1 in
# the box: it takes the code and input files from stdin (no mount is needed),
# starts the program as its child, relays the program's output as frames on
# stdout, reaps every process, ends everything at the backstop deadline even if
# pybox itself died, and sends the output files back after the program ended.
#
# Everything it reports is untrusted by the host: it runs with the program's
# uid. It makes itself non-dumpable, so under runc the program cannot ptrace it
# or open its file descriptors through /proc/1. gVisor honours neither that nor
# any other check there: a program can open PID 1's stdin and stdout. So what
# pybox trusts carries what no program can know (docs/isolation.md): every
# report of a run carries the run's token (sent in its header, which PID 1 reads
# before the program exists), and a sandbox's answer to a ping carries the
# nonce's HMAC under the link key pybox sent before any program ran. Neither is
# in PID 1's environment or arguments, and its memory is closed in both lanes.
#
# Frames out (fd 1): one kind byte, a 4-byte big-endian length, the payload
# (JSON for control frames, raw bytes for output and file data).
# Payload in (fd 0): MAGIC, a 4-byte length, a header of tab-separated lines,
# then the raw bytes of the code, each input and the program's stdin, in header
# order; later one ACK byte. No `json` import: it costs about 10 ms of start-up in the box.
#
# Protocol 1 (fixed at create time, in the entrypoint) runs one program and ends.
# Protocol 2 runs programs one after another: after each program's ACK, PID 1
# kills and reaps everything else in the box, reports ready again and waits for
# the next payload. Each program is a fresh process with its own deadline; a STOP
# byte while it runs ends it (and everything it started) without ending the box.
# Files in the writable area stay.
# Protocol 3 (a sandbox) is protocol 2 in a box that outlives its controller:
# stdin stays open when pybox's connection ends, so a pybox attached later sends
# the next payload. Each program gets a fresh interpreter (none is pre-started).
# Between programs the box skips stray STOP and ACK bytes and answers a PING and
# its nonce with a ready report carrying the nonce, so a newly attached pybox can
# find its place; it ends itself when no program comes within its idle time or
# at its lifetime's end. A controller that vanishes mid-program costs that
# program (ended, everything it started killed), never the box.
# Preload (protocols 1 and 2, a warm box of an image that declares modules):
# the pre-started interpreter imports the image's modules before the code
# arrives. The image carries a one-line `.pth` hook (written at build time)
# that, in an interpreter whose parent is this bootstrap, runs the request
# this file writes at PRELOAD_REQUEST (PRELOADER below) during `site`, before
# the interpreter opens its script: argv, sys.path, __file__ and __main__ are
# those of a plain `python3 NAME.py`. The result comes back in PRELOAD_RESULT;
# a preload that failed, printed anything or could change what the program
# imports (an input that shadows a preloaded module, arguments, environment
# variables or stdin, which need a restart) falls back to a fresh interpreter.
# Only C modules: `signal`, `stat` and `ctypes` pull in enum and friends, which
# costs several milliseconds of start-up on every run.
import _signal as signal
import _stat as stat
import errno
import os
import select
import sys
import time

ONE_PROGRAM, MANY_PROGRAMS, SANDBOX = 1, 2, 3
VERSION = SANDBOX
MAGIC = b"PBX1"
ACK = b"A"
STOP = b"K"
PING = b"?"
PING_NONCE_CHARS = 32
# Protocol 3: the link key, LINK_KEY and LINK_KEY_CHARS lowercase hex digits,
# the first thing the creating pybox sends, before any program. A ready report
# that answers a ping carries the nonce's HMAC-SHA256 under it (`proof`).
LINK_KEY = b"L"
LINK_KEY_CHARS = 64
CHUNK = 65536
K_READY, K_STARTED, K_STDOUT, K_STDERR = b"R", b"S", b"1", b"2"
K_FILE, K_DATA, K_EXIT, K_ERROR, K_FILES_DONE = b"F", b"D", b"X", b"E", b"Z"
BACKSTOP_EXIT = 124
# pybox acknowledges at once; a frozen or dead pybox must not keep the box long.
ACK_WAIT_S = 2.0
# Protocol 2: how long clearing the box after a program may take before PID 1
# gives up (and ends the box rather than start the next program beside leftovers).
CLEAR_WAIT_S = 5.0
# pybox reads and writes as fast as the box does: this long without progress
# (outside the program's own run) means it froze or hung.
STALL_S = 10.0
ROOT = "/pybox"
WORK, INPUT, OUTPUT = ROOT + "/work", ROOT + "/input", ROOT + "/output"
# The box's other writable places (tmpfs mounts of its own): emptied between a
# sandbox's programs.
TEMP_DIRS = ("/tmp", "/dev/shm")
# pybox's own programs in the box (its file tools, the wrapper that becomes an
# exec's command) start as `python -I -S NAME`: no site (so no user site under
# HOME, which is the workspace, and no `.pth`), no PYTHON* variables, and not
# the script's folder (the workspace) on sys.path. The program's code may have
# left anything in the workspace; none of it runs in pybox's programs. The
# caller's own programs start as `python NAME`.
ISOLATED_FLAGS = ["-I", "-S"]


# POSIX message queues (where the engine mounts their filesystem: runc does,
# gVisor does not) and SysV IPC objects are emptied between programs too.
MQUEUE_DIR = "/dev/mqueue"
IPC_KINDS = ("shm", "sem", "msg")
# Under gVisor, which lists no SysV IPC objects, PID 1 removes the ids handed out
# since its last look, in sequence; a program that went through more than this
# many ids ends the box rather than leave any behind.
IPC_SPAN_MAX = 1 << 16
# Returned files: the same bounds as pybox's own checks, so nothing unbounded is walked.
MAX_DEPTH = 32
MAX_PATH_BYTES = 1024
# The files-done report lists at most this many skipped files (and this much JSON),
# with a count of the rest: a program that writes many files is a normal program.
MAX_SKIPPED_LISTED = 100
MAX_SKIPPED_JSON_BYTES = 256 * 1024
MAX_MESSAGE_CHARS = 2000
PRELOAD_REQUEST, PRELOAD_RESULT = ROOT + "/.preload", ROOT + "/.preloaded"
# The interpreter takes its preload request within its start-up; one that has
# not this long after the code arrived never will.
PRELOAD_UNTAKEN_S = 2.0
# Files an import reads from the working folder at import time (matplotlib's rc file).
PRELOAD_CWD_FILES = ("matplotlibrc",)
# What the image's hook runs in the pre-started interpreter: {} globals, so it
# leaves nothing behind but the imported modules. Output during the imports goes
# to a file (and means a fallback), never to the program's streams.
PRELOADER = r"""
import os, sys
def _freeze():
    # Collect what the imports left, then move every object they made to the
    # permanent generation: the program's collections (and its interpreter's
    # exit) no longer traverse them. gc and time are taken out of sys.modules
    # again if the imports had not put them there.
    had = set(sys.modules)
    import gc, time
    began = time.perf_counter()
    gc.collect()
    gc.freeze()
    frozen, took = gc.get_freeze_count(), time.perf_counter() - began
    for name in ("gc", "time"):
        if name not in had:
            sys.modules.pop(name, None)
    return frozen, took
def _preload(parent, modules, request, result):
    if os.getppid() != parent:
        return
    os.unlink(request)
    def status():
        found = {}
        with open("/proc/self/status", "rb") as handle:
            for line in handle:
                key, _, value = line.partition(b":")
                if key in (b"VmRSS", b"VmHWM"):
                    found[key.decode()] = int(value.split()[0]) * 1024
        return found
    before, started = status(), os.times().elapsed
    out = os.open(result + ".out", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    saved = os.dup(1), os.dup(2)
    os.dup2(out, 1)
    os.dup2(out, 2)
    done, failed, frozen, freeze_s, imports_s = [], "", 0, 0.0, None
    try:
        for name in modules:
            try:
                __import__(name)
            except BaseException as exc:
                failed = ("%s: %s: %s" % (name, type(exc).__name__, exc))[:500]
                break
            done.append(name)
        imports_s = os.times().elapsed - started
        if not failed:
            try:
                frozen, freeze_s = _freeze()
            except BaseException as exc:
                failed = ("gc.freeze: %s: %s" % (type(exc).__name__, exc))[:500]
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:
                pass
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in saved:
            os.close(fd)
    printed = os.fstat(out).st_size
    os.close(out)
    os.unlink(result + ".out")
    after = status()
    lines = [
        "modules\t" + ",".join(done),
        "failed\t" + failed.replace("\t", " ").replace("\n", " "),
        "printed_bytes\t%d" % printed,
        "seconds\t%.4f" % (os.times().elapsed - started if imports_s is None else imports_s),
        "rss_before_bytes\t%d" % before.get("VmRSS", 0),
        "rss_bytes\t%d" % after.get("VmRSS", 0),
        "peak_rss_bytes\t%d" % after.get("VmHWM", 0),
        "frozen_objects\t%d" % frozen,
        "freeze_s\t%.4f" % freeze_s,
    ]
    with open(result + ".tmp", "w") as handle:
        handle.write("\n".join(lines) + "\n")
    os.rename(result + ".tmp", result)
_preload(@ARGUMENTS@)
"""


class ControllerGone(Exception):
    """pybox is gone, or stopped reading or writing: nobody will read the results."""


class Link:
    """pybox's end of the box: the payload in on fd 0, frames out on fd 1.

    Every wait on pybox is bounded, so a frozen or dead pybox cannot keep the box:
    the first payload byte must arrive within the wait the box was created with;
    any later read or write gives up after STALL_S without progress, or, while
    the program runs, at its backstop deadline (`program_deadline`).
    """

    def __init__(self, fd_in, fd_out):
        self.fd_in, self.fd_out = fd_in, fd_out
        self.program_deadline = None
        # The run's token (its header's), in every report of the run but the ready one.
        self.token = None
        os.set_blocking(fd_out, False)

    def _give_up_at(self):
        if self.program_deadline is not None:
            return self.program_deadline
        return time.monotonic() + STALL_S

    def _wait_for(self, fd, writing, give_up_at, what):
        left = give_up_at - time.monotonic()
        if left > 0:
            ready = (
                select.select([], [fd], [], left)[1]
                if writing
                else select.select([fd], [], [], left)[0]
            )
            if ready:
                return
        raise ControllerGone("pybox did not %s in time" % what)

    def send(self, kind, data=b""):
        view = memoryview(kind + len(data).to_bytes(4, "big") + data)
        while view:
            try:
                view = view[os.write(self.fd_out, view) :]
            except BlockingIOError:
                self._wait_for(self.fd_out, True, self._give_up_at(), "read the box's output")
            except OSError as exc:
                raise ControllerGone("stdout closed: %s" % exc) from None

    def send_json(self, kind, obj):
        if self.token is not None and kind != K_READY:
            obj = dict(obj, token=self.token)
        self.send(kind, dumps(obj).encode("ascii"))

    def read_exact(self, size, first_wait_s=None, end_ok=False):
        """`size` bytes of the payload; the first may wait `first_wait_s`.
        With `end_ok`, stdin ending before the first byte returns b""."""
        parts, left = [], size
        give_up_at = time.monotonic() + (STALL_S if first_wait_s is None else first_wait_s)
        while left:
            self._wait_for(self.fd_in, False, give_up_at, "send the payload")
            part = os.read(self.fd_in, min(left, 1 << 20))
            if not part and end_ok and left == size:
                return b""
            if not part:
                raise ControllerGone("stdin ended %d bytes early" % left)
            parts.append(part)
            left -= len(part)
            give_up_at = time.monotonic() + STALL_S
        return b"".join(parts)


_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _json_string(text):
    out = []
    for char in text:
        code = ord(char)
        if char in _ESCAPES:
            out.append(_ESCAPES[char])
        elif 32 <= code < 127:
            out.append(char)
        elif code > 0xFFFF:
            code -= 0x10000
            out.append("\\u%04x\\u%04x" % (0xD800 + (code >> 10), 0xDC00 + (code & 0x3FF)))
        else:
            out.append("\\u%04x" % code)
    return '"' + "".join(out) + '"'


def dumps(value):
    """JSON for the few shapes the bootstrap reports (ASCII output)."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        return _json_string(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(dumps(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(_json_string(str(k)) + ":" + dumps(v) for k, v in value.items()) + "}"
    raise TypeError("cannot report a %s" % type(value).__name__)


def _unhex(field):
    # Arguments and variables may hold tabs and newlines: they travel as hex.
    return bytes.fromhex(field).decode("utf-8", "surrogateescape")


def parse_header(raw):
    """The host's header: one `key<TAB>field<TAB>...` line per setting."""
    header = {"inputs": [], "args": [], "env": [], "stdin_size": 0}
    for line in raw.decode("utf-8", "surrogateescape").split("\n"):
        if not line:
            continue
        key, *fields = line.split("\t")
        if key == "argv":
            header["argv"] = fields
        elif key == "code":
            header["code_name"], header["code_size"] = fields[0], int(fields[1])
        elif key == "input":
            header["inputs"].append({"name": fields[0], "size": int(fields[1])})
        elif key == "arg":
            header["args"].append(_unhex(fields[0]))
        elif key == "env":
            header["env"].append((_unhex(fields[0]), _unhex(fields[1])))
        elif key == "stdin":
            header["stdin_size"] = int(fields[0])
        elif key == "backstop_s":
            header["backstop_s"] = float(fields[0])
        elif key in ("version", "max_files", "max_file_bytes"):
            header[key] = int(fields[0])
        elif key == "token":
            header["token"] = fields[0]
        elif key == "collect_outputs":
            header[key] = fields[0] == "1"
        elif key == "require_status":
            header.setdefault("require_status", []).append((fields[0], fields[1]))
    return header


def hmac_sha256(key, message):
    """HMAC-SHA256 (RFC 2104) with the C module alone: `hmac` imports `hashlib`."""
    try:
        from _sha2 import sha256
    except ImportError:  # Python before 3.12
        from _sha256 import sha256
    key = key.ljust(64, b"\0")
    inner = sha256(bytes(b ^ 0x36 for b in key) + message).digest()
    return sha256(bytes(b ^ 0x5C for b in key) + inner).hexdigest()


def kernel_status(names=("Seccomp", "NoNewPrivs")):
    """What the kernel says of this process's confinement (/proc/self/status), read
    by PID 1 before any program ran; a name the kernel does not show is absent."""
    found = {}
    try:
        with open("/proc/self/status", "rb") as status:
            for line in status.read().decode("ascii", "replace").split("\n"):
                name, _, value = line.partition(":")
                if name in names:
                    found[name] = value.strip()
    except OSError:
        pass
    return found


def check_kernel_status(required, observed):
    """Refuse to run a program in a box whose kernel did not apply what pybox asked."""
    for name, value in required:
        if observed.get(name) != value:
            raise ValueError(
                "the kernel reports %s %r for the box's PID 1; pybox requires %r, so the "
                "program was not run" % (name, observed.get(name), value)
            )
