"""One read-only pass over a host project: a tar stream for the box and its baseline.

The walk opens every folder and file relative to its parent's descriptor with
`O_NOFOLLOW` (a link is read as a link, never followed), in sorted order, and
writes nothing under the project. Folders and files are opened with `O_NOATIME`
where the kernel allows it (the owner's files; anyone else's falls back
without), so the kernel does not update their access times either; a link's
target is read with `readlink`, which the kernel may count as an access of the
link itself. Each file is read once: the bytes hashed are the bytes written,
and its `fstat` must be the regular file `lstat` saw.

Modes in the copy: a file keeps its permission bits & 0o755 (the executable bit
too) and stays readable by its owner (| 0o400); a folder & 0o755, always
usable by its owner (| 0o700); links are 0o777. The baseline records the modes
of the copy, so an untouched file is unchanged in the box's digest.

What is left behind is listed with the reason: folders named in the policy's
`skip_names`, secret-shaped names and files holding a key or token
(`secrets.py`, not configurable), links that
lead outside the project or are absolute, fifos, sockets and devices, files
larger than `max_file_bytes`, unreadable ones, names that are not UTF-8 or hold
control or bidirectional/invisible format characters (`display.name_problem`),
and paths no sandbox tool could name (deeper than 32 folders or longer than
1024 bytes). More entries than `max_files` (files, links
and folders), more bytes than `max_total_bytes` or more skipped entries than
`max_files` stop the copy with `ProjectTooBig`; the stream written so far is
then incomplete and must be thrown away.
"""

from __future__ import annotations

import errno
import hashlib
import io
import os
import posixpath
import stat
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from pybox._core.display import name_problem
from pybox._core.errors import ProjectTooBig
from pybox._features.experiments.project import MIB, ProjectPolicy
from pybox._features.experiments.secrets import (
    content_checked,
    content_secret_reason,
    secret_reason,
)
from pybox._features.experiments.tree import ProjectCopy, Skipped, TreeEntry, printable
from pybox._features.sandboxes.paths import MAX_COMPONENTS, MAX_PATH_BYTES

O_NOATIME = getattr(os, "O_NOATIME", 0)
FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: a fifo swapped in between lstat and open does not block the walk.
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
LINK_MODE = 0o777
BUILD_OUTPUT = "build output or cache (configurable)"
READ_CHUNK = 1 << 20


def pack_project(root: Path, policy: ProjectPolicy, out: BinaryIO) -> ProjectCopy:
    """Write the project at `root` (checked by `check_project_path`) as a tar stream
    to `out`, and return its baseline and what was left behind."""
    walk = _Walk(root, policy)
    with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as archive:
        walk.archive = archive
        top = _open(str(root), FOLDER_FLAGS, None)
        try:
            walk.folder(top, ())
        finally:
            os.close(top)
    files = sum(entry.kind == "file" for entry in walk.entries)
    return ProjectCopy(root, tuple(walk.entries), tuple(walk.skipped), files, walk.total_bytes)


