# The in-box bootstrap. pybox passes this file's text to the image's Python as
# `python3 -I -S -c <text>`; it is never imported on the host. It holds PID 1 in
# the box: it takes the code and input files from stdin (no mount is needed),
# starts the program as its child, relays the program's output as frames on
# stdout, reaps every process, ends everything at the backstop deadline even if
# pybox itself died, and sends the output files back after the program ended.
#
# One file, one concept: PID 1 in the box. It is long, but every line serves that
# one process, so it stays whole. Section headers mark its seams, in this order:
# constants and the preloader; the link; processes; wire I/O (files in and out,
# output relayed); workspace space; the main loop.
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


# ----------------------------------------------------------------------------
# The link: frames out and the payload in, the JSON writer, the header reader,
# the link key's HMAC and the kernel's word on PID 1's confinement.
# ----------------------------------------------------------------------------


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


# ----------------------------------------------------------------------------
# Processes: the program as a child, the pre-started and preloaded
# interpreter, reaping, killing everything between programs.
# ----------------------------------------------------------------------------


def libc_functions(*names):
    """The C library's functions `names`, each taking and returning C longs (ints
    and null pointers alike). Uses _ctypes directly; the ctypes package costs
    ~2 ms to import."""
    import _ctypes

    class Long(_ctypes._SimpleCData):
        _type_ = "l"

    class Int(_ctypes._SimpleCData):
        _type_ = "i"

    class Libc:
        _handle = _ctypes.dlopen(None, os.RTLD_NOW)

    class Function(_ctypes.CFuncPtr):
        _flags_ = _ctypes.FUNCFLAG_CDECL
        _restype_ = Int

    functions = []
    for name in names:
        function = Function((name, Libc()))
        functions.append(lambda *args, _f=function: _f(*(Long(a) for a in args)))
    return functions


def make_nondumpable():
    """PR_SET_DUMPABLE 0: under runc the program (same uid) cannot ptrace PID 1 or
    open /proc/1/fd. gVisor does not honour it (docs/isolation.md)."""
    try:
        (prctl,) = libc_functions("prctl")
        prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
        return prctl(3, 0, 0, 0, 0) == 0  # PR_GET_DUMPABLE = 3
    except Exception:
        return False


def kill_everything(pid):
    # As PID 1 of the box, kill(-1) reaches every other process in it, including
    # daemons that escaped the program's session with double fork and setsid.
    try:
        if os.getpid() == 1:
            os.kill(-1, signal.SIGKILL)
        elif pid > 0:
            os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass


def reap(main_pid, block):
    """Reap children; return the main program's wait status if it was reaped."""
    main_status = None
    while True:
        try:
            pid, status = os.waitpid(-1, 0 if block else os.WNOHANG)
        except ChildProcessError:
            return main_status
        if pid == 0:
            return main_status
        if pid == main_pid:
            main_status = status


def clear_box(pid, give_up_s):
    """Protocol 2: kill and reap every other process in the box; True once none is
    left. As PID 1, every orphan is reparented to us, so no children means no
    processes: a daemon that double-forked away from the program is gone too."""
    give_up_at = time.monotonic() + give_up_s
    while True:
        kill_everything(pid)
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            return True
        if time.monotonic() > give_up_at:
            return False
        time.sleep(0.001)


def ignore_signals():
    """Ignore every signal the program can send PID 1; return the ones ignored.

    kill(1, ...) and kill(-1, ...) from the program reach the bootstrap. The
    kernel drops a signal to a namespace's init only while its handler is the
    default, and Python installs one for SIGINT: a program could raise
    KeyboardInterrupt in PID 1 and make its own end look like pybox's error.
    SIGCHLD keeps a handler (pump needs it; it only wakes the loop). SIGKILL and
    SIGSTOP cannot be caught, and the kernel never lets the program send them to
    its namespace's init.
    """
    ignored = []
    for number in signal.valid_signals():
        if number in (signal.SIGKILL, signal.SIGSTOP, signal.SIGCHLD):
            continue
        try:
            signal.signal(number, signal.SIG_IGN)
        except (OSError, ValueError, RuntimeError):
            continue
        ignored.append(number)
    return tuple(ignored)


