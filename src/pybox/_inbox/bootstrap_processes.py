# The in-box bootstrap, part 2 of 4: its processes (the program as a child, the
# pre-started and preloaded interpreter, reaping, killing everything between
# programs). pybox joins the parts into one program (`bootstrap_source`): names
# come from part 1, bootstrap.py, which says what the whole does.


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
