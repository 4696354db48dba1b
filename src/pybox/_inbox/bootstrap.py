# The in-box bootstrap. pybox passes this file's text to the image's Python as
# `python3 -I -S -c <text>`; it is never imported on the host. It holds PID 1 in
# the box: it takes the code and input files from stdin (no mount is needed),
# starts the program as its child, relays the program's output as frames on
# stdout, reaps every process, ends everything at the backstop deadline even if
# pybox itself died, and sends the output files back after the program ended.
#
# Everything it reports is untrusted by the host: it runs with the program's
# uid. It makes itself non-dumpable so the program cannot ptrace it or open its
# file descriptors through /proc/1.
#
# Frames out (fd 1): one kind byte, a 4-byte big-endian length, the payload.
# Payload in (fd 0): MAGIC, a 4-byte length, a JSON header, then the raw bytes
# of the code and each input, in header order; later one ACK byte.
import json
import os
import select
import signal
import stat
import sys
import time

VERSION = 1
MAGIC = b"PBX1"
ACK = b"A"
CHUNK = 65536
K_READY, K_STARTED, K_STDOUT, K_STDERR = b"R", b"S", b"1", b"2"
K_FILE, K_DATA, K_EXIT, K_ERROR = b"F", b"D", b"X", b"E"
BACKSTOP_EXIT = 124
WORK, INPUT, OUTPUT = "/pybox/work", "/pybox/input", "/pybox/output"


def send(kind, data=b""):
    view = memoryview(kind + len(data).to_bytes(4, "big") + data)
    while view:
        view = view[os.write(1, view) :]


def send_json(kind, obj):
    send(kind, json.dumps(obj).encode())


def read_exact(size):
    parts, left = [], size
    while left:
        part = os.read(0, min(left, 1 << 20))
        if not part:
            raise EOFError("stdin ended %d bytes early" % left)
        parts.append(part)
        left -= len(part)
    return b"".join(parts)


def make_nondumpable():
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0
    except Exception:
        pass


def kill_everything(pid):
    # As PID 1 of the box, kill(-1) reaches every other process in it, including
    # daemons that escaped the program's session with double fork and setsid.
    try:
        if os.getpid() == 1:
            os.kill(-1, signal.SIGKILL)
        else:
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


def unpack(header):
    os.makedirs(WORK, exist_ok=True)
    os.makedirs(INPUT, exist_ok=True)
    os.makedirs(OUTPUT, exist_ok=True)
    code_path = os.path.join(WORK, header["code_name"])
    with open(code_path, "wb") as handle:
        handle.write(read_exact(header["code_size"]))
    for item in header["inputs"]:
        name = item["name"]
        if "/" in name or name in (".", "..") or "\0" in name:
            raise ValueError("bad input name %r" % name)
        path = os.path.join(INPUT, name)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o444)
        with os.fdopen(fd, "wb") as handle:
            left = item["size"]
            while left:
                part = read_exact(min(left, 1 << 20))
                handle.write(part)
                left -= len(part)
    os.chmod(INPUT, 0o555)


def spawn(argv):
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    os.chdir(WORK)
    pid = os.posix_spawn(
        argv[0],
        argv,
        dict(os.environ),
        file_actions=[
            (os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
            (os.POSIX_SPAWN_DUP2, out_w, 1),
            (os.POSIX_SPAWN_DUP2, err_w, 2),
        ],
        setsid=True,
        setsigdef=(signal.SIGPIPE, signal.SIGXFSZ, signal.SIGCHLD),
        setsigmask=(),
    )
    os.close(out_w)
    os.close(err_w)
    return pid, out_r, err_r


def pump(pid, out_r, err_r, deadline):
    """Relay output until the program ended and its pipes closed."""
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wake_w)
    streams = {out_r: K_STDOUT, err_r: K_STDERR}
    status, backstop = None, False
    while streams or status is None:
        left = deadline - time.monotonic()
        if left <= 0 and not backstop:
            backstop = True
            kill_everything(pid)
        watched = [*streams, wake_r]
        ready, _, _ = select.select(watched, [], [], max(min(left, 1.0), 0.05))
        for fd in ready:
            if fd == wake_r:
                os.read(wake_r, 4096)
                continue
            data = os.read(fd, CHUNK)
            if data:
                send(streams[fd], data)
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
    reap(pid, block=True)
    return status, backstop


