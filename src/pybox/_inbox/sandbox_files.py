# A sandbox's file operations, run inside its box as an ordinary program (the
# box's uid, under the box's seal) that pybox starts with this file as its code.
# It is never imported on the host. Paths arrive checked by pybox and are
# checked again here: every component is opened relative to its parent with
# O_NOFOLLOW, so a link the agent's own code planted cannot lead outside the
# workspace. The outcome is one JSON line on stderr (`{"ok": ...}`); a file read
# goes out raw on stdout. Everything it says is untrusted by the host like any
# program's output: pybox checks sizes and shapes.
# pybox starts it as `python -I -S` (isolated: no site, no user site under
# HOME, no PYTHON* variables, not the workspace on sys.path): the agent's code
# may have left anything in the workspace, and none of it may run in here. It
# imports only the standard library, and works away from the workspace (cwd /).
#
# argv: write REL | read REL MAX_BYTES | list REL MAX_ENTRIES | unpack REL
#       | digest REL MAX_ENTRIES [SKIP_NAME...] | pack MAX_BYTES
import errno
import fnmatch
import hashlib
import io
import json
import os
import posixpath
import stat
import sys
import tarfile

WORK = os.environ.get("PYBOX_WORK_DIR", "/pybox/work")
MAX_DEPTH = 16
DIGEST_DEPTH = 64


def say(**report):
    sys.stderr.write(json.dumps(report) + "\n")
    sys.stderr.flush()


def fail(error, message):
    say(ok=False, error=error, message=message)
    sys.exit(3)


def components(rel):
    parts = [part for part in rel.split("/") if part not in ("", ".")]
    if ".." in parts:
        fail("outside", "the path leaves the workspace")
    return parts


def open_folder(parts, create=False):
    fd = os.open(WORK, os.O_RDONLY | os.O_DIRECTORY)
    for index, name in enumerate(parts):
        if create:
            try:
                os.mkdir(name, 0o755, dir_fd=fd)
            except FileExistsError:
                pass
        try:
            inner = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
        except OSError as exc:
            where = "/".join(parts[: index + 1])
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                kind = "link" if is_link(fd, name) else "not_a_folder"
                fail(kind, "%s is %s" % (where, "a link" if kind == "link" else "not a folder"))
            if exc.errno == errno.ENOENT:
                fail("missing", "%s does not exist" % where)
            fail("os", "%s: %s" % (where, exc.strerror))
        os.close(fd)
        fd = inner
    return fd


def is_link(folder_fd, name):
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=folder_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def open_file(parts, flags, mode=0o644):
    if not parts:
        fail("not_a_file", "the workspace itself is a folder")
    folder = open_folder(parts[:-1], create=bool(flags & os.O_CREAT))
    try:
        return os.open(parts[-1], flags | os.O_NOFOLLOW | os.O_NONBLOCK, mode, dir_fd=folder)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            fail("link", "%s is a link" % "/".join(parts))
        if exc.errno == errno.ENOENT:
            fail("missing", "%s does not exist" % "/".join(parts))
        if exc.errno == errno.EISDIR:
            fail("not_a_file", "%s is a folder" % "/".join(parts))
        fail("os", "%s: %s" % ("/".join(parts), exc.strerror))
    finally:
        os.close(folder)


def copy(source, target):
    total = 0
    while True:
        data = os.read(source, 1 << 20)
        if not data:
            return total
        view = memoryview(data)
        while view:
            view = view[os.write(target, view) :]
        total += len(data)


