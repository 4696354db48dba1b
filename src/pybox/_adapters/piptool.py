"""This machine's pip: its configuration, and fetching pip's own wheel for a build.

pybox never hard-codes an index: the build box gets the index URL, extra
index URLs, trusted hosts and CA bundle this machine's pip is configured
with (`pip config list`, which covers PIP_* variables and every pip.conf; when
pip itself is missing, the same files and variables are read directly).
Options that name paths on this machine (find-links, constraints, file://
indexes) cannot work inside a box; they are reported as skipped.
"""

from __future__ import annotations

import configparser
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pybox._core.display import plural
from pybox._core.errors import ImageBuildError
from pybox._core.locks import Lock

# Options that matter to `pip install` inside the box.
_USED = ("index-url", "extra-index-url", "trusted-host", "cert", "timeout", "retries", "proxy")
_ALIASES = {"default-timeout": "timeout"}
_HOST_PATH_OPTIONS = ("find-links", "constraint", "requirement")
_LINE_RE = re.compile(r"^(?P<section>[^.\s]*)\.(?P<key>[A-Za-z0-9_-]+)='(?P<value>.*)'$")


@dataclass(frozen=True)
class PipSettings:
    """What the build box's pip is told, and where each value came from."""

    index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()
    trusted_hosts: tuple[str, ...] = ()
    cert_path: str | None = None
    timeout_s: str | None = None
    retries: str | None = None
    proxy: str | None = None
    found_by: str = "defaults"
    skipped: tuple[tuple[str, str], ...] = field(default=())

    def install_args(self, cert_in_box: str | None) -> list[str]:
        args: list[str] = []
        if self.index_url:
            args += ["--index-url", self.index_url]
        for url in self.extra_index_urls:
            args += ["--extra-index-url", url]
        for host in self.trusted_hosts:
            args += ["--trusted-host", host]
        if cert_in_box:
            args += ["--cert", cert_in_box]
        if self.timeout_s:
            args += ["--timeout", self.timeout_s]
        if self.retries:
            args += ["--retries", self.retries]
        if self.proxy:
            args += ["--proxy", self.proxy]
        return args

    def describe(self) -> str:
        index = redact(self.index_url) if self.index_url else "pip's default index"
        extra = (
            f" + {plural(len(self.extra_index_urls), 'extra index', 'extra indexes')}"
            if self.extra_index_urls
            else ""
        )
        cert = f", CA bundle {self.cert_path}" if self.cert_path else ""
        return f"{index}{extra}{cert} (from {self.found_by})"


def redact(url: str) -> str:
    """A URL without its user:password part, for messages."""
    return re.sub(r"//[^/@]+@", "//***@", url)


def parse_config_list(text: str) -> dict[str, str]:
    """`pip config list` output -> effective option values (env > install > global)."""
    ranked: dict[str, tuple[int, str]] = {}
    rank_of = {":env:": 3, "install": 2, "global": 1}
    for line in text.splitlines():
        match = _LINE_RE.match(line.strip())
        if not match or match.group("section") not in rank_of:
            continue
        key = _ALIASES.get(match.group("key"), match.group("key"))
        rank = rank_of[match.group("section")]
        if key not in ranked or rank >= ranked[key][0]:
            ranked[key] = (rank, match.group("value"))
    return {key: value for key, (_, value) in ranked.items()}


def _config_files(environ: Mapping[str, str]) -> list[Path]:
    """pip's configuration files, lowest priority first."""
    files: list[Path] = []
    for directory in reversed(environ.get("XDG_CONFIG_DIRS", "/etc/xdg").split(":")):
        if directory:
            files.append(Path(directory) / "pip" / "pip.conf")
    files.append(Path("/etc/pip.conf"))
    home = Path(environ.get("HOME", str(Path.home())))
    files.append(home / ".pip" / "pip.conf")
    files.append(Path(environ.get("XDG_CONFIG_HOME", str(home / ".config"))) / "pip" / "pip.conf")
    if environ.get("VIRTUAL_ENV"):
        files.append(Path(environ["VIRTUAL_ENV"]) / "pip.conf")
    if environ.get("PIP_CONFIG_FILE") and environ["PIP_CONFIG_FILE"] != os.devnull:
        files.append(Path(environ["PIP_CONFIG_FILE"]))
    return files


def _read_config_directly(environ: Mapping[str, str]) -> dict[str, str]:
    values: dict[str, str] = {}
    for path in _config_files(environ):
        parser = configparser.RawConfigParser()
        try:
            parser.read(path)
        except (OSError, configparser.Error):
            continue
        for section in ("global", "install"):
            if parser.has_section(section):
                for key, value in parser.items(section):
                    values[_ALIASES.get(key, key)] = value
    for name, value in environ.items():
        if name.startswith("PIP_"):
            key = name[4:].lower().replace("_", "-")
            values[_ALIASES.get(key, key)] = value
    return values


