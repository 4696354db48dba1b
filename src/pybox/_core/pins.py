"""Images pinned by digest for `pybox image pull` (pure).

`locks/images.toml` holds one table per image name:

    [stdlib]
    repository = "pybox/stdlib"
    digest = "sha256:<64 hex digits>"
    platform = "linux/amd64"

The registry's host is never written in the repository: it comes from
`--registry`, `PYBOX_REGISTRY`, or a `registry` key in an operator's own file.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass

from pybox._core.display import noun
from pybox._core.errors import ConfigError, InvalidRequest
from pybox._core.images import check_image_name

DIGEST_RE = re.compile(r"sha256:[0-9a-f]{64}")
REPOSITORY_RE = re.compile(r"[a-z0-9]+(?:[._-][a-z0-9]+)*(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*")
REGISTRY_RE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?(?::[0-9]{1,5})?")
PLATFORM_RE = re.compile(r"[a-z0-9]+/[a-z0-9_]+(?:/[a-z0-9]+)?")
PIN_KEYS = frozenset({"repository", "digest", "platform", "registry"})


@dataclass(frozen=True)
class ImagePin:
    name: str
    repository: str
    digest: str
    platform: str
    registry: str | None = None

    def reference(self, registry: str) -> str:
        return f"{registry}/{self.repository}@{self.digest}"

    def toml(self) -> str:
        return (
            f"[{self.name}]\n"
            f'repository = "{self.repository}"\n'
            f'digest = "{self.digest}"\n'
            f'platform = "{self.platform}"\n'
        )


def check_registry(registry: object, where: str) -> str:
    if not isinstance(registry, str) or not REGISTRY_RE.fullmatch(registry):
        raise InvalidRequest(
            f"{where}: {registry!r} is not a registry address; give HOST or HOST:PORT "
            "(no scheme, no path)."
        )
    return registry


def check_digest(digest: object, where: str) -> str:
    if not isinstance(digest, str) or not DIGEST_RE.fullmatch(digest):
        raise InvalidRequest(
            f"{where}: {digest!r} is not a digest; pin images as sha256: followed by 64 "
            "lower-case hex digits."
        )
    return digest


def parse_pins(text: str, source: str) -> dict[str, ImagePin]:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{source} is not valid TOML: {exc}. Fix the file.") from exc
    pins: dict[str, ImagePin] = {}
    for name, table in data.items():
        where = f"{source} [{name}]"
        try:
            check_image_name(name)
        except InvalidRequest as exc:
            raise ConfigError(f"{where}: {exc}") from None
        if not isinstance(table, dict):
            raise ConfigError(f"{where} must be a table with repository, digest and platform.")
        unknown = sorted(set(table) - PIN_KEYS)
        missing = sorted({"repository", "digest", "platform"} - set(table))
        if unknown or missing:
            raise ConfigError(
                f"{where}: "
                + "; ".join(
                    part
                    for part in (
                        f"unknown {noun(len(unknown), 'key')} {', '.join(unknown)}"
                        if unknown
                        else "",
                        f"missing {', '.join(missing)}" if missing else "",
                    )
                    if part
                )
                + f". Known keys: {', '.join(sorted(PIN_KEYS))}."
            )
        repository, platform = table["repository"], table["platform"]
        if not isinstance(repository, str) or not REPOSITORY_RE.fullmatch(repository):
            raise ConfigError(
                f"{where}: repository {repository!r} is not a repository path (for example "
                "pybox/stdlib); the registry host goes in --registry."
            )
        if not isinstance(platform, str) or not PLATFORM_RE.fullmatch(platform):
            raise ConfigError(f"{where}: platform {platform!r} is not OS/ARCH (linux/amd64).")
        try:
            digest = check_digest(table["digest"], where)
            registry = check_registry(table["registry"], where) if table.get("registry") else None
        except InvalidRequest as exc:
            raise ConfigError(str(exc)) from None
        pins[name] = ImagePin(name, repository, digest, platform, registry)
    return pins