def write(rel):
    fd = open_file(components(rel), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.set_blocking(fd, True)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        fail("not_a_file", "%s is not a regular file" % rel)
    say(ok=True, size_bytes=copy(0, fd))


def read(rel, max_bytes):
    fd = open_file(components(rel), os.O_RDONLY)
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        fail("not_a_file", "%s is not a regular file" % rel)
    if info.st_size > max_bytes:
        fail(
            "too_big", "%s holds %d bytes; at most %d can be read" % (rel, info.st_size, max_bytes)
        )
    os.set_blocking(fd, True)
    sent = copy(fd, 1)
    say(ok=True, size_bytes=sent)


def entries(folder_fd, prefix, depth, found, max_entries):
    with os.scandir(folder_fd) as listing:
        names = sorted(entry.name for entry in listing)
    for name in names:
        if len(found) >= max_entries:
            return False
        info = os.stat(name, dir_fd=folder_fd, follow_symlinks=False)
        path = prefix + name
        if stat.S_ISDIR(info.st_mode):
            found.append({"path": path, "kind": "folder", "size_bytes": 0})
            if depth < MAX_DEPTH:
                inner = os.open(
                    name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=folder_fd
                )
                try:
                    if not entries(inner, path + "/", depth + 1, found, max_entries):
                        return False
                finally:
                    os.close(inner)
        elif stat.S_ISREG(info.st_mode):
            found.append({"path": path, "kind": "file", "size_bytes": info.st_size})
        elif stat.S_ISLNK(info.st_mode):
            found.append({"path": path, "kind": "link", "size_bytes": 0})
        else:
            found.append({"path": path, "kind": "other", "size_bytes": 0})
    return True


def listing(rel, max_entries):
    parts = components(rel)
    folder = open_folder(parts)
    found = []
    complete = entries(folder, "/".join(parts) + "/" if parts else "", 0, found, max_entries)
    sys.stdout.write(json.dumps(found))
    say(ok=True, entries=len(found), complete=complete)


def unpack(rel):
    # A tar pybox made: of an install box's output (regular files and folders), or
    # of a project (links too). Permission bits (& 0o755) are restored; a folder's
    # only once everything in it is written (a read-only folder still gets its files).
    base = components(rel)
    files = 0
    folder_modes = []
    with tarfile.open(fileobj=sys.stdin.buffer, mode="r|") as archive:
        for member in archive:
            parts = components(member.name)
            if not parts:
                continue
            if member.isdir():
                os.close(open_folder(base + parts, create=True))
                folder_modes.append((base + parts, member.mode & 0o755))
            elif member.isfile():
                fd = open_file(base + parts, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                os.set_blocking(fd, True)
                source = archive.extractfile(member)
                while True:
                    data = source.read(1 << 20)
                    if not data:
                        break
                    view = memoryview(data)
                    while view:
                        view = view[os.write(fd, view) :]
                os.fchmod(fd, member.mode & 0o755)
                os.utime(fd, (member.mtime, member.mtime))
                os.close(fd)
                files += 1
            elif member.issym():
                make_link(base, parts, member.linkname)
                files += 1
            else:
                fail(
                    "bad_archive",
                    "the archive holds %s, which is not a file, folder or link" % member.name,
                )
    for parts, mode in sorted(folder_modes, key=lambda item: -len(item[0])):
        fd = open_folder(parts)
        os.fchmod(fd, mode)
        os.close(fd)
    say(ok=True, files=files)


def make_link(base, parts, target):
    # The target is kept as it is, but must stay in the workspace, lexically.
    where = "/".join(base + parts)
    if not target or target.startswith("/") or "\0" in target:
        fail("bad_archive", "the link %s has an absolute or empty target" % where)
    landing = posixpath.normpath(posixpath.join(posixpath.dirname(where), target))
    if landing == ".." or landing.startswith("../"):
        fail("bad_archive", "the link %s leads outside the workspace" % where)
    folder = open_folder(base + parts[:-1], create=True)
    try:
        try:
            os.symlink(target, parts[-1], dir_fd=folder)
        except FileExistsError:
            info = os.stat(parts[-1], dir_fd=folder, follow_symlinks=False)
            if stat.S_ISDIR(info.st_mode):
                fail("not_a_file", "%s is a folder" % where)
            os.unlink(parts[-1], dir_fd=folder)
            os.symlink(target, parts[-1], dir_fd=folder)
    finally:
        os.close(folder)


def file_sha256(folder_fd, name):
    # "" when the file cannot be read (the agent's code may have made it so).
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=folder_fd)
    except OSError:
        return ""
    try:
        digest = hashlib.sha256()
        while True:
            data = os.read(fd, 1 << 20)
            if not data:
                return digest.hexdigest()
            digest.update(data)
    except OSError:
        return ""
    finally:
        os.close(fd)


def digest_entries(folder_fd, prefix, depth, found, max_entries, skip):
    # Files, folders and links, as the host's TreeEntry; fifos and sockets are left
    # out (only files, folders and links are ever compared). False: stopped early.
    with os.scandir(folder_fd) as listing:
        names = sorted(entry.name for entry in listing)
    complete = True
    for name in names:
        if any(fnmatch.fnmatchcase(name, pattern) for pattern in skip):
            continue
        if len(found) >= max_entries:
            return False
        try:
            info = os.stat(name, dir_fd=folder_fd, follow_symlinks=False)
        except OSError:
            continue  # gone since it was listed
        path = prefix + name
        mode = stat.S_IMODE(info.st_mode)
        if stat.S_ISDIR(info.st_mode):
            found.append(entry(path, "folder", 0, mode, "", None))
            if depth >= DIGEST_DEPTH:
                complete = False
                continue
            try:
                inner = os.open(
                    name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=folder_fd
                )
            except OSError:
                complete = False
                continue
            try:
                if not digest_entries(inner, path + "/", depth + 1, found, max_entries, skip):
                    return False
            finally:
                os.close(inner)
        elif stat.S_ISREG(info.st_mode):
            sha = file_sha256(folder_fd, name)
            found.append(entry(path, "file", info.st_size, mode, sha, None))
        elif stat.S_ISLNK(info.st_mode):
            target = os.readlink(name, dir_fd=folder_fd)
            data = os.fsencode(target)
            sha = hashlib.sha256(data).hexdigest()
            found.append(entry(path, "link", len(data), mode, sha, target))
    return complete


def entry(path, kind, size, mode, sha, target):
    return {
        "path": path,
        "kind": kind,
        "size_bytes": size,
        "mode": mode,
        "sha256": sha,
        "link_target": target,
    }


def digest(rel, max_entries, skip):
    # Paths are relative to REL (where a project was unpacked), not to the workspace.
    folder = open_folder(components(rel))
    found = []
    complete = digest_entries(folder, "", 0, found, max_entries, skip)
    sys.stdout.write(json.dumps(found))
    say(ok=True, entries=len(found), complete=complete)


def pack(max_bytes):
    # A tar of the named regular files (paths relative to the workspace), each
    # opened component by component with O_NOFOLLOW. Sizes are checked first, so a
    # refusal writes nothing; a file that grew since is cut at its checked size.
    try:
        paths = json.loads(sys.stdin.buffer.read())
    except ValueError:
        paths = None
    if not isinstance(paths, list) or not all(isinstance(path, str) for path in paths):
        fail("usage", "stdin must be a JSON list of paths")
    sizes = []
    total = 0
    for path in paths:
        fd = open_file(components(path), os.O_RDONLY)
        info = os.fstat(fd)
        os.close(fd)
        if not stat.S_ISREG(info.st_mode):
            fail("not_a_file", "%s is not a regular file" % path)
        sizes.append(info.st_size)
        total += info.st_size
        if total > max_bytes:
            fail("too_big", "the files hold more than %d bytes; at most %d" % (total, max_bytes))
    with tarfile.open(fileobj=sys.stdout.buffer, mode="w|", format=tarfile.PAX_FORMAT) as out:
        for index, path in enumerate(paths):
            size = sizes[index]
            fd = open_file(components(path), os.O_RDONLY)
            os.set_blocking(fd, True)
            chunks = []
            left = size
            while left > 0:
                data = os.read(fd, min(left, 1 << 20))
                if not data:
                    break
                chunks.append(data)
                left -= len(data)
            info = os.fstat(fd)
            os.close(fd)
            member = tarfile.TarInfo("/".join(components(path)))
            data = b"".join(chunks)
            member.size = len(data)
            member.mode = info.st_mode & 0o755
            member.mtime = int(info.st_mtime)
            out.addfile(member, io.BytesIO(data))
    say(ok=True, files=len(paths), size_bytes=total)


def main():
    try:
        os.unlink(sys.argv[0])  # pybox's own script leaves nothing in the workspace
    except OSError:
        pass
    os.chdir("/")  # every path is opened from WORK's own descriptor, never from cwd
    operation, rel = sys.argv[1], sys.argv[2]
    if operation == "pack":
        pack(int(rel))
    elif operation == "digest":
        digest(rel, int(sys.argv[3]), sys.argv[4:])
    elif operation == "write":
        write(rel)
    elif operation == "read":
        read(rel, int(sys.argv[3]))
    elif operation == "list":
        listing(rel, int(sys.argv[3]))
    elif operation == "unpack":
        unpack(rel)
    else:
        fail("usage", "unknown operation %r" % operation)


main()
