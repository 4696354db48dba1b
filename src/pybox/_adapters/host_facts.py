"""Facts about this machine: who owns a box, where its package mirror is, its bridge,
its mounts and pybox's own memory."""

from __future__ import annotations

import itertools
import os
import re
import resource
import socket
import sys
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


def bridge_gateway(interface: str = "docker0") -> str | None:
    """The IPv4 address of the engine's bridge on this machine, from `ip`; None if absent."""
    import subprocess  # here: only `pybox verify` asks, and every run imports this module

    try:
        shown = subprocess.run(
            ["ip", "-o", "-4", "addr", "show", interface],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    words = shown.split()
    for before, word in itertools.pairwise(words):
        if before == "inet" and "/" in word:
            return word.split("/", 1)[0]
    return None


def mount_devices(mountinfo: Path = Path("/proc/self/mountinfo")) -> frozenset[str]:
    """The `major:minor` device of every filesystem mounted in this process's view."""
    try:
        lines = mountinfo.read_text().splitlines()
    except OSError:
        return frozenset()
    return frozenset(line.split()[2] for line in lines if len(line.split()) > 2)


def _status_kib(field: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def rss_bytes() -> int | None:
    """This process's resident memory now."""
    kib = _status_kib("VmRSS")
    return None if kib is None else kib * 1024


def reset_peak_rss() -> bool:
    """Start this process's peak-memory count afresh (Linux `clear_refs` 5)."""
    try:
        with open("/proc/self/clear_refs", "w") as handle:
            handle.write("5")
    except OSError:
        return False
    return True


def peak_rss_bytes() -> int | None:
    """This process's peak resident memory since the last reset (or since it started)."""
    kib = _status_kib("VmHWM")
    if kib is not None:
        return kib * 1024
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # Linux counts ru_maxrss in KiB, macOS in bytes.
    return peak if sys.platform == "darwin" else peak * 1024
