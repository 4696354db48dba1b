# The in-box bootstrap: a full workspace (protocols 2 and 3). Joined with the
# other parts into one program (`bootstrap_source`), before the main part.
#
# All of /pybox (the workspace, the inputs, the program's stdin and its script)
# is one tmpfs of the box's writable size. A program that fills it must not cost
# the box: a later program whose inputs or stdin do not fit is refused before it
# starts (its payload read and dropped, so the stream stays in step), and one
# whose script does not fit gets it through a FIFO (an inode, no blocks) that is
# removed once handed over, so a program that deletes files can always run. The
# exit report says when the workspace was full at the program's end.


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
