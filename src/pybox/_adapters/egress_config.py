"""What this machine's pip and npm configuration says about registries.

Read from the real files (and the environment variables pip and npm honour),
never guessed: the registry hosts a `packages` box may reach, the CA bundle
those tools trust, and an upstream proxy this machine goes through.

pip: `/etc/pip.conf`, `$XDG_CONFIG_DIRS/pip/pip.conf`, `~/.pip/pip.conf`,
`$XDG_CONFIG_HOME/pip/pip.conf`, `$PIP_CONFIG_FILE`; keys `index-url`,
`extra-index-url`, `cert`, `proxy` in `[global]`, `[install]`, `[download]`;
`PIP_INDEX_URL`, `PIP_EXTRA_INDEX_URL`, `PIP_CERT`. npm: the global
`$PREFIX/etc/npmrc` (/usr/etc, /usr/local/etc), `/etc/npmrc`, the user's
`~/.npmrc` (or `$NPM_CONFIG_USERCONFIG`); keys `registry`, `@scope:registry`,
`cafile`, `https-proxy`; `npm_config_registry`. Only `https://` URLs on port
443 give a host (the proxy serves nothing else); the others are listed as
skipped with the reason. A tool's built-in default (the index pip uses when no
file names one) is in no file: the operator names it (`[egress] allow_hosts`).
"""

from __future__ import annotations

import configparser
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from pybox._core.egress import host_problem, normalise_host

PIP_SECTIONS = ("global", "install", "download")


@dataclass(frozen=True)
class MachineRegistries:
    hosts: tuple[str, ...]  # allowlistable host names, in the order found
    skipped: tuple[str, ...]  # "url (file): why" for each URL that gives no host
    ca_bundle: str | None  # the CA bundle pip or npm (or SSL_CERT_FILE) names
    upstream: tuple[str, int] | None  # an http:// proxy this machine goes through
    sources: tuple[str, ...]  # the files read


def _pip_files(environ: Mapping[str, str], home: Path, system: Path) -> list[Path]:
    dirs = environ.get("XDG_CONFIG_DIRS", str(system / "etc/xdg")).split(":")
    xdg_home = Path(environ.get("XDG_CONFIG_HOME") or home / ".config")
    files = [system / "etc/pip.conf", *(Path(d) / "pip" / "pip.conf" for d in dirs if d)]
    files += [home / ".pip" / "pip.conf", xdg_home / "pip" / "pip.conf"]
    if environ.get("PIP_CONFIG_FILE"):
        files.append(Path(environ["PIP_CONFIG_FILE"]))
    return files


def _npm_files(environ: Mapping[str, str], home: Path, system: Path) -> list[Path]:
    user = environ.get("NPM_CONFIG_USERCONFIG") or environ.get("npm_config_userconfig")
    return [
        system / "usr/etc/npmrc",
        system / "usr/local/etc/npmrc",
        system / "etc/npmrc",
        Path(user) if user else home / ".npmrc",
    ]


def _read_pip(path: Path) -> dict[str, str]:
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(path.read_text(encoding="utf-8"), str(path))
    except (OSError, UnicodeDecodeError, configparser.Error):
        return {}
    found: dict[str, str] = {}
    for section in PIP_SECTIONS:
        if parser.has_section(section):
            found.update({key: value for key, value in parser.items(section)})
    return found


def _read_npmrc(path: Path) -> dict[str, str]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return {}
    found: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")) or "=" not in line:
            continue
        key, _, value = line.partition("=")
        found[key.strip()] = value.strip().strip("\"'")
    return found


def url_host(url: str) -> tuple[str | None, str]:
    """The allowlistable host of a registry URL, or None and why not."""
    try:
        parts = urllib.parse.urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None, "not a URL"
    if parts.scheme != "https":
        return None, f"{parts.scheme or 'no'} scheme: the proxy serves https on port 443 only"
    if port not in (None, 443):
        return None, f"port {port}: the proxy serves port 443 only"
    host = normalise_host(parts.hostname or "")
    problem = host_problem(host)
    return (None, f"the host is {problem}") if problem else (host, "")


def _upstream(url: str | None) -> tuple[str, int] | None:
    if not url:
        return None
    parts = urllib.parse.urlsplit(url if "://" in url else f"http://{url}")
    if parts.scheme != "http" or not parts.hostname or parts.username:
        return None  # an https or authenticated upstream is not chained (docs/containment.md)
    return parts.hostname, parts.port or 80


def machine_registries(
    environ: Mapping[str, str], home: Path | None = None, system: Path = Path("/")
) -> MachineRegistries:
    """What the files say; `system` is where /etc and /usr are (tests give a folder)."""
    home = home or Path(environ.get("HOME") or Path.home())
    hosts: list[str] = []
    skipped: list[str] = []
    sources: list[str] = []
    ca: str | None = None
    pip_proxy: str | None = None

    def add(url: str, where: str) -> None:
        host, why = url_host(url)
        if host is None:
            skipped.append(f"{url} ({where}): {why}")
        elif host not in hosts:
            hosts.append(host)

    for path in _pip_files(environ, home, system):
        if not path.is_file():
            continue
        sources.append(str(path))
        values = _read_pip(path)
        for key in ("index-url", "extra-index-url"):
            for url in values.get(key, "").split():
                add(url, str(path))
        ca = values.get("cert", ca)
        pip_proxy = values.get("proxy", pip_proxy)
    for name in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL"):
        for url in environ.get(name, "").split():
            add(url, name)
    npm_ca: str | None = None
    npm_proxy: str | None = None
    for path in _npm_files(environ, home, system):
        if not path.is_file():
            continue
        sources.append(str(path))
        values = _read_npmrc(path)
        for key, value in values.items():
            if key == "registry" or (key.startswith("@") and key.endswith(":registry")):
                add(value, str(path))
        npm_ca = values.get("cafile", npm_ca)
        npm_proxy = values.get("https-proxy", npm_proxy)
    if environ.get("npm_config_registry"):
        add(environ["npm_config_registry"], "npm_config_registry")
    ca = environ.get("PIP_CERT") or ca or npm_ca or environ.get("SSL_CERT_FILE")
    proxy = environ.get("HTTPS_PROXY") or environ.get("https_proxy") or pip_proxy or npm_proxy
    return MachineRegistries(tuple(hosts), tuple(skipped), ca, _upstream(proxy), tuple(sources))
