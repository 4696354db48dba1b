"""Environments built from Debian packages (pure): a recipe names the Debian suite,
pins the suite's Release file by sha256 and every package the image holds by
version, so a rebuild is provably the same set of packages or says what moved.

A recipe is a TOML file in `locks/` (`locks/node18.toml`):

    name = "node18"
    description = "Node.js 18 and npm from Debian 12 (bookworm)"
    suite = "bookworm"
    architecture = "amd64"
    install = ["nodejs", "npm", "ca-certificates"]
    toolchain = ["nodejs", "npm"]
    release_sha256 = "<64 hex digits: dists/bookworm/Release as the mirror served it>"

    [env]
    npm_config_cache = "/pybox/work/.cache/npm"

    [packages]
    nodejs = "18.20.4+dfsg-1~deb12u1"
    ...

`install` is what the build asks debootstrap for (with python3, which every box
needs); `[packages]` is everything that ended up installed, dependencies and the
minimal base included. `pybox image build NAME --repin` rewrites the Release hash
and the `[packages]` table from what a build found.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from typing import Any

from pybox._core.errors import InvalidRequest

RECIPE_SUFFIX = ".toml"
ALWAYS_INSTALLED = ("python3",)  # the bootstrap inside every box runs on it
_SHA256 = re.compile(r"[0-9a-f]{64}")
_PACKAGE = re.compile(r"[a-z0-9][a-z0-9+.-]*")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ENV_VALUE = re.compile(r"[^\s\"'\\$`]*")  # one word: it becomes an image's ENV line
_SUITE = re.compile(r"[a-z][a-z0-9-]*")
_ARCHITECTURE = re.compile(r"[a-z0-9]+")
_FIELDS = frozenset(
    {"name", "description", "suite", "architecture", "install", "toolchain",
     "release_sha256", "env", "packages", "workspace_exec"}
)  # fmt: skip
# pybox's own variables are not the recipe's to change.
_RESERVED_ENV = frozenset({"PATH", "HOME", "TMPDIR", "LANG", "USER"})


@dataclass(frozen=True)
class DebRecipe:
    name: str
    description: str
    suite: str
    architecture: str
    install: tuple[str, ...]
    toolchain: tuple[str, ...]
    release_sha256: str  # "" until pinned
    env: tuple[tuple[str, str], ...]
    packages: tuple[tuple[str, str], ...]  # (name, version), sorted by name
    source: str  # the file it was read from (for messages)
    # The boxes' workspace tmpfs (/pybox) is mounted without noexec: for compiled
    # toolchains, which run the programs they build (go test, cargo test).
    workspace_exec: bool = False

    @property
    def bootstrap_packages(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys((*ALWAYS_INSTALLED, *self.install)))

    @property
    def pins(self) -> tuple[str, ...]:
        """`name=version` of every pinned package, as a build's package list says it."""
        return tuple(f"{name}={version}" for name, version in self.packages)


def _fail(source: str, what: str) -> InvalidRequest:
    return InvalidRequest(
        f"The recipe {source} is not valid: {what}. See docs/environments.md for the format."
    )


def _strings(value: Any, source: str, key: str, pattern: re.Pattern[str]) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(
        isinstance(v, str) and pattern.fullmatch(v) for v in value
    ):
        raise _fail(source, f"{key} must be a list of Debian package names")
    return tuple(value)


