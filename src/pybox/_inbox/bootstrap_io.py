# The in-box bootstrap, part 3 of 4: what crosses stdin and stdout (input files,
# the code handed over, the program's output relayed as frames, output files sent
# back). Joined with the other parts into one program (`bootstrap_source`).


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