def walk_outputs():
    files, skipped, stack = [], [], [""]
    while stack:
        rel = stack.pop()
        try:
            entries = sorted(
                os.scandir(os.path.join(OUTPUT, rel) if rel else OUTPUT), key=lambda e: e.name
            )
        except OSError as exc:
            skipped.append({"path": rel, "reason": "unreadable directory: %s" % exc.strerror})
            continue
        for entry in entries:
            path = rel + "/" + entry.name if rel else entry.name
            mode = entry.stat(follow_symlinks=False).st_mode
            if stat.S_ISDIR(mode):
                stack.append(path)
            elif stat.S_ISREG(mode):
                files.append(path)
            else:
                kind = "symbolic link" if stat.S_ISLNK(mode) else "not a regular file"
                skipped.append({"path": path, "reason": kind})
    return files, skipped


def send_outputs(max_files, max_bytes):
    files, skipped = walk_outputs()
    sent, total = 0, 0
    for path in files:
        try:
            fd = os.open(os.path.join(OUTPUT, path), os.O_RDONLY | os.O_NOFOLLOW)
        except OSError as exc:
            skipped.append({"path": path, "reason": "unreadable: %s" % exc.strerror})
            continue
        with os.fdopen(fd, "rb") as handle:
            size = os.fstat(fd).st_size
            if sent >= max_files:
                skipped.append({"path": path, "reason": "over the returned-files count cap"})
                continue
            if total + size > max_bytes:
                skipped.append({"path": path, "reason": "over the returned-bytes cap"})
                continue
            send_json(K_FILE, {"path": path, "size": size})
            left = size
            while left:
                data = handle.read(min(CHUNK, left))
                if not data:
                    data = b"\0" * min(CHUNK, left)  # shrank underneath us: keep framing exact
                send(K_DATA, data)
                left -= len(data)
            sent += 1
            total += size
    return sent, skipped


def main():
    make_nondumpable()
    send_json(K_READY, {"version": VERSION, "pid": os.getpid(), "uid": os.getuid()})
    if read_exact(4) != MAGIC:
        raise ValueError("the payload does not start with the pybox magic")
    header = json.loads(read_exact(int.from_bytes(read_exact(4), "big")))
    deadline = time.monotonic() + float(header["backstop_s"])
    unpack(header)
    pid, out_r, err_r = spawn(header["argv"])
    send_json(K_STARTED, {})
    status, backstop = pump(pid, out_r, err_r, deadline)
    sent, skipped = 0, []
    if header["collect_outputs"] and not backstop:
        sent, skipped = send_outputs(header["max_files"], header["max_file_bytes"])
    exit_code = None if status is None else os.waitstatus_to_exitcode(status)
    send_json(
        K_EXIT,
        {
            "exit_code": exit_code,
            "backstop": backstop,
            "files_sent": sent,
            "files_skipped": skipped,
        },
    )
    # Stay alive until pybox has taken its last kernel sample, or for a short while.
    ready, _, _ = select.select([0], [], [], 10.0)
    if ready:
        os.read(0, 1)
    if backstop:
        return BACKSTOP_EXIT
    if exit_code is None:
        return 125
    return exit_code if exit_code >= 0 else 128 - exit_code


if __name__ == "__main__":
    try:
        code = main()
    except BaseException as exc:  # report, never hang: the host reads this as a sandbox error
        try:
            send_json(K_ERROR, {"message": "%s: %s" % (type(exc).__name__, exc)})
        except OSError:
            pass
        code = 125
    sys.exit(code)