class _Walk:
    def __init__(self, root: Path, policy: ProjectPolicy) -> None:
        self.root = root
        self.real_root = os.path.realpath(root)
        self.policy = policy
        self.archive: tarfile.TarFile | None = None
        self.entries: list[TreeEntry] = []
        self.skipped: list[Skipped] = []
        self.total_bytes = 0

    def folder(self, fd: int, parts: tuple[str, ...]) -> None:
        with os.scandir(fd) as listing:
            names = sorted(entry.name for entry in listing)
        for name in names:
            self.entry(fd, (*parts, name))

    def entry(self, fd: int, parts: tuple[str, ...]) -> None:
        name = parts[-1]
        rel = "/".join(parts)
        try:
            info = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except OSError as exc:
            self.skip(rel, _unreadable(exc))
            return
        problem = _name_problem(rel, parts)
        if problem:
            self.skip(rel, problem)
            return
        if stat.S_ISDIR(info.st_mode):
            self.subfolder(fd, parts, rel, info)
        elif stat.S_ISLNK(info.st_mode):
            reason = (
                secret_reason(parts, False)
                or (content_secret_reason(parts, None) if content_checked(parts) else None)
                or self.link(fd, parts, rel)
            )
            if reason:
                self.skip(rel, reason)
        elif stat.S_ISREG(info.st_mode):
            reason = secret_reason(parts, False) or self.file(fd, parts, rel, info)
            if reason:
                self.skip(rel, reason)
        else:
            self.skip(rel, f"{_kind_name(info.st_mode)}: only files, folders and links are copied")

    def subfolder(self, fd: int, parts: tuple[str, ...], rel: str, info: os.stat_result) -> None:
        if self.policy.skips_folder(parts[-1]):
            self.skip(rel, BUILD_OUTPUT)
            return
        reason = secret_reason(parts, True)
        if reason:
            self.skip(rel, reason)
            return
        try:
            inner = _open(parts[-1], FOLDER_FLAGS, fd)
        except OSError as exc:
            self.skip(rel, _unreadable(exc))
            return
        try:
            if not _same(os.fstat(inner), info, stat.S_ISDIR):
                self.skip(rel, "changed while being copied")
                return
            mode = (info.st_mode & 0o755) | 0o700
            self.add(
                TreeEntry(rel, "folder", 0, mode, ""), _member(rel, tarfile.DIRTYPE, mode, info)
            )
            self.folder(inner, parts)
        finally:
            os.close(inner)

    def link(self, fd: int, parts: tuple[str, ...], rel: str) -> str | None:
        try:
            target = os.readlink(parts[-1], dir_fd=fd)
        except OSError as exc:
            return _unreadable(exc)
        shown = repr(target[:200])
        if _name_problem(target, ()):
            return f"link target {printable(target)!r} is not a plain UTF-8 path"
        if target.startswith("/"):
            return f"link leads outside the project ({shown}): absolute targets are not copied"
        lexical = posixpath.normpath(posixpath.join(posixpath.dirname(rel), target))
        on_host = os.path.realpath(os.path.join(self.root, rel))
        inside = on_host == self.real_root or on_host.startswith(self.real_root + os.sep)
        if lexical == ".." or lexical.startswith("../") or not inside:
            return f"link leads outside the project ({shown})"
        data = os.fsencode(target)
        info = _member(rel, tarfile.SYMTYPE, LINK_MODE, None)
        info.linkname = target
        entry = TreeEntry(rel, "link", len(data), LINK_MODE, _sha256(data), target)
        self.add(entry, info)
        return None

    def file(self, fd: int, parts: tuple[str, ...], rel: str, info: os.stat_result) -> str | None:
        limit = self.policy.max_file_bytes
        if info.st_size > limit:
            return _too_large(info.st_size, limit)
        try:
            source = _open(parts[-1], FILE_FLAGS, fd)
        except OSError as exc:
            return "changed while being copied" if exc.errno == errno.ELOOP else _unreadable(exc)
        try:
            opened = os.fstat(source)
            if not _same(opened, info, stat.S_ISREG):
                return "changed while being copied"
            if opened.st_size > limit:
                return _too_large(opened.st_size, limit)
            chunks, size = [], 0
            while size <= limit:
                try:
                    chunk = os.read(source, READ_CHUNK)
                except OSError as exc:
                    return _unreadable(exc)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
        finally:
            os.close(source)
        if size > limit:
            return _too_large(size, limit)
        data = b"".join(chunks)
        reason = content_secret_reason(parts, data)  # the bytes just read: no second open
        if reason:
            return reason
        self.total_bytes += size
        if self.total_bytes > self.policy.max_total_bytes:
            raise ProjectTooBig(
                f"The project {str(self.root)!r} holds more than "
                f"{self.policy.max_total_bytes} bytes ({self.policy.max_total_bytes / MIB:g} MiB) "
                f"of files to copy: {self.total_bytes} bytes by {rel!r}; the limit is "
                f"{self.policy.max_total_bytes} bytes. Copy a smaller folder of the project, or "
                "have the operator raise the limit."
            )
        mode = (info.st_mode & 0o755) | 0o400
        member = _member(rel, tarfile.REGTYPE, mode, info)
        member.size = size
        self.add(TreeEntry(rel, "file", size, mode, _sha256(data)), member, data)
        return None

    def add(self, entry: TreeEntry, member: tarfile.TarInfo, data: bytes | None = None) -> None:
        if len(self.entries) >= self.policy.max_files:
            raise ProjectTooBig(
                f"The project {str(self.root)!r} holds more than {self.policy.max_files} files, "
                f"links and folders to copy (the next is {entry.path!r}); the limit is "
                f"{self.policy.max_files}. Copy a smaller folder of the project, skip more "
                "build output, or have the operator raise the limit."
            )
        assert self.archive is not None
        self.archive.addfile(member, io.BytesIO(data) if data is not None else None)
        self.entries.append(entry)

    def skip(self, rel: str, reason: str) -> None:
        rel = printable(rel)
        if len(self.skipped) >= self.policy.max_files:
            raise ProjectTooBig(
                f"The project {str(self.root)!r} holds more than {self.policy.max_files} "
                f"entries that cannot be copied (the next is {rel!r}: {reason}); the limit is "
                f"{self.policy.max_files}. Copy a smaller folder of the project."
            )
        self.skipped.append(Skipped(rel, reason))


def _open(name: str, flags: int, dir_fd: int | None) -> int:
    """`os.open` with O_NOATIME where the kernel allows it (EPERM: not the owner's)."""
    if O_NOATIME:
        try:
            return os.open(name, flags | O_NOATIME, dir_fd=dir_fd)
        except PermissionError as exc:
            if exc.errno != errno.EPERM:
                raise
    return os.open(name, flags, dir_fd=dir_fd)


def _member(rel: str, kind: bytes, mode: int, info: os.stat_result | None) -> tarfile.TarInfo:
    member = tarfile.TarInfo(rel)
    member.type = kind
    member.mode = mode
    member.mtime = int(info.st_mtime) if info is not None else 0
    member.uid = member.gid = 0
    member.uname = member.gname = ""
    return member


def _same(opened: os.stat_result, seen: os.stat_result, is_kind: Callable[[int], bool]) -> bool:
    return is_kind(opened.st_mode) and (opened.st_dev, opened.st_ino) == (
        seen.st_dev,
        seen.st_ino,
    )


def _name_problem(rel: str, parts: tuple[str, ...]) -> str | None:
    try:
        size = len(rel.encode("utf-8"))
    except UnicodeEncodeError:
        return "name is not valid UTF-8"
    problem = name_problem(rel)
    if problem is not None:
        return f"name holds {problem}"
    if len(parts) > MAX_COMPONENTS:
        return f"nested deeper than {MAX_COMPONENTS} folders"
    if size > MAX_PATH_BYTES:
        return f"path longer than {MAX_PATH_BYTES} bytes"
    return None


def _unreadable(exc: OSError) -> str:
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "cannot be read (permission denied)"
    if exc.errno == errno.ENOENT:
        return "vanished while being copied"
    return f"cannot be read ({exc.strerror or exc.__class__.__name__})"


def _too_large(size: int, limit: int) -> str:
    return f"larger than {limit} bytes ({size} bytes; the limit is max_file_bytes)"


def _kind_name(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a fifo"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
