# The in-box bootstrap, part 4 of 4: one program's end, the protocols' loops
# (one program, many, a sandbox) and PID 1's main. Joined with the other parts
# into one program (`bootstrap_source`); this part comes last.


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
        # file of it does not (bootstrap_space.py says why).
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
