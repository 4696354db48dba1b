"""Secret-shaped names: never copied into a box, whatever the configuration (pure).

A name is matched case-insensitively (a case-insensitive file system opens
`.ENV` as `.env`), against the entry's own name and against every folder above
it, so a listing from anywhere (the host walk, the box's digest) is filtered
the same way. The file patterns apply to files and links (a link named `.env`
is as secret as the file). Folders are matched against the credential folders
and `.env*` only (a folder named `.env` is usually a virtual environment, or
holds secrets): a package folder named `credentials/` is code, and is copied.

Some names are settings as often as logins: a project's `.npmrc` usually says
`engine-strict=true` or `save-exact=true`. Those are judged by their content,
from the bytes the copy read (`content_secret_reason`): copied when no line is
credential-shaped, skipped with the line's number and key otherwise. A link with
such a name is skipped (its target's content is not what the copy reads).
"""

from __future__ import annotations

import re
from fnmatch import fnmatchcase

# Folders that hold credentials: skipped whole.
CREDENTIAL_FOLDERS = frozenset({".ssh", ".aws", ".gnupg", ".kube", ".azure", ".password-store"})

# (pattern, what it is), in the order they are tried; the pattern is shown in the reason.
_SECRET_NAMES = (
    (".env*", "environment file"),  # .env, .env.local, .envrc (direnv), .env.example too
    ("*.env", "environment file"),
    ("*.pem", "key or certificate"),
    ("*.key", "private key"),
    ("*.p8", "private key"),
    ("*.ppk", "private key"),
    ("*.p12", "key store"),
    ("*.pfx", "key store"),
    ("*.jks", "key store"),
    ("*.keystore", "key store"),
    ("*.kdbx", "password database"),
    ("id_rsa*", "SSH key"),
    ("id_dsa*", "SSH key"),
    ("id_ecdsa*", "SSH key"),
    ("id_ed25519*", "SSH key"),
    (".netrc", "login file"),
    ("_netrc", "login file"),
    (".pgpass", "login file"),
    (".git-credentials", "login file"),
    (".pypirc", "package registry login"),
    (".dockercfg", "registry login"),
    (".vault-token", "token file"),
    (".boto", "cloud login"),
    (".s3cfg", "cloud login"),
    (".htpasswd", "password file"),
    (".terraformrc", "token file"),
    ("credentials", "cloud login"),
    ("credentials.json", "cloud login"),
    ("client_secret*.json", "cloud login"),
    ("service-account*.json", "cloud service account key"),
    ("kubeconfig", "cluster login"),
    ("*.tfstate", "infrastructure state"),
    ("*.tfstate.*", "infrastructure state"),
    ("*.tfvars", "infrastructure variables"),
    ("*.tfvars.json", "infrastructure variables"),
    ("secrets.json", "secrets file"),
    ("secrets.toml", "secrets file"),
    ("secrets.yaml", "secrets file"),
    ("secrets.yml", "secrets file"),
    (".*_history", "shell history"),
)


def secret_reason(parts: tuple[str, ...], is_folder: bool) -> str | None:
    """Why the entry at `parts` (its path's components, the entry's own name last)
    is never copied, or None when it may be."""
    for index, part in enumerate(parts):
        name = part.lower()
        if is_folder or index < len(parts) - 1:
            if name in CREDENTIAL_FOLDERS:
                return f"credential folder ({name}/)"
            if name.startswith(".env"):
                return "secret-shaped folder name (.env*: environment file)"
            continue
        if name == "config.json" and index > 0 and parts[index - 1].lower() == ".docker":
            return "secret-shaped file name (.docker/config.json: registry login)"
        for pattern, what in _SECRET_NAMES:
            if fnmatchcase(name, pattern):
                return f"secret-shaped file name ({pattern}: {what})"
    return None


# Files judged by their content: name -> what a credential in it is.
CONTENT_CHECKED = {".npmrc": "package registry login"}
# npm's settings that are, or go with, a login ("//host/:_authToken" ends in one too).
_NPM_CREDENTIAL_KEYS = frozenset(
    {"_auth", "_authtoken", "_password", "password", "username", "email", "certfile", "keyfile",
     "cert", "key", "otp"}
)  # fmt: skip
_USERINFO_URL = re.compile(r"[a-z][a-z0-9+.-]*://[^/\s@]+@", re.IGNORECASE)


def content_checked(parts: tuple[str, ...]) -> bool:
    """The entry's name is judged by its content (CONTENT_CHECKED)."""
    return parts[-1].lower() in CONTENT_CHECKED


def content_secret_reason(parts: tuple[str, ...], data: bytes | None) -> str | None:
    """Why a content-checked file is not copied, or None when it may be. `data` is
    None for a link (never copied under such a name)."""
    name = parts[-1].lower()
    what = CONTENT_CHECKED.get(name)
    if what is None:
        return None
    if data is None:
        return f"secret-shaped link name ({name}: {what}); a link's target is not checked"
    found = npmrc_credential(data)
    if found is None:
        return None
    return (
        f"{name} holds a credential-shaped setting ({found}: {what}); a {name} is copied "
        "only when it holds settings alone"
    )


def npmrc_credential(data: bytes) -> str | None:
    """`line N: key` of the first credential-shaped line of an .npmrc, or None.

    Credential-shaped: a login key (`_auth`, `_authToken`, `_password`, `username`,
    `email`, a client certificate or key), any host-scoped `//host/:key` line, and a
    URL with a user in it (`registry=https://user:pass@host/`). A file that is not
    UTF-8 cannot be judged and counts as one."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return "not UTF-8 text, so it cannot be checked"
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        key, _, value = line.partition("=")
        key = key.strip().lower()
        if key.startswith("//"):
            return f"line {number}: a host-scoped setting"
        if key.rsplit(":", 1)[-1] in _NPM_CREDENTIAL_KEYS or _USERINFO_URL.search(value):
            return f"line {number}: {key}"
    return None
