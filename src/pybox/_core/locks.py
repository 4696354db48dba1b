"""Hash-locked requirement files (pure): what an image's packages are.

pybox accepts exactly what `pip-compile --generate-hashes` and `uv pip compile
--generate-hashes` write for wheels from an index: `name==version` with one or
more `--hash=sha256:...`, comments and line continuations. Anything that would
let pip fetch something the hashes do not pin (a URL, a path, an editable, an
index or find-links option, an include) is refused, and the message says which
line and what to do. pip then installs a file pybox writes from the parsed
values, never the file as given.

A lock made by pybox's scripts/lock also names, on `# wheel: FILE sha256:HEX`
comment lines under each package, the wheel each of its hashes is. pip ignores
them; pybox checks each against the package's own hashes, and before a build
checks that the image's Python and machine have a wheel for every package.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from pybox._core.errors import InvalidRequest
from pybox._core.preload import preload_directive

_NAME = r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?"
_REQUIREMENT_RE = re.compile(
    rf"(?P<name>{_NAME})(?:\[(?P<extras>{_NAME}(?:\s*,\s*{_NAME})*)\])?"
    r"\s*==\s*(?P<version>[A-Za-z0-9][A-Za-z0-9.+!_-]*)"
    r"\s*(?:;\s*(?P<marker>[A-Za-z0-9_.<>=!~'\"() ,-]+?))?\s*$"
)
_HASH_RE = re.compile(r"--hash[= ](?P<algo>[a-z0-9]+):(?P<digest>[0-9a-fA-F]+)")
_WHEEL_COMMENT_RE = re.compile(
    r"\s*#\s*wheel:\s*(?P<file>[A-Za-z0-9._+!-]+\.whl)\s+sha256:(?P<digest>[0-9a-f]{64})\s*"
)
_SHA256_HEX = re.compile(r"[0-9a-f]{64}")

_REFUSED_OPTIONS = {
    "-e": "an editable install",
    "--editable": "an editable install",
    "-i": "an index option",
    "--index-url": "an index option",
    "--extra-index-url": "an index option",
    "--no-index": "an index option",
    "-f": "a find-links option",
    "--find-links": "a find-links option",
    "--trusted-host": "a trusted-host option",
    "-r": "an include of another file",
    "--requirement": "an include of another file",
    "-c": "a constraints include",
    "--constraint": "a constraints include",
    "--pre": "a resolver option",
    "--prefer-binary": "a resolver option",
    "--only-binary": "a resolver option",
    "--no-binary": "a resolver option",
}
_INDEX_HINT = (
    "pybox takes the index from this machine's pip configuration; remove the line "
    "(compile with --no-emit-index-url / --no-emit-find-links)"
)


def normalize_name(name: str) -> str:
    """PEP 503 normalized project name."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class LockedRequirement:
    name: str
    version: str
    hashes: tuple[str, ...]
    extras: tuple[str, ...] = ()
    marker: str | None = None
    # The wheel file names its `# wheel:` comments give (scripts/lock writes them).
    wheels: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return normalize_name(self.name)

    @property
    def pin(self) -> str:
        return f"{self.key}=={self.version}"

    def line(self) -> str:
        extras = f"[{','.join(self.extras)}]" if self.extras else ""
        marker = f" ; {self.marker}" if self.marker else ""
        hashes = " ".join(f"--hash={h}" for h in self.hashes)
        return f"{self.key}{extras}=={self.version}{marker} {hashes}"