def parse_recipe(text: str, source: str, name: str) -> DebRecipe:
    """The recipe in `text` (the file `source`), which must be the recipe of `name`."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise _fail(source, f"it is not TOML ({exc})") from exc
    unknown = sorted(set(data) - _FIELDS)
    if unknown:
        raise _fail(source, f"unknown keys {', '.join(unknown)}")
    if data.get("name") != name:
        raise _fail(source, f"its name is {data.get('name')!r}, not {name!r}")
    suite = data.get("suite")
    if not isinstance(suite, str) or not _SUITE.fullmatch(suite):
        raise _fail(source, "suite must name a Debian suite (for example bookworm)")
    architecture = data.get("architecture", "amd64")
    if not isinstance(architecture, str) or not _ARCHITECTURE.fullmatch(architecture):
        raise _fail(source, "architecture must be a Debian architecture (amd64, arm64)")
    install = _strings(data.get("install"), source, "install", _PACKAGE)
    if not install:
        raise _fail(source, "install names no package")
    toolchain = _strings(data.get("toolchain", []), source, "toolchain", _PACKAGE)
    release = data.get("release_sha256", "")
    if not isinstance(release, str) or (release and not _SHA256.fullmatch(release)):
        raise _fail(source, "release_sha256 must be 64 lower-case hex digits (or empty)")
    env = data.get("env", {})
    if not isinstance(env, dict) or not all(
        isinstance(k, str)
        and _ENV_NAME.fullmatch(k)
        and isinstance(v, str)
        and _ENV_VALUE.fullmatch(v)
        for k, v in env.items()
    ):
        raise _fail(source, "[env] must map variable names to one-word values")
    reserved = sorted(set(env) & _RESERVED_ENV)
    if reserved:
        raise _fail(source, f"[env] may not set {', '.join(reserved)} (pybox sets them)")
    packages = data.get("packages", {})
    if not isinstance(packages, dict) or not all(
        isinstance(k, str) and _PACKAGE.fullmatch(k) and isinstance(v, str) and v
        for k, v in packages.items()
    ):
        raise _fail(source, "[packages] must map package names to versions")
    workspace_exec = data.get("workspace_exec", False)
    if not isinstance(workspace_exec, bool):
        raise _fail(source, "workspace_exec must be true or false")
    description = data.get("description", "")
    return DebRecipe(
        name=name,
        description=description if isinstance(description, str) else "",
        suite=suite,
        architecture=architecture,
        install=install,
        toolchain=toolchain,
        release_sha256=release,
        env=tuple(sorted(env.items())),
        packages=tuple(sorted(packages.items())),
        source=source,
        workspace_exec=workspace_exec,
    )


@dataclass(frozen=True)
class PinDiff:
    """How a build's packages differ from the recipe's pins."""

    moved: tuple[tuple[str, str, str], ...]  # (name, pinned, found)
    added: tuple[str, ...]  # name=version found, not pinned
    gone: tuple[str, ...]  # name=version pinned, not found

    @property
    def same(self) -> bool:
        return not (self.moved or self.added or self.gone)

    def lines(self, limit: int = 30) -> list[str]:
        shown = [f"  {n}: {a} -> {b}" for n, a, b in self.moved]
        shown += [f"  new: {p}" for p in self.added]
        shown += [f"  gone: {p}" for p in self.gone]
        if len(shown) > limit:
            shown = [*shown[:limit], f"  ... and {len(shown) - limit} more"]
        return shown


def split_pin(pin: str) -> tuple[str, str]:
    name, _, version = pin.partition("=")
    return name, version


def compare_pins(recipe: DebRecipe, found: tuple[str, ...]) -> PinDiff:
    pinned = dict(recipe.packages)
    now = dict(split_pin(p) for p in found)
    moved = tuple(
        (n, pinned[n], now[n]) for n in sorted(pinned) if n in now and pinned[n] != now[n]
    )
    added = tuple(f"{n}={now[n]}" for n in sorted(now) if n not in pinned)
    gone = tuple(f"{n}={pinned[n]}" for n in sorted(pinned) if n not in now)
    return PinDiff(moved, added, gone)


def toolchain_versions(recipe_toolchain: tuple[str, ...], found: tuple[str, ...]) -> dict[str, str]:
    """The installed version of each toolchain package (`nodejs`: `18.20.4+dfsg-...`)."""
    now = dict(split_pin(p) for p in found)
    return {name: now[name] for name in recipe_toolchain if name in now}


def repinned(text: str, release_sha256: str, found: tuple[str, ...]) -> str:
    """The recipe text with its Release hash and `[packages]` table replaced by what a
    build found; everything above `[packages]` is kept as written."""
    head = text.split("\n[packages]", 1)[0].rstrip("\n")
    line = f'release_sha256 = "{release_sha256}"'
    if re.search(r"^release_sha256\s*=.*$", head, re.MULTILINE):
        head = re.sub(r"^release_sha256\s*=.*$", line, head, count=1, flags=re.MULTILINE)
    else:
        head = re.sub(r"^(suite\s*=.*)$", rf"\1\n{line}", head, count=1, flags=re.MULTILINE)
    pins = "".join(f'"{n}" = "{v}"\n' for n, v in sorted(split_pin(p) for p in found))
    note = "# Every package installed, written by `pybox image build NAME --repin`.\n"
    return f"{head}\n\n[packages]\n{note}{pins}"
