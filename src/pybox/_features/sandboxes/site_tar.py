"""What an install box hands back, made safe before a sandbox sees it (no engine).

The target folder pip filled is read out of the install box as the engine packs
it. It is rewritten here into a tar a sandbox can unpack without looking:
regular files and directories only, relative names without `..`, permission bits
without setuid, setgid or sticky, owner 0. Links, devices, FIFOs and names
that could land outside the folder are left out, and each one left out is
named. pip's `--report` becomes the list of what was installed, with each
wheel's sha256 as pip checked its download against the index. pip's failures
are explained with pip's own words marked as the box's (`BoxQuote`).
"""

from __future__ import annotations

import io
import json
import re
import tarfile
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pybox._adapters.piptool import redact
from pybox._core.boxquote import BoxQuote, quoting
from pybox._core.display import escape_text, name_problem
from pybox._core.errors import LibraryInstallError
from pybox._core.limits import MIB
from pybox._core.locks import normalize_name
from pybox._features.images.pip_output import explain_pip_failure

_HEX64_RE = re.compile(r"[0-9a-f]{64}")
_NAME_RE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?")
_VERSION_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9.+!_-]{0,99}")
MAX_NAME_BYTES = 4096
MAX_ENTRIES = 200_000
# A tar entry's header, padding and long-name record, at the most.
TAR_ENTRY_BYTES = 2048


@dataclass(frozen=True)
class InstalledPackage:
    """One installed distribution, as pip's report names it."""

    name: str
    version: str
    wheel_sha256: str | None  # the wheel file's hash as pip downloaded it


@dataclass(frozen=True)
class SiteTar:
    """The rewritten folder: its tar, what it holds and what was left out (and why)."""

    tar_bytes: bytes
    files: int
    directories: int
    file_bytes: int
    skipped: tuple[str, ...]


def describe_bytes(size: int) -> str:
    if size < MIB:
        return f"{size / 1024:.1f} KiB ({size} bytes)"
    return f"{size / MIB:.1f} MiB ({size} bytes)"


def too_large(size: int, max_bytes: int) -> LibraryInstallError:
    return LibraryInstallError(
        f"The installed libraries take {describe_bytes(size)}, more than the limit of "
        f"{describe_bytes(max_bytes)}. Nothing was installed; ask for fewer or smaller "
        "libraries, or for a larger limit."
    )


def _last_json(lines: list[str]) -> dict[str, Any] | None:
    """The last line of a box's output that is a JSON object."""
    for line in reversed(lines):
        try:
            found = json.loads(line)
        except ValueError:
            continue
        if isinstance(found, dict):
            return found
    return None


def site_relpath(lines: list[str]) -> str | None:
    """The user site the box's Python reported, if it is a plain relative path."""
    found = (_last_json(lines) or {}).get("site")
    parts = found.split("/") if isinstance(found, str) else []
    if parts and all(p not in ("", ".", "..") and p.isprintable() for p in parts):
        return str(found)
    return None


def measured_size(code: int | None, lines: list[str], max_bytes: int) -> int:
    """The box's measure of its installed files checked against `max_bytes`; the
    most the engine's tar of them may then be."""
    found = _last_json(lines) or {}
    size, entries = found.get("bytes"), found.get("entries")
    if code != 0 or not isinstance(size, int) or not isinstance(entries, int):
        said = escape_text(" ".join(lines[-3:])[:300])
        raise LibraryInstallError(
            f"Measuring the installed files failed (exit {code}): {said}. Nothing was installed."
        )
    if size > max_bytes:
        raise too_large(size, max_bytes)
    if entries > MAX_ENTRIES:
        raise LibraryInstallError(
            f"The libraries installed {entries} files and folders, more than {MAX_ENTRIES}. "
            "Nothing was installed; ask for fewer libraries."
        )
    return max(size, 0) + max(entries, 0) * TAR_ENTRY_BYTES + MIB


def pip_failure(
    code: int | None, lines: list[str], *, room_bytes: int, max_bytes: int
) -> tuple[str, BoxQuote | None]:
    """Why pip failed in the install box: pybox's words around pip's own."""
    if any("No space left on device" in line for line in lines):
        return (
            f"The libraries need more room than the install box has ({describe_bytes(room_bytes)} "
            f"for pip's downloads and the installed files): they are over the limit of "
            f"{describe_bytes(max_bytes)}. Nothing was installed; ask for fewer or smaller "
            "libraries.",
            None,
        )
    package, why = explain_pip_failure(lines)
    tail = "\n  ".join(escape_text(redact(line)) for line in lines[-12:])
    where = f"while installing {package}: " if package else ""
    return quoting(
        f"Installing the libraries failed (pip exit {code}); pip in the install box said: ",
        f"{escape_text(redact(where + why)).rstrip('.')}.\npip's last lines:\n  {tail}",
        "\nNothing was installed. Check the names and versions (only wheels for the image's "
        "Python are installed) and try again.",
    )


def read_member(raw: bytes) -> bytes:
    """The one regular file in the engine's tar of a file."""
    try:
        with tarfile.open(fileobj=io.BytesIO(raw), mode="r:") as archive:
            for member in archive:
                data = archive.extractfile(member) if member.isreg() else None
                if data is not None:
                    return data.read()
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise LibraryInstallError(f"pip's install report could not be read: {exc}.") from None
    raise LibraryInstallError("pip wrote no install report; nothing was installed.")