@dataclass(frozen=True)
class Lock:
    """A parsed lock file and the hash of its exact bytes."""

    source: str
    sha256: str
    requirements: tuple[LockedRequirement, ...]
    # Modules a warm box of the image imports before its code arrives
    # (`# pybox: preload numpy pandas` lines; pybox._core.preload).
    preload: tuple[str, ...] = ()

    def requirements_text(self) -> str:
        """What pip installs: one normalized line per requirement."""
        return "".join(r.line() + "\n" for r in self.requirements)

    @property
    def pins(self) -> tuple[str, ...]:
        return tuple(r.pin for r in self.requirements)


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """Join backslash continuations; drop comments. Yields (first line number, text)."""
    joined: list[tuple[int, str]] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        if not pending:
            start = number
        line = raw
        # A comment starts at '#' at the line start or after whitespace (pip's rule).
        comment = re.search(r"(^|\s)#", line)
        if comment:
            line = line[: comment.start()]
        if line.rstrip().endswith("\\"):
            pending.append(line.rstrip()[:-1])
            continue
        pending.append(line)
        logical = " ".join(part.strip() for part in pending).strip()
        pending = []
        if logical:
            joined.append((start, logical))
    if pending:
        logical = " ".join(part.strip() for part in pending).strip()
        if logical:
            joined.append((start, logical))
    return joined


def _refuse(source: str, number: int, line: str, problem: str, hint: str) -> InvalidRequest:
    shown = line if len(line) <= 120 else line[:117] + "..."
    return InvalidRequest(f"{source}, line {number}: {problem}: {shown!r}. {hint}.")


def parse_lock(text: str, source: str) -> Lock:
    """Parse a hash-locked requirements file, or refuse it with the line and the reason."""
    requirements: list[LockedRequirement] = []
    seen: dict[str, int] = {}
    for number, line in _logical_lines(text):
        first = line.split()[0]
        option = first.split("=", 1)[0]
        if option in _REFUSED_OPTIONS:
            hint = (
                _INDEX_HINT
                if "index" in _REFUSED_OPTIONS[option] or "links" in _REFUSED_OPTIONS[option]
                else "Lock every package as name==version with --hash=sha256:... lines "
                "(pip-compile --generate-hashes or uv pip compile --generate-hashes)"
            )
            raise _refuse(source, number, line, f"{_REFUSED_OPTIONS[option]} is not allowed", hint)
        if first.startswith("-") and not first.startswith("--hash"):
            raise _refuse(
                source,
                number,
                line,
                f"the option {option} is not allowed",
                "A lock holds only name==version lines with --hash options",
            )
        hashes_at = line.find("--hash")
        spec = (line if hashes_at < 0 else line[:hashes_at]).strip()
        rest = "" if hashes_at < 0 else line[hashes_at:]
        if "://" in spec or " @ " in spec or spec.startswith(("@", "file:")):
            raise _refuse(
                source,
                number,
                line,
                "a URL is not allowed",
                "Lock the package by name==version from the index, with its hashes",
            )
        if spec.startswith((".", "/", "~")) or "/" in spec.split(";")[0] or "\\" in spec:
            raise _refuse(
                source,
                number,
                line,
                "a local path is not allowed",
                "Lock the package by name==version from the index, with its hashes",
            )
        match = _REQUIREMENT_RE.fullmatch(spec)
        if match is None:
            raise _refuse(
                source,
                number,
                line,
                "not a pinned requirement",
                "Each entry must be exactly name==version (no ranges, no wildcards), as "
                "pip-compile --generate-hashes writes it",
            )
        if "*" in match.group("version"):
            raise _refuse(source, number, line, "a wildcard version", "Pin an exact version")
        hashes: list[str] = []
        leftover = _HASH_RE.sub("", rest).strip()
        if leftover:
            raise _refuse(
                source,
                number,
                line,
                f"unexpected text after the requirement ({leftover[:40]!r})",
                "Only --hash=sha256:... options may follow a requirement",
            )
        for found in _HASH_RE.finditer(rest):
            algo, digest = found.group("algo"), found.group("digest").lower()
            if algo != "sha256" or not _SHA256_HEX.fullmatch(digest):
                raise _refuse(
                    source,
                    number,
                    line,
                    f"the hash {algo}:{found.group('digest')[:16]}... is not a sha256 digest",
                    "Use --hash=sha256: followed by 64 hex digits",
                )
            if f"sha256:{digest}" not in hashes:
                hashes.append(f"sha256:{digest}")
        if not hashes:
            raise _refuse(
                source,
                number,
                line,
                "no --hash",
                "Every package needs its hashes; regenerate the lock with --generate-hashes",
            )
        extras = tuple(
            sorted(normalize_name(e.strip()) for e in (match.group("extras") or "").split(",") if e)
        )
        requirement = LockedRequirement(
            name=match.group("name"),
            version=match.group("version"),
            hashes=tuple(hashes),
            extras=extras,
            marker=(match.group("marker") or "").strip() or None,
        )
        if requirement.key in seen:
            raise _refuse(
                source,
                number,
                line,
                f"{requirement.key} is locked twice (first on line {seen[requirement.key]})",
                "Keep one line per package",
            )
        seen[requirement.key] = number
        requirements.append(requirement)
    if not requirements:
        raise InvalidRequest(
            f"{source} locks no package. Generate it with `pip-compile --generate-hashes` or "
            "`uv pip compile --generate-hashes`."
        )
    return Lock(
        source=source,
        sha256="sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest(),
        requirements=_with_wheels(text, source, requirements),
        preload=preload_directive(text, source),
    )


