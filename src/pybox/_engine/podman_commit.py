"""A commit on Podman, as an export and an import: the image configuration as
Dockerfile-style `changes`, and the imported image read back against it.

Podman 4.3's compatible `POST /commit` ignores the configuration in its body,
and `/libpod/commit` copies the box's whole environment into the image, which
no change can remove (docs/engines.md, "Build boxes on Podman"). An import
(`POST /images/create?fromSrc=-`) starts from no configuration at all and
honours `USER`, `WORKDIR`, `ENV`, `CMD` and `LABEL` changes, as the stdlib
import shows. So `PodmanEngine.commit` exports the stopped box's filesystem and
imports it with the configuration said as changes: the image is one flat layer.

Podman parses each change itself (containers/common `ImageConfigFromChanges`):
the instruction, one space, the value with its outer spaces trimmed; an ENV or
LABEL value is `key=value` split at the first `=`, and a value wrapped in
double quotes loses exactly that one pair, nothing else (no escapes). So every
value is sent wrapped in quotes and comes back as it was, spaces and quotes
inside it too. `CMD` is a JSON array. What the changes cannot say is refused
naming the field (`PodmanUnsupported`), before any call.
"""

from __future__ import annotations

import json
import posixpath
import re
from typing import Any

from pybox._engine.interface import JSONObject
from pybox._engine.specgen import PodmanUnsupported

# The most of a box's filesystem pybox exports for an image, and how long it
# waits for the next piece of it and for the whole of it.
EXPORT_MAX_BYTES = 8 * 1024**3
EXPORT_IDLE_TIMEOUT_S = 300.0
EXPORT_DEADLINE_S = 1800.0

# Keys the changes can say; the others must hold what an import starts with.
SAID = ("User", "WorkingDir", "Env", "Cmd", "Labels")
NOTHING: dict[str, tuple[Any, ...]] = {
    "Entrypoint": (None, []),
    "Hostname": (None, ""),
    "Healthcheck": (None, {"Test": ["NONE"]}),
}
_ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_LABEL_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]*")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_NO_CONFIG = "an imported image starts with no configuration and a change cannot say this"


def _refused(field: str, value: Any, why: str) -> PodmanUnsupported:
    return PodmanUnsupported(f"Config.{field}", value, why, subject="image")


def _text(field: str, value: Any) -> str:
    """A value as a change carries it: a string with no control characters."""
    if not isinstance(value, str):
        raise _refused(field, value, "not a string")
    if _CONTROL.search(value):
        raise _refused(field, value, "a control character cannot be said in a change")
    return value


def _quoted(value: str) -> str:
    """Podman strips exactly one pair of outer double quotes (and no escapes)."""
    return f'"{value}"'


def import_changes(config: JSONObject) -> list[str]:
    """The changes an import needs to have exactly `config`; `PodmanUnsupported`
    naming the field for anything they cannot say."""
    for key, value in config.items():
        if key in SAID:
            continue
        if key not in NOTHING:
            raise _refused(key, value, "pybox's Podman commit does not carry this field")
        if value not in NOTHING[key]:
            raise _refused(key, value, _NO_CONFIG)
    changes: list[str] = []
    user = _text("User", config.get("User") or "")
    if user:
        if user != user.strip():
            raise _refused("User", user, "Podman trims the spaces around it")
        changes.append(f"USER {user}")
    workdir = _text("WorkingDir", config.get("WorkingDir") or "")
    if workdir:
        clean = workdir.startswith("/") and not workdir.startswith("//")
        if not clean or posixpath.normpath(workdir) != workdir:
            raise _refused("WorkingDir", workdir, "Podman keeps a clean absolute path only")
        changes.append(f"WORKDIR {workdir}")
    env = config.get("Env") or []
    if not isinstance(env, list):
        raise _refused("Env", env, "not a list")
    for item in env:
        key, sep, value = _text("Env", item).partition("=")
        if not sep or not _ENV_KEY.fullmatch(key):
            raise _refused("Env", item, "not NAME=value")
        changes.append(f"ENV {key}={_quoted(value)}")
    cmd = config.get("Cmd")
    if cmd is not None:
        if not isinstance(cmd, list) or not cmd or not all(isinstance(a, str) for a in cmd):
            raise _refused("Cmd", cmd, "not a list of strings")
        changes.append(f"CMD {json.dumps(cmd)}")
    labels = config.get("Labels") or {}
    if not isinstance(labels, dict):
        raise _refused("Labels", labels, "not a mapping")
    for key, value in labels.items():
        if not isinstance(key, str) or not _LABEL_KEY.fullmatch(key):
            raise _refused("Labels", key, "a label key Podman would split or strip")
        # A blank label is none: an import inherits no labels (it blanks the box's
        # labels where the engine merges them into a commit, as Docker does).
        if _text(f"Labels[{key}]", value):
            changes.append(f"LABEL {key}={_quoted(value)}")
    return changes


def expected_config(config: JSONObject) -> JSONObject:
    """What the imported image's configuration must read back as."""
    return {
        "User": config.get("User") or "",
        "WorkingDir": config.get("WorkingDir") or "",
        "Env": list(config.get("Env") or []),
        "Cmd": list(config.get("Cmd") or []),
        "Entrypoint": [],
        "Labels": {k: v for k, v in (config.get("Labels") or {}).items() if v},
    }


def config_problem(config: JSONObject, image: JSONObject | None) -> str | None:
    """Where the imported image's configuration differs from `config` (None: nowhere)."""
    if image is None:
        return "the engine has no such image after the import"
    found = image.get("Config") or {}
    read = {
        "User": found.get("User") or "",
        "WorkingDir": found.get("WorkingDir") or "",
        "Env": list(found.get("Env") or []),
        "Cmd": list(found.get("Cmd") or []),
        "Entrypoint": list(found.get("Entrypoint") or []),
        "Labels": dict(found.get("Labels") or {}),
    }
    for key, asked in expected_config(config).items():
        if read[key] != asked:
            return f"Config.{key} reads back as {read[key]!r}, asked {asked!r}"
    healthcheck = (found.get("Healthcheck") or {}).get("Test") or ["NONE"]
    if healthcheck != ["NONE"]:
        return f"Config.Healthcheck reads back as {healthcheck!r}, asked none"
    return None