def _split(value: str | None) -> tuple[str, ...]:
    return tuple(value.split()) if value else ()


def settings_from_values(
    values: Mapping[str, str], environ: Mapping[str, str], found_by: str
) -> PipSettings:
    """Keep what can work inside a box; report what cannot."""
    skipped: list[tuple[str, str]] = []

    def remote(option: str, url: str) -> bool:
        if url.startswith(("http://", "https://")):
            return True
        skipped.append((option, f"{redact(url)} is a path on this machine, not reachable in a box"))
        return False

    index = values.get("index-url")
    if index and not remote("index-url", index):
        index = None
    extras = tuple(u for u in _split(values.get("extra-index-url")) if remote("extra-index-url", u))
    for option in _HOST_PATH_OPTIONS:
        if values.get(option):
            skipped.append(
                (option, "names files on this machine; the lock's hashes pin everything")
            )
    cert = values.get("cert")
    if not cert:
        # pip's HTTP library honours these when pip's own option is not set.
        cert = environ.get("REQUESTS_CA_BUNDLE") or environ.get("CURL_CA_BUNDLE") or None
        if cert:
            found_by += " and REQUESTS_CA_BUNDLE/CURL_CA_BUNDLE"
    return PipSettings(
        index_url=index,
        extra_index_urls=extras,
        trusted_hosts=_split(values.get("trusted-host")),
        cert_path=cert,
        timeout_s=values.get("timeout"),
        retries=values.get("retries"),
        proxy=values.get("proxy"),
        found_by=found_by,
        skipped=tuple(skipped),
    )


def _pip_command() -> list[str]:
    return [sys.executable, "-m", "pip"]


def host_pip_settings(environ: Mapping[str, str]) -> PipSettings:
    """This machine's effective pip configuration."""
    try:
        listed = subprocess.run(
            [*_pip_command(), "config", "list"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env=dict(environ),
        )
    except (OSError, subprocess.TimeoutExpired):
        listed = None
    if listed is not None and listed.returncode == 0:
        return settings_from_values(parse_config_list(listed.stdout), environ, "pip config list")
    return settings_from_values(
        _read_config_directly(environ), environ, "pip.conf files and PIP_* variables"
    )


def read_cert(settings: PipSettings) -> bytes | None:
    if not settings.cert_path:
        return None
    try:
        return Path(settings.cert_path).read_bytes()
    except OSError as exc:
        raise ImageBuildError(
            f"pip's configuration names the CA bundle {settings.cert_path}, which cannot be read "
            f"({exc.strerror or exc}). Fix pip's `cert` setting (pip config list)."
        ) from exc


def download_pip_wheel(pip_lock: Lock, environ: Mapping[str, str]) -> tuple[str, bytes]:
    """pip's own wheel, fetched by this machine's pip and checked against `pip_lock`."""
    with tempfile.TemporaryDirectory(prefix="pybox-pip-") as workdir:
        requirements = Path(workdir) / "pip.txt"
        requirements.write_text(pip_lock.requirements_text())
        target = Path(workdir) / "wheel"
        try:
            done = subprocess.run(
                [
                    *_pip_command(),
                    "download",
                    "--no-deps",
                    "--only-binary=:all:",
                    "--require-hashes",
                    "--no-cache-dir",
                    "--disable-pip-version-check",
                    "--quiet",
                    "-d",
                    str(target),
                    "-r",
                    str(requirements),
                ],
                capture_output=True,
                text=True,
                timeout=600,
                check=False,
                env=dict(environ),
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ImageBuildError(
                f"Could not run this machine's pip to fetch pip's wheel ({exc}). Install pip "
                f"for {sys.executable} (python3 -m ensurepip) and try again."
            ) from exc
        if done.returncode != 0:
            tail = "\n  ".join((done.stderr or done.stdout).strip().splitlines()[-8:])
            raise ImageBuildError(
                f"This machine's pip could not fetch {', '.join(pip_lock.pins)} "
                f"(exit {done.returncode}):\n  {tail}\nCheck pip's configuration "
                "(pip config list) and the network."
            )
        wheels = sorted(target.glob("pip-*.whl"))
        if len(wheels) != 1:
            raise ImageBuildError(f"pip download left {len(wheels)} pip wheels, expected one.")
        return wheels[0].name, wheels[0].read_bytes()
