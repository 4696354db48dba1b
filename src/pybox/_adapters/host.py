"""Facts about this machine: who owns a box, and where its package mirror is."""

from __future__ import annotations

import os
import re
import socket
from dataclasses import dataclass
from pathlib import Path

from pybox._core.errors import ConfigError


def _start_ticks(pid: int) -> str | None:
    """The process's start time in clock ticks: tells a pid apart from its reuse."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may contain spaces and parentheses.
    fields = raw.rsplit(")", 1)[-1].split()
    return fields[19] if len(fields) > 19 else None


def current_owner() -> str:
    """`host:pid:start-ticks` of this process, written on every box it makes."""
    pid = os.getpid()
    return f"{socket.gethostname()}:{pid}:{_start_ticks(pid) or '0'}"


def owner_alive(owner: str) -> bool | None:
    """True/False for an owner on this host; None when it cannot be told."""
    parts = owner.rsplit(":", 2)
    if len(parts) != 3 or parts[0] != socket.gethostname():
        return None
    try:
        pid = int(parts[1])
    except ValueError:
        return None
    ticks = _start_ticks(pid)
    return ticks is not None and ticks == parts[2]


@dataclass(frozen=True)
class AptSource:
    uri: str
    suite: str
    components: tuple[str, ...]
    keyring: str | None
    origin: str


_DEB_LINE = re.compile(
    r"^deb\s+(\[(?P<opts>[^\]]*)\]\s+)?(?P<uri>\S+)\s+(?P<suite>\S+)\s*(?P<comps>.*)$"
)


# apt reads boolean fields case-insensitively with these spellings for "off".
_APT_FALSE = frozenset({"no", "false", "without", "off", "disable", "0"})


def _deb822_sources(path: Path) -> list[AptSource]:
    found: list[AptSource] = []
    for stanza in re.split(r"\n\s*\n", path.read_text()):
        fields: dict[str, str] = {}
        for line in stanza.splitlines():
            if line.startswith("#") or ":" not in line or line[:1].isspace():
                continue
            key, value = line.split(":", 1)
            fields[key.strip().lower()] = value.strip()
        enabled = fields.get("enabled", "yes").strip().lower()
        if "deb" not in fields.get("types", "").split() or enabled in _APT_FALSE:
            continue
        for uri in fields.get("uris", "").split():
            for suite in fields.get("suites", "").split():
                found.append(
                    AptSource(
                        uri.rstrip("/"),
                        suite,
                        tuple(fields.get("components", "").split()),
                        fields.get("signed-by") or None,
                        str(path),
                    )
                )
    return found


def _one_line_sources(path: Path) -> list[AptSource]:
    found: list[AptSource] = []
    for line in path.read_text().splitlines():
        match = _DEB_LINE.match(line.split("#", 1)[0].strip())
        if not match:
            continue
        keyring = None
        for option in (match.group("opts") or "").split():
            if option.startswith("signed-by="):
                keyring = option.split("=", 1)[1]
        found.append(
            AptSource(
                match.group("uri").rstrip("/"),
                match.group("suite"),
                tuple(match.group("comps").split()),
                keyring,
                str(path),
            )
        )
    return found


def apt_sources(etc: Path = Path("/etc/apt")) -> list[AptSource]:
    """Every enabled `deb` source of this machine, in apt's reading order."""
    sources: list[AptSource] = []
    main_list = etc / "sources.list"
    if main_list.is_file():
        sources += _one_line_sources(main_list)
    directory = etc / "sources.list.d"
    if directory.is_dir():
        for path in sorted(directory.iterdir()):
            if path.suffix == ".list":
                sources += _one_line_sources(path)
            elif path.suffix == ".sources":
                sources += _deb822_sources(path)
    return sources


def os_codename(os_release: Path = Path("/etc/os-release")) -> str | None:
    try:
        for line in os_release.read_text().splitlines():
            if line.startswith("VERSION_CODENAME="):
                return line.split("=", 1)[1].strip().strip('"') or None
    except OSError:
        return None
    return None


def base_mirror(sources: list[AptSource], suite: str) -> AptSource:
    """The machine's mirror for the base distribution `suite` (not updates or security)."""
    for source in sources:
        if source.suite == suite and "main" in source.components:
            return source
    listed = ", ".join(f"{s.uri} {s.suite}" for s in sources) or "none"
    raise ConfigError(
        f"No apt source for the suite {suite!r} with the 'main' component was found in "
        f"/etc/apt (found: {listed}). Pass the mirror explicitly with --mirror URL "
        "(and --suite NAME)."
    )