def spawn(python, argv, env, stdin_fd, defaults, preload=()):
    """Start the program's interpreter in its own session, with default signal
    handling (the bootstrap's ignored signals are not inherited). With `preload`,
    the image's hook imports those modules in it first; without, no request is
    left for any interpreter to find."""
    for path in (PRELOAD_REQUEST, PRELOAD_RESULT):
        remove_if_there(path)
    if preload:
        arguments = "%d, %r, %r, %r" % (
            os.getpid(),
            tuple(preload),
            PRELOAD_REQUEST,
            PRELOAD_RESULT,
        )
        source = PRELOADER.replace("@ARGUMENTS@", arguments)
        fd = os.open(PRELOAD_REQUEST, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            write_all(fd, source.encode("utf-8"))
        finally:
            os.close(fd)
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    stdin = (
        (os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0)
        if stdin_fd is None
        else (os.POSIX_SPAWN_DUP2, stdin_fd, 0)
    )
    pid = os.posix_spawn(
        python,
        argv,
        env,
        file_actions=[
            stdin,
            (os.POSIX_SPAWN_DUP2, out_w, 1),
            (os.POSIX_SPAWN_DUP2, err_w, 2),
        ],
        setsid=True,
        setsigdef=defaults,
        setsigmask=(),
    )
    os.close(out_w)
    os.close(err_w)
    return pid, out_r, err_r


def prestart(python, code_name, defaults, preload=()):
    """Start `python <code_name>` before the code arrives.

    The program's file is a FIFO at first: the interpreter initialises (site and
    all) while the box waits for its payload, then blocks opening its script
    until the code is written. The command is exactly `python3 <name>`, so argv,
    sys.path and __file__ are what a plain run gives.
    """
    for folder in (WORK, INPUT, OUTPUT):
        os.makedirs(folder, exist_ok=True)
    os.mkfifo(os.path.join(WORK, code_name), 0o600)
    os.chdir(WORK)
    return spawn(python, [python, code_name], dict(os.environ), None, defaults, preload)


def read_preload_result():
    """The preload's report (None until it is written)."""
    try:
        with open(PRELOAD_RESULT, "rb") as handle:
            text = handle.read().decode("utf-8", "replace")
    except FileNotFoundError:
        return None
    os.unlink(PRELOAD_RESULT)
    found = {}
    for line in text.split("\n"):
        key, _, value = line.partition("\t")
        if key:
            found[key] = value
    report = {"modules": [m for m in found.get("modules", "").split(",") if m]}
    report["failed"] = found.get("failed") or None
    for key in (
        "printed_bytes",
        "rss_before_bytes",
        "rss_bytes",
        "peak_rss_bytes",
        "frozen_objects",
    ):
        report[key] = int(found.get(key) or 0)
    for key in ("seconds", "freeze_s"):
        report[key] = float(found.get(key) or 0)
    return report


def await_preload(pid, deadline):
    """Wait for the pre-started interpreter's preload to finish: its report, or
    None if the interpreter ended (or the deadline came) first."""
    waited_from = time.monotonic()
    while True:
        report = read_preload_result()
        if report is not None:
            report["waited_s"] = round(time.monotonic() - waited_from, 4)
            return report
        if os.waitpid(pid, os.WNOHANG)[0] or time.monotonic() > deadline:
            return None
        # A request nobody took: the image's hook did not run (an image without it).
        waited = time.monotonic() - waited_from
        if waited > PRELOAD_UNTAKEN_S and os.path.exists(PRELOAD_REQUEST):
            return None
        time.sleep(0.0005)


def preload_fallback(preload, header, report):
    """Why the preloaded interpreter cannot run this program as a fresh one
    would, or None."""
    if report is None:
        return "the preloading interpreter ended before it finished"
    if report["failed"]:
        return "a preload failed: " + report["failed"]
    if report["printed_bytes"]:
        return "the preload printed %d bytes" % report["printed_bytes"]
    if header.get("flags"):
        return "pybox's own program starts in an isolated interpreter"
    if header["args"] or header["env"] or header["stdin_size"]:
        return "the run has arguments, environment variables or stdin"
    tops = {name.split(".")[0] for name in preload}
    for name in [header["code_name"], *(item["name"] for item in header["inputs"])]:
        if name.split(".")[0] in tops or name in PRELOAD_CWD_FILES:
            return "the file %s could change what the preloaded imports found" % name
    return None


def restart(started, python, code_name, header, defaults):
    """Replace the pre-started interpreter with one that has the run's own
    arguments, environment variables, stdin or isolated start (it has not read
    its script yet, so none of the program's code ran in it). With `started`
    None (a later program of a protocol-2 box), just start one."""
    if started is not None:
        pid, out_r, err_r = started
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
        os.waitpid(pid, 0)
        os.close(out_r)
        os.close(err_r)
    env = dict(os.environ)
    env.update(header["env"])
    stdin_fd = None
    if header["stdin_size"]:
        # A regular file, as `python3 NAME.py < FILE` gives; unlinked once opened.
        path = os.path.join(ROOT, ".stdin-%d" % os.getpid())
        stdin_fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        os.unlink(path)
    try:
        argv = [python, *header.get("flags", ()), code_name, *header["args"]]
        return spawn(python, argv, env, stdin_fd, defaults)
    finally:
        if stdin_fd is not None:
            os.close(stdin_fd)


# ----------------------------------------------------------------------------
# Wire and link I/O: what crosses stdin and stdout (input files, the code
# handed over, the program's output relayed as frames, output files sent back).
# ----------------------------------------------------------------------------


def write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def receive_file(link, path, size, mode):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    try:
        left = size
        while left:
            part = link.read_exact(min(left, 1 << 20))
            write_all(fd, part)
            left -= len(part)
    finally:
        os.close(fd)


def check_name(name):
    if not name or "/" in name or name in (".", "..") or "\0" in name:
        raise ValueError("bad file name %r" % name)


def unpack_inputs(link, header, replace=False):
    """The inputs into INPUT (and linked next to the script). With `replace` (a
    later program of a protocol-2 box), an earlier file of the same name gives way."""
    if replace:
        os.chmod(INPUT, 0o755)
    for item in header["inputs"]:
        name = item["name"]
        check_name(name)
        path = os.path.join(INPUT, name)
        if replace:
            remove_if_there(path)
        receive_file(link, path, item["size"], 0o444)
        # Also in the working folder (the script's folder, first on sys.path), so
        # `open("data.csv")` and `import helper` work as they would next to the
        # script. A hard link: the same read-only file, not a copy.
        target = os.path.join(WORK, name)
        if replace:
            remove_if_there(target)
        try:
            os.link(path, target)
        except OSError:
            pass
    os.chmod(INPUT, 0o555)
    if header["stdin_size"]:
        path = os.path.join(ROOT, ".stdin-%d" % os.getpid())
        if replace:
            remove_if_there(path)
        receive_file(link, path, header["stdin_size"], 0o400)


def remove_if_there(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def place_code(code_name, code):
    """A later program's script: a regular file, in place before it starts."""
    copy = os.path.join(ROOT, ".code-%d" % os.getpid())
    remove_if_there(copy)
    fd = os.open(copy, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    try:
        write_all(fd, code)
    finally:
        os.close(fd)
    os.replace(copy, os.path.join(WORK, code_name))


def hand_over_code(code_name, code, pid, deadline, keep_file=True):
    """Write the code into the waiting interpreter's FIFO, then leave a regular
    file in its place (tracebacks and inspect read the source from there), or
    without `keep_file` (a full workspace) no file at all.

    Returns the program's wait status if it ended before taking its code.
    """
    path = os.path.join(WORK, code_name)
    copy = os.path.join(ROOT, ".code-%d" % os.getpid())
    if keep_file:
        with open(copy, "wb") as handle:
            handle.write(code)
    while True:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
            break
        except OSError as exc:
            if exc.errno != errno.ENXIO:  # ENXIO: the reader has not opened it yet
                raise
        ended, status = os.waitpid(pid, os.WNOHANG)
        if ended:
            settle_code(copy, path, keep_file)
            return status
        if time.monotonic() > deadline:
            raise TimeoutError("the program's interpreter never opened its script")
        time.sleep(0.0005)
    os.set_blocking(fd, True)
    try:
        view = memoryview(code)
        while view:
            view = view[os.write(fd, view) :]
    except BrokenPipeError:
        pass  # the interpreter died mid-read; its exit status tells the rest
    # Swap in the regular file before the reader sees end-of-file.
    settle_code(copy, path, keep_file)
    os.close(fd)
    return None


def settle_code(copy, path, keep_file):
    if keep_file:
        os.replace(copy, path)
    else:
        remove_if_there(path)  # an open FIFO: the reader still gets all of it


def pump(link, pid, out_r, err_r, deadline, status, protocol=ONE_PROGRAM):
    """Relay output until the program ended and its pipes closed.

    Returns the program's wait status, whether the backstop fired, and (protocol
    2) whether pybox stopped it."""
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wake_w)
    streams = {out_r: K_STDOUT, err_r: K_STDERR}
    backstop = stopped = False
    while streams or status is None:
        left = deadline - time.monotonic()
        if left <= 0 and not backstop:
            backstop = True
            kill_everything(pid)
        watched = [*streams, wake_r, link.fd_in]
        ready, _, _ = select.select(watched, [], [], max(min(left, 1.0), 0.05))
        for fd in ready:
            if fd == link.fd_in:
                # The engine closes stdin when pybox's connection ends (StdinOnce).
                data = os.read(link.fd_in, 4096)
                if not data:
                    raise ControllerGone("stdin closed")
                if protocol != ONE_PROGRAM and STOP in data and not stopped:
                    stopped = True
                    kill_everything(pid)
                continue
            if fd == wake_r:
                os.read(wake_r, 4096)
                continue
            data = os.read(fd, CHUNK)
            if data:
                link.send(streams[fd], data)
            else:
                os.close(fd)
                del streams[fd]
        if status is None:
            status = reap(pid, block=False)
        else:
            reap(pid, block=False)
        if status is not None:
            # The run is over when the program is; nothing it started outlives it.
            kill_everything(pid)
    signal.set_wakeup_fd(-1)
    os.close(wake_r)
    os.close(wake_w)
    if protocol == ONE_PROGRAM:
        reap(pid, block=True)
    elif not clear_box(pid, CLEAR_WAIT_S):
        raise RuntimeError("processes of the program outlived it; the box ends")
    return status, backstop, stopped


class Outputs:
    """Sends the output folder's regular files, within pybox's caps.

    Never follows a link: the folder, every sub-folder and every file is opened
    relative to its parent's descriptor with O_NOFOLLOW, so a program that
    swaps a folder for a link to / after it wrote its files cannot make the
    bootstrap read, or walk, anything outside the output folder. Depth and path
    length are bounded; the list of skipped files is capped, with a count.
    """

    def __init__(self, link, max_files, max_bytes):
        self.link, self.max_files, self.max_bytes = link, max_files, max_bytes
        self.sent, self.total = 0, 0
        self.skipped, self.skipped_more, self._skipped_json = [], 0, 0

    def skip(self, path, reason):
        entry = {"path": path[:MAX_PATH_BYTES], "reason": reason}
        size = len(dumps(entry))
        if (
            len(self.skipped) < MAX_SKIPPED_LISTED
            and self._skipped_json + size <= MAX_SKIPPED_JSON_BYTES
        ):
            self.skipped.append(entry)
            self._skipped_json += size
        else:
            self.skipped_more += 1

    def send_all(self):
        """Send every file; return a problem that lost them all, or None."""
        try:
            root = os.open(OUTPUT, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as exc:
            try:
                mode = os.lstat(OUTPUT).st_mode
            except OSError:
                return "the output folder was removed; nothing returned"
            if stat.S_ISLNK(mode):
                return "the output folder was replaced by a link; nothing returned"
            if not stat.S_ISDIR(mode):
                return "the output folder was replaced by something else; nothing returned"
            return "the output folder could not be opened (%s); nothing returned" % exc.strerror
        try:
            self._folder(root, "", 1)
        finally:
            os.close(root)
        return None

    def _folder(self, folder_fd, rel, depth):
        try:
            with os.scandir(folder_fd) as entries:
                names = sorted(entry.name for entry in entries)
        except OSError as exc:
            self.skip(rel, "unreadable directory: %s" % exc.strerror)
            return
        for name in names:
            path = rel + "/" + name if rel else name
            if len(path.encode("utf-8", "surrogateescape")) > MAX_PATH_BYTES:
                self.skip(path, "path longer than %d bytes" % MAX_PATH_BYTES)
                continue
            try:
                mode = os.stat(name, dir_fd=folder_fd, follow_symlinks=False).st_mode
            except OSError as exc:
                self.skip(path, "unreadable: %s" % exc.strerror)
                continue
            if stat.S_ISDIR(mode):
                self._subfolder(folder_fd, name, path, depth)
            elif stat.S_ISREG(mode):
                self._file(folder_fd, name, path)
            else:
                self.skip(path, "symbolic link" if stat.S_ISLNK(mode) else "not a regular file")

    def _subfolder(self, folder_fd, name, path, depth):
        if depth >= MAX_DEPTH:
            self.skip(path, "nested deeper than %d folders; not searched" % MAX_DEPTH)
            return
        try:
            fd = os.open(
                name,
                os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                dir_fd=folder_fd,
            )
        except OSError as exc:
            self.skip(path, "unreadable directory: %s" % exc.strerror)
            return
        try:
            self._folder(fd, path, depth + 1)
        finally:
            os.close(fd)

    def _file(self, folder_fd, name, path):
        if self.sent >= self.max_files:
            self.skip(path, "over the returned-files count cap")
            return
        try:
            fd = os.open(
                name,
                os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                dir_fd=folder_fd,
            )
        except OSError as exc:
            self.skip(path, "unreadable: %s" % exc.strerror)
            return
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                self.skip(path, "not a regular file")
                return
            size = info.st_size
            if self.total + size > self.max_bytes:
                self.skip(path, "over the returned-bytes cap")
                return
            self.link.send_json(K_FILE, {"path": path, "size": size})
            left = size
            while left:
                try:
                    data = os.read(fd, min(CHUNK, left))
                except OSError:
                    data = b""
                if not data:
                    # Nothing of the program runs any more, so the file cannot
                    # shrink; keep the framing exact whatever happens.
                    data = b"\0" * min(CHUNK, left)
                self.link.send(K_DATA, data)
                left -= len(data)
            self.sent += 1
            self.total += size
        finally:
            os.close(fd)


def send_outputs(link, max_files, max_bytes):
    outputs = Outputs(link, max_files, max_bytes)
    report = {}
    problem = outputs.send_all()
    if problem is not None:
        report["problem"] = problem
    report.update(
        files_sent=outputs.sent,
        files_skipped=outputs.skipped,
        files_skipped_more=outputs.skipped_more,
    )
    link.send_json(K_FILES_DONE, report)


# ----------------------------------------------------------------------------
# Workspace space: a full workspace (protocols 2 and 3).
#
# All of /pybox (the workspace, the inputs, the program's stdin and its script)
# is one tmpfs of the box's writable size. A program that fills it must not cost
# the box: a later program whose inputs or stdin do not fit is refused before it
# starts (its payload read and dropped, so the stream stays in step), and one
# whose script does not fit gets it through a FIFO (an inode, no blocks) that is
# removed once handed over, so a program that deletes files can always run. The
# exit report says when the workspace was full at the program's end.
# ----------------------------------------------------------------------------


def workspace_room():
    """(free bytes, size in bytes, block size) of /pybox's tmpfs, or None if the
    kernel does not say."""
    try:
        info = os.statvfs(ROOT)
    except OSError:
        return None
    if not info.f_frsize or not info.f_blocks:
        return None
    return info.f_bavail * info.f_frsize, info.f_blocks * info.f_frsize, info.f_frsize


def blocks_for(sizes, block):
    return sum(-(-size // block) * block for size in sizes)


def workspace_full_report():
    """For the exit report: the workspace's size when less than one block is free."""
    room = workspace_room()
    if room is None or room[0] >= room[2]:
        return {}
    return {"workspace_full_bytes": room[1]}


def refuse_full(link, header, protocol, needed):
    """Report a program that was not started for want of room; the box goes on."""
    room = workspace_room() or (None, None, None)
    link.send_json(
        K_EXIT,
        {
            "exit_code": None,
            "backstop": False,
            "stopped": True,
            "not_started": "workspace_full",
            "needed_bytes": needed,
            "free_bytes": room[0],
            "workspace_bytes": room[1],
        },
    )
    finish(link, header, True, protocol)


def refuse_if_no_room(link, header, protocol):
    """True if the program's inputs and stdin do not fit: then they were read and
    dropped and the refusal reported."""
    sizes = [item["size"] for item in header["inputs"]]
    if header["stdin_size"]:
        sizes.append(header["stdin_size"])
    room = workspace_room()
    if not sizes or room is None:
        return False
    needed = blocks_for(sizes, room[2])
    if needed <= room[0]:
        return False
    left = sum(sizes)
    while left:
        left -= len(link.read_exact(min(left, 1 << 20)))
    refuse_full(link, header, protocol, needed)
    return True


def place_or_pipe_code(code_name, code):
    """A later program's script: False, placed as a regular file; True, a FIFO in
    its place (no room for the file); None, not even a FIFO could be made."""
    room = workspace_room()
    if room is None or blocks_for([len(code)], room[2]) <= room[0]:
        try:
            place_code(code_name, code)
            return False
        except OSError as exc:
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
    remove_if_there(os.path.join(ROOT, ".code-%d" % os.getpid()))
    path = os.path.join(WORK, code_name)
    remove_if_there(path)  # an earlier script's blocks count too
    try:
        os.mkfifo(path, 0o600)
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        return None
    return True


# ----------------------------------------------------------------------------
# The main loop: one program's end, the protocols' loops (one program, many, a
# sandbox) and PID 1's main.
# ----------------------------------------------------------------------------


def finish(link, header, backstop, protocol=ONE_PROGRAM):
    """Everything after the exit report. Its failure never changes the program's
    exit status: it is reported (pybox lists what was lost) and the box ends
    (protocol 1) or goes on (protocol 2) with the program's own status."""
    try:
        if header["collect_outputs"] and not backstop:
            send_outputs(link, header["max_files"], header["max_file_bytes"])
    except ControllerGone:
        raise
    except BaseException as exc:
        message = ("%s: %s" % (type(exc).__name__, exc))[:MAX_MESSAGE_CHARS]
        link.send_json(K_ERROR, {"message": message})
    if protocol == ONE_PROGRAM:
        # Stay alive until pybox has taken its last kernel sample, or for a short while.
        ready, _, _ = select.select([link.fd_in], [], [], ACK_WAIT_S)
        if ready:
            os.read(link.fd_in, 1)
        return
    # The next payload follows the ACK: take it exactly (a STOP that crossed the
    # exit report on its way comes before it and means nothing now).
    while link.read_exact(1) != ACK:
        pass


def box_exit_code(exit_code, backstop):
    if backstop:
        return BACKSTOP_EXIT
    if exit_code is None:
        return 125
    return exit_code if exit_code >= 0 else 128 - exit_code


def run_program(link, python, header, started, defaults, protocol, first, preload=()):
    """One program: inputs in, code handed over, output relayed, exit reported,
    files sent. Returns its wait status's exit code and whether the backstop fired."""
    code_name = header["code_name"]
    deadline = time.monotonic() + float(header["backstop_s"])
    code = link.read_exact(header["code_size"])
    if not first:
        # A later program in a full workspace: its inputs and stdin must fit (else
        # it is refused and the box goes on); its code passes through a pipe if a
        # file of it does not (the workspace space section says why).
        refused = refuse_if_no_room(link, header, protocol)
        if refused:
            return None, False
    unpack_inputs(link, header, replace=not first)
    started_report = {}
    if first and preload:
        report = await_preload(started[0], deadline)
        fallback = preload_fallback(preload, header, report)
        if fallback is not None:
            started = restart(started, python, code_name, header, defaults)
            # The interpreter that runs it imported and froze nothing.
            report = dict(report or {}, modules=[], frozen_objects=0)
        report["fallback"] = fallback
        started_report["preload"] = report
    piped = False
    if not first:
        # A fresh interpreter for each later program, with a regular script file
        # (or, in a full workspace, a pipe in its place: see place_or_pipe_code).
        piped = place_or_pipe_code(code_name, code)
        if piped is None:
            refuse_full(link, header, protocol, len(code))
            return None, False
        started = restart(None, python, code_name, header, defaults)
    elif not preload and (
        header["args"] or header["env"] or header["stdin_size"] or header.get("flags")
    ):
        # The pre-started interpreter is a plain `python NAME` with the box's own
        # environment: this program needs another start.
        started = restart(started, python, code_name, header, defaults)
    pid, out_r, err_r = started
    link.program_deadline = deadline
    status = None
    if first or piped:
        status = hand_over_code(code_name, code, pid, deadline, keep_file=not piped)
    link.send_json(K_STARTED, started_report)
    status, backstop, stopped = pump(link, pid, out_r, err_r, deadline, status, protocol)
    link.program_deadline = None
    exit_code = None if status is None else os.waitstatus_to_exitcode(status)
    # The exit report comes first: the program's deadline no longer applies to the files.
    report = {"exit_code": exit_code, "backstop": backstop}
    if protocol != ONE_PROGRAM:
        report["stopped"] = stopped
        report.update(workspace_full_report())
    link.send_json(K_EXIT, report)
    finish(link, header, backstop or stopped, protocol)
    return exit_code, backstop


def wait_for_magic(link, ready, give_up_at, key):
    """Protocol 3: skip stray bytes (STOP, ACK, pieces of pings), answer pings, until a payload's
    magic (True), the end of stdin or the end of the wait (False). A repeated
    nonce is answered once, so a pybox that pinged twice finds one answer. The
    answer proves it is PID 1's: the nonce's HMAC under the link key."""
    answered = None
    while True:
        left = give_up_at - time.monotonic()
        if left <= 0 or not select.select([link.fd_in], [], [], left)[0]:
            return False
        first = os.read(link.fd_in, 1)
        if not first:
            return False
        if first != PING and first != MAGIC[:1]:
            # STOP and ACK, or the rest of a ping a program's pump swallowed in part
            # (a nonce is lowercase hex: never the magic's first byte).
            continue
        if first == PING:
            nonce = link.read_exact(PING_NONCE_CHARS).decode("ascii", "replace")
            if nonce.strip("0123456789abcdef"):
                raise ValueError("a ping's nonce is not lowercase hex")
            if nonce != answered:
                answered = nonce
                proof = hmac_sha256(key, nonce.encode("ascii"))
                link.send_json(K_READY, dict(ready, ping=nonce, proof=proof))
            continue
        if first + link.read_exact(3) != MAGIC:
            raise ValueError("the payload does not start with the pybox magic")
        return True


def read_header(link, python, protocol, first_wait_s, end_ok=False, ready=None, key=b""):
    """The next payload's header (None: pybox closed the box between programs,
    or, protocol 3, no program came in time)."""
    link.token = None
    if protocol == SANDBOX:
        if not wait_for_magic(link, ready, time.monotonic() + first_wait_s, key):
            return None
        magic = MAGIC
    else:
        magic = link.read_exact(4, first_wait_s=first_wait_s, end_ok=end_ok)
    if not magic:
        return None
    if magic != MAGIC:
        raise ValueError("the payload does not start with the pybox magic")
    header = parse_header(link.read_exact(int.from_bytes(link.read_exact(4), "big")))
    # From here every report carries the run's token: the checks below may refuse it.
    link.token = header.get("token")
    if header.get("version") != protocol:
        raise ValueError(
            "the payload is for protocol %r; this box speaks %d" % (header.get("version"), protocol)
        )
    check_name(header["code_name"])
    header["flags"] = interpreter_flags(header["argv"], python, header["code_name"])
    check_kernel_status(header.get("require_status", ()), KERNEL_STATUS)
    return header


def interpreter_flags(argv, python, code_name):
    """The flags the payload's argv starts the program with: none (the caller's
    code) or ISOLATED_FLAGS (pybox's own); any other argv is refused."""
    if argv == [python, code_name]:
        return []
    if argv == [python, *ISOLATED_FLAGS, code_name]:
        return list(ISOLATED_FLAGS)
    raise ValueError("the payload runs %r, not this box's Python" % (argv,))


def clear_outside_workspace():
    """Protocol 3, between programs: only the workspace persists. Everything else
    a program could write (the box's other folders, /tmp, /dev/shm) is emptied, so
    the next program cannot read what an earlier one put outside the workspace.
    Links are removed, never followed. Never as root: a box's bootstrap never is
    (its uid is the box's own), so root means this is not a box."""
    if os.getuid() == 0:
        return
    for folder in (INPUT, OUTPUT, *TEMP_DIRS):
        empty_folder(folder)
    for name in os.listdir(ROOT):
        path = os.path.join(ROOT, name)
        if path not in (WORK, INPUT, OUTPUT):
            remove_tree(path)


class IpcSweeper:
    """Removes the SysV IPC objects (shared memory, semaphores, message queues)
    and POSIX message queues a program left: they live in the box's IPC namespace,
    not in a folder, and would reach the next program.

    The kernel lists SysV objects in /proc/sysvipc. gVisor lists none, but hands
    out each kind's ids in sequence: the ids a program could have used lie
    between two marks, the id of a private object PID 1 makes and removes before
    the program and again after it. Removal needs no privilege: every object was
    made by the box's one uid. Only as PID 1: a box's IPC namespace is its own (read
    back, IpcMode), a bootstrap that is not PID 1 is not in a box."""

    def __init__(self):
        self.calls, self.marks = {}, {}
        if os.getpid() != 1:
            return
        shmget, semget, msgget, shmctl, semctl, msgctl = libc_functions(
            "shmget", "semget", "msgget", "shmctl", "semctl", "msgctl"
        )
        create = 0o1000 | 0o600  # IPC_CREAT, owner only; key IPC_PRIVATE (0)
        self.calls = {
            "shm": (lambda: shmget(0, 1, create), lambda i: shmctl(i, 0, 0)),  # IPC_RMID
            "sem": (lambda: semget(0, 1, create), lambda i: semctl(i, 0, 0, 0)),
            "msg": (lambda: msgget(0, create), lambda i: msgctl(i, 0, 0)),
        }
        self.marks = {k: self._mark(k) for k in IPC_KINDS if listed_ipc_ids(k) is None}

    def _mark(self, kind):
        make, remove = self.calls[kind]
        ident = make()
        if ident < 0:
            raise RuntimeError("PID 1 could not make a %s IPC object to find the box's" % kind)
        remove(ident)
        return ident

    def sweep(self):
        if not self.calls:
            return
        for kind in IPC_KINDS:
            remove = self.calls[kind][1]
            listed = listed_ipc_ids(kind)
            if listed is None:
                last, top = self.marks[kind], self._mark(kind)
                if not 0 <= top - last <= IPC_SPAN_MAX:
                    raise RuntimeError(
                        "the program went through too many %s IPC ids to clear; the box ends" % kind
                    )
                listed = range(last + 1, top)
                self.marks[kind] = top
            for ident in listed:
                remove(ident)
            if listed_ipc_ids(kind):
                raise RuntimeError("%s IPC objects of the program outlived it; the box ends" % kind)
        empty_folder(MQUEUE_DIR)


def listed_ipc_ids(kind):
    """The ids of the box's SysV IPC objects of `kind`, or None where the kernel
    lists none (gVisor)."""
    try:
        with open("/proc/sysvipc/" + kind, "rb") as listing:
            rows = listing.read().split(b"\n")[1:]
    except OSError:
        return None
    return [int(row.split()[1]) for row in rows if row.strip()]


def empty_folder(folder):
    if folder.startswith(ROOT):
        try:
            os.chmod(folder, 0o755)  # a program may have made it read-only
        except OSError:
            pass
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        remove_tree(os.path.join(folder, name))


def remove_tree(path):
    try:
        info = os.lstat(path)
    except OSError:
        return
    if stat.S_ISDIR(info.st_mode):
        try:
            os.chmod(path, 0o700)
        except OSError:
            pass
        empty_folder(path)
        try:
            os.rmdir(path)
        except OSError:
            pass
    else:
        try:
            os.unlink(path)
        except OSError:
            pass


def sandbox_main(link, python, idle_s, ends_at, defaults, ready):
    """Protocol 3: programs until none comes within `idle_s`, or the lifetime
    (`ends_at`, seconds since the epoch) is over; then the box ends itself."""
    ipc = IpcSweeper()
    key = None
    while True:
        os.makedirs(WORK, exist_ok=True)
        clear_outside_workspace()
        ipc.sweep()
        for folder in (INPUT, OUTPUT):
            os.makedirs(folder, exist_ok=True)
        os.chdir(WORK)
        link.token = None
        link.send_json(K_READY, ready)
        if key is None:
            # Before any program: pybox's link key, sent once by the pybox that made the box.
            key = read_link_key(link, idle_s)
        wait_s = min(idle_s, ends_at - time.time())
        if wait_s <= 0:
            return 0
        header = read_header(link, python, SANDBOX, wait_s, ready=ready, key=key)
        if header is None:
            return 0
        try:
            run_program(link, python, header, None, defaults, SANDBOX, False)
        except ControllerGone:
            # Nobody reads this program's results: end it and everything it
            # started. The box and its files stay for the next pybox.
            link.program_deadline = None
            if not clear_box(0, CLEAR_WAIT_S):
                raise RuntimeError("processes of the program outlived it; the box ends") from None


def read_link_key(link, wait_s):
    """Protocol 3: the link key, read before any program exists in the box."""
    if link.read_exact(1, first_wait_s=wait_s) != LINK_KEY:
        raise ValueError("the sandbox's first message is not its link key")
    text = link.read_exact(LINK_KEY_CHARS).decode("ascii", "replace")
    if len(text) != LINK_KEY_CHARS or text.strip("0123456789abcdef"):
        raise ValueError("the sandbox's link key is not %d lowercase hex digits" % LINK_KEY_CHARS)
    return bytes.fromhex(text)


# Read once, before any program ran: a program cannot change PID 1's confinement.
KERNEL_STATUS = kernel_status()


def ready_report(protocol):
    """PID 1's report that it waits for a program: made non-dumpable first (the
    program's interpreter, started before, is not yet the program)."""
    return {
        "version": protocol,
        "pid": os.getpid(),
        "uid": os.getuid(),
        "nondumpable": make_nondumpable(),
        "status": KERNEL_STATUS,
    }


def main(link):
    python, code_name = sys.argv[1], sys.argv[2]
    protocol, payload_wait_s = int(sys.argv[3]), float(sys.argv[4])
    if protocol not in (ONE_PROGRAM, MANY_PROGRAMS, SANDBOX):
        raise ValueError("this bootstrap speaks protocols 1, 2 and 3, not %r" % protocol)
    defaults = (*ignore_signals(), signal.SIGCHLD)
    if protocol == SANDBOX:
        ready = ready_report(protocol)
        return sandbox_main(link, python, payload_wait_s, float(sys.argv[5]), defaults, ready)
    # The program's interpreter starts first, so its start-up overlaps the wait for
    # the payload; it runs nothing of the program's until the code is handed over.
    # A warm box's modules to preload (protocols 1 and 2): the entrypoint's last argument.
    preload = tuple(m for m in sys.argv[5].split(",") if m) if len(sys.argv) > 5 else ()
    # Marked before anything else runs in the box.
    ipc = IpcSweeper() if protocol == MANY_PROGRAMS else None
    started = prestart(python, code_name, defaults, preload)
    ready = ready_report(protocol)
    link.send_json(K_READY, ready)
    header = read_header(link, python, protocol, payload_wait_s)
    if header["code_name"] != code_name:
        raise ValueError("the payload is for %r, this box runs %r" % (header["argv"], code_name))
    exit_code, backstop = run_program(
        link, python, header, started, defaults, protocol, True, preload
    )
    while protocol == MANY_PROGRAMS:
        # Nothing of the last program is left (pump cleared the box, this its IPC
        # objects); say so, and wait.
        ipc.sweep()
        for folder in (WORK, INPUT, OUTPUT):
            os.makedirs(folder, exist_ok=True)
        os.chdir(WORK)
        link.send_json(K_READY, ready)
        header = read_header(link, python, protocol, payload_wait_s, end_ok=True)
        if header is None:
            break
        exit_code, backstop = run_program(link, python, header, None, defaults, protocol, False)
    return box_exit_code(exit_code, backstop)


if __name__ == "__main__":
    link = Link(0, 1)
    try:
        code = main(link)
    except ControllerGone:
        # Nobody is left to report to: end everything now rather than at the deadline.
        kill_everything(0)
        code = BACKSTOP_EXIT
    except BaseException as exc:  # report, never hang: the host reads this as a sandbox error
        try:
            message = ("%s: %s" % (type(exc).__name__, exc))[:MAX_MESSAGE_CHARS]
            link.send_json(K_ERROR, {"message": message})
        except ControllerGone:
            pass
        code = 125
    # Everything was written with os.write; skip interpreter teardown, the box is done.
    os._exit(code)