def packages_from_report(report: object) -> tuple[InstalledPackage, ...]:
    """The `install` entries of pip's `--report` JSON, sorted by name."""
    if not isinstance(report, Mapping) or not isinstance(report.get("install"), list):
        raise LibraryInstallError(
            "pip's install report has no `install` list; pybox cannot tell what was installed. "
            "Nothing was installed; report this with pip's version."
        )
    found: dict[str, InstalledPackage] = {}
    for entry in report["install"]:
        metadata = entry.get("metadata") if isinstance(entry, Mapping) else None
        name = metadata.get("name") if isinstance(metadata, Mapping) else None
        version = metadata.get("version") if isinstance(metadata, Mapping) else None
        if not (isinstance(name, str) and _NAME_RE.fullmatch(name)) or not (
            isinstance(version, str) and _VERSION_RE.fullmatch(version)
        ):
            shown = escape_text(repr(entry)[:120])
            raise LibraryInstallError(
                f"pip's install report has an entry without a valid name and version: {shown}. "
                "Nothing was installed."
            )
        key = normalize_name(name)
        found[key] = InstalledPackage(key, version, _wheel_sha256(entry.get("download_info")))
    return tuple(found[key] for key in sorted(found))


def _wheel_sha256(download_info: Any) -> str | None:
    """The sha256 pip checked the download against, or None when the index gave none."""
    if not isinstance(download_info, Mapping):
        return None
    archive = download_info.get("archive_info")
    if not isinstance(archive, Mapping):
        return None
    hashes = archive.get("hashes")
    candidate = hashes.get("sha256") if isinstance(hashes, Mapping) else None
    if candidate is None and isinstance(archive.get("hash"), str):
        algorithm, _, value = str(archive["hash"]).partition("=")
        candidate = value if algorithm == "sha256" else None
    return candidate if isinstance(candidate, str) and _HEX64_RE.fullmatch(candidate) else None


def _relative(name: str, top: str) -> tuple[str | None, str | None]:
    """(name below `top`, why it is left out): `top` itself is (None, None)."""
    problem = name_problem(name)
    if problem is not None:
        return None, f"its name holds {problem}"
    if len(name.encode("utf-8", "surrogateescape")) > MAX_NAME_BYTES:
        return None, "its name is too long"
    if name.startswith("/"):
        return None, "an absolute name"
    parts = [part for part in name.split("/") if part not in ("", ".")]
    if ".." in parts:
        return None, "a name with '..'"
    if not parts or parts[0] != top:
        return None, f"outside {top}/"
    if len(parts) == 1:
        return None, None
    return "/".join(parts[1:]), None


def _kind(member: tarfile.TarInfo) -> str | None:
    """Why `member` is left out by its type, or None for a file or directory."""
    if member.issym():
        return f"a symbolic link to {escape_text(member.linkname[:80])}"
    if member.islnk():
        return f"a hard link to {escape_text(member.linkname[:80])}"
    if member.isreg() or member.isdir():
        return None
    return "a device, FIFO or other special file"


def safe_site_tar(raw: bytes, top: str, max_bytes: int) -> SiteTar:
    """`raw` (the engine's tar of the folder `top`) as a tar of its regular files and
    directories, named relative to `top`; `too_large` when its files pass `max_bytes`."""
    out = io.BytesIO()
    skipped: list[str] = []
    kinds: dict[str, bool] = {}  # name -> is a directory
    total = 0
    try:
        with (
            tarfile.open(fileobj=io.BytesIO(raw), mode="r:") as source,
            tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as target,
        ):
            for member in source:
                name, why = _relative(member.name, top)
                if name is None:
                    if why is not None:
                        skipped.append(f"{escape_text(member.name[:200])}: {why}")
                    continue
                if member.isdir() and kinds.get(name) is True:
                    continue  # already made as the folder of an earlier entry
                why = _kind(member) or _placement(name, kinds)
                if why is not None:
                    skipped.append(f"{escape_text(name[:200])}: {why}")
                    continue
                for parent in _missing_parents(name, kinds):
                    target.addfile(_entry(parent, tarfile.DIRTYPE, 0o755, member.mtime))
                kinds[name] = member.isdir()
                info = _entry(name, member.type, member.mode, member.mtime)
                if member.isdir():
                    target.addfile(info)
                    continue
                total += member.size
                if total > max_bytes:
                    raise too_large(total, max_bytes)
                info.type, info.size = tarfile.REGTYPE, member.size
                target.addfile(info, source.extractfile(member))
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise LibraryInstallError(
            f"The install box's folder could not be read as a tar: {exc}. Nothing was installed."
        ) from None
    directories = sum(1 for is_dir in kinds.values() if is_dir)
    return SiteTar(out.getvalue(), len(kinds) - directories, directories, total, tuple(skipped))


def _placement(name: str, kinds: Mapping[str, bool]) -> str | None:
    """Why `name` cannot go where it says (a repeat, or under a file)."""
    if name in kinds:
        return "a second entry of that name"
    parts = name.split("/")
    for depth in range(1, len(parts)):
        if kinds.get("/".join(parts[:depth])) is False:
            return "its folder is a file"
    return None


def _missing_parents(name: str, kinds: dict[str, bool]) -> list[str]:
    """The folders above `name` the tar has not had yet (recorded as had now)."""
    parts = name.split("/")
    missing = []
    for depth in range(1, len(parts)):
        parent = "/".join(parts[:depth])
        if parent not in kinds:
            kinds[parent] = True
            missing.append(parent)
    return missing


def _entry(name: str, kind: bytes, mode: int, mtime: float) -> tarfile.TarInfo:
    """A tar entry owned by 0, its permission bits only (no setuid, setgid or sticky),
    readable and writable by its owner, so it can always be unpacked and removed."""
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = (mode & 0o777) | (0o700 if kind == tarfile.DIRTYPE else 0o600)
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mtime = max(0, int(mtime))
    return info