def _with_wheels(
    text: str, source: str, requirements: list[LockedRequirement]
) -> tuple[LockedRequirement, ...]:
    """Attach each `# wheel:` comment to its package; one whose hash the package
    does not hold is refused, so the names can be trusted as far as the hashes."""
    by_pin = {(r.key, r.version): r for r in requirements}
    wheels: dict[str, list[str]] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        found = _WHEEL_COMMENT_RE.fullmatch(raw)
        if found is None:
            continue
        name, version = wheel_tags(found.group("file"))[:2]
        owner = by_pin.get((normalize_name(name), version))
        if owner is None or f"sha256:{found.group('digest')}" not in owner.hashes:
            raise _refuse(
                source,
                number,
                raw.strip(),
                "a wheel comment whose package or hash the lock does not hold",
                "Regenerate the lock (scripts/lock) instead of editing it",
            )
        wheels.setdefault(owner.key, []).append(found.group("file"))
    return tuple(
        LockedRequirement(r.name, r.version, r.hashes, r.extras, r.marker, tuple(wheels[r.key]))
        if r.key in wheels
        else r
        for r in requirements
    )


def wheel_tags(filename: str) -> tuple[str, str, str, str, str]:
    """(name, version, python tags, abi tag, platform tags) of a wheel file name."""
    parts = filename[: -len(".whl")].split("-")
    if len(parts) not in (5, 6):
        return (parts[0], parts[1] if len(parts) > 1 else "", "", "", "")
    return (parts[0], parts[1], parts[-3], parts[-2], parts[-1])


def wheel_fits(filename: str, python_tag: str, machine: str) -> bool:
    """Whether pip could install this wheel on CPython `python_tag` (cp311) on `machine`."""
    _, _, pythons, abi, platforms = wheel_tags(filename)
    minor = int(python_tag[3:]) if python_tag[3:].isdigit() else 0
    python_ok = any(
        tag == python_tag
        or (abi == "none" and tag.startswith("py3"))
        or (abi == "abi3" and tag.startswith("cp3") and tag[3:].isdigit() and int(tag[3:]) <= minor)
        for tag in pythons.split(".")
    )
    platform_ok = any(
        tag == "any" or (tag.startswith("manylinux") and tag.endswith("_" + machine))
        for tag in platforms.split(".")
    )
    return python_ok and platform_ok


def wheels_missing(lock: Lock, python_tag: str, machine: str) -> tuple[str, ...]:
    """The packages whose named wheels include none for this Python and machine.

    Only packages with `# wheel:` comments are checked: a lock without them
    (pip-compile, uv) has hashes for every file of each version, and pip decides.
    """
    return tuple(
        r.pin
        for r in lock.requirements
        if r.wheels and not any(wheel_fits(w, python_tag, machine) for w in r.wheels)
    )


def wheel_pythons(lock: Lock) -> tuple[str, ...]:
    """The CPython tags (cp311, ...) the lock's named wheels are built for."""
    tags = {
        tag
        for r in lock.requirements
        for w in r.wheels
        for tag in wheel_tags(w)[2].split(".")
        if tag.startswith("cp")
    }
    return tuple(sorted(tags))
