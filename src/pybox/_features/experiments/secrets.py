"""Secret-shaped names and contents: never copied into a box, whatever the
configuration (pure).

A name is matched case-insensitively (a case-insensitive file system opens
`.ENV` as `.env`), against the entry's own name and against every folder above
it, so a listing from anywhere (the host walk, the box's digest) is filtered
the same way. The file patterns apply to files and links (a link named `.env`
is as secret as the file). Folders are matched against the credential folders
and `.env*` only (a folder named `.env` is usually a virtual environment, or
holds secrets): a package folder named `credentials/` is code, and is copied.
A few names are secret only under a given folder (`.docker/config.json`,
`gh/hosts.yml`, `.cargo/credentials.toml`, `.config/gcloud/`). An editor's
backup, swap or lock file of a secret-shaped name (`.env~`, `.env.swp`,
`.#.env`, `#.env#`, `.env.bak`, `id_rsa.orig`) is as secret as the name.

Some names are settings as often as logins: a project's `.npmrc` usually says
`engine-strict=true`. Those (`.npmrc`, `.yarnrc`, `.yarnrc.yml`, `pip.conf`,
`pip.ini`) are judged by their content, from the bytes the copy read
(`content_secret_reason`): copied when no line is credential-shaped, skipped
with the line's number and key otherwise. A link with such a name is skipped
(its target's content is not what the copy reads).

Whatever its name, a file is not copied when its first `SCAN_BYTES` hold a
private key block (PEM `-----BEGIN ... PRIVATE KEY-----`, OpenSSH, PGP, a PuTTY
key file) or a well-known token shape (`TOKEN_SHAPES`). The reason names the
kind and the line, never the value. Past `SCAN_BYTES` a file is not looked at:
the scan is a net for the common cases, not a proof that a file holds none.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from fnmatch import fnmatchcase

# Folders that hold credentials: skipped whole.
CREDENTIAL_FOLDERS = frozenset({".ssh", ".aws", ".gnupg", ".kube", ".azure", ".password-store"})
# (parent folder, folder): credential folders only under that parent (`gcloud/` is
# often code; `.config/gcloud/` holds the SDK's logins).
_CREDENTIAL_FOLDER_PAIRS = {(".config", "gcloud"): "cloud SDK logins"}

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
    ("*_rsa", "SSH key"),  # github_rsa, deploy_rsa
    ("*_dsa", "SSH key"),
    ("*_ecdsa", "SSH key"),
    ("*_ed25519", "SSH key"),
    ("*deploy_key", "SSH deploy key"),  # deploy_key, github_deploy_key
    (".netrc", "login file"),
    ("_netrc", "login file"),
    (".pgpass", "login file"),
    (".my.cnf", "database login"),
    (".mylogin.cnf", "database login"),
    (".git-credentials", "login file"),
    (".pypirc", "package registry login"),
    (".gem-credentials", "package registry login"),
    (".dockercfg", "registry login"),
    (".vault-token", "token file"),
    (".boto", "cloud login"),
    (".s3cfg", "cloud login"),
    (".htpasswd", "password file"),
    (".terraformrc", "token file"),
    ("credentials", "cloud login"),
    ("credentials.json", "cloud login"),
    ("credentials.toml", "package registry login"),  # cargo's
    ("application_default_credentials.json", "cloud login"),
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
# (parent folder, name): secret only under that parent (`config.json` is often code).
_SECRET_PAIRS = {
    (".docker", "config.json"): "registry login",
    ("gh", "hosts.yml"): "GitHub CLI login",
    ("hub", "hub"): "GitHub CLI login",
    (".cargo", "credentials"): "package registry login",
    (".gem", "credentials"): "package registry login",
}
# What editors leave beside a file: a backup, swap or lock file of a secret is a secret.
_BACKUP_SUFFIXES = (
    "~", ".swp", ".swo", ".swn", ".swx", ".bak", ".backup", ".orig", ".old", ".save",
    ".sav", ".tmp", ".temp", ".copy", ".un~", ".kate-swp",
)  # fmt: skip
_NUMBERED_BACKUP = re.compile(r"\.~\d+~$")  # emacs: name.~1~


def secret_reason(parts: tuple[str, ...], is_folder: bool) -> str | None:
    """Why the entry at `parts` (its path's components, the entry's own name last)
    is never copied, or None when it may be."""
    for index, part in enumerate(parts):
        name = part.lower()
        parent = parts[index - 1].lower() if index > 0 else ""
        if is_folder or index < len(parts) - 1:
            if name in CREDENTIAL_FOLDERS:
                return f"credential folder ({name}/)"
            if name.startswith(".env"):
                return "secret-shaped folder name (.env*: environment file)"
            what = _CREDENTIAL_FOLDER_PAIRS.get((parent, name))
            if what:
                return f"credential folder ({parent}/{name}/: {what})"
            continue
        for candidate in _unwrapped(name):
            found = _name_rule(parent, candidate)
            if found is None:
                continue
            if candidate == name:
                return f"secret-shaped file name ({found})"
            return (
                f"secret-shaped file name ({found}); {name} is an editor's backup, swap or "
                "lock file of such a name"
            )
    return None


def _name_rule(parent: str, name: str) -> str | None:
    what = _SECRET_PAIRS.get((parent, name))
    if what:
        return f"{parent}/{name}: {what}"
    for pattern, what in _SECRET_NAMES:
        if fnmatchcase(name, pattern):
            return f"{pattern}: {what}"
    return None


def _unwrapped(name: str) -> Iterator[str]:
    """`name`, then the names it may be a backup, swap or lock file of: `.env~`,
    `.env.swp`, `..env.swp` and `.#.env` (vim, emacs), `#.env#`, `.env.bak`,
    `.env.~1~`, peeled up to three layers (`.env.swp~`)."""
    seen = {name}
    layer = [name]
    yield name
    for _ in range(3):
        peeled = [inner for outer in layer for inner in _peel(outer) if inner and inner not in seen]
        if not peeled:
            return
        for inner in peeled:
            seen.add(inner)
            yield inner
        layer = peeled


def _peel(name: str) -> Iterator[str]:
    for suffix in _BACKUP_SUFFIXES:
        if name.endswith(suffix) and len(name) > len(suffix):
            inner = name[: -len(suffix)]
            yield inner
            if (suffix.startswith(".sw") or suffix == ".un~") and inner.startswith("."):
                yield inner[1:]  # vim: `.name.swp` for `name`, `.name.un~` for its undo file
    numbered = _NUMBERED_BACKUP.search(name)
    if numbered and numbered.start() > 0:
        yield name[: numbered.start()]
    if name.startswith(".#"):  # emacs lock file
        yield name[2:]
    if len(name) > 2 and name.startswith("#") and name.endswith("#"):  # emacs autosave
        yield name[1:-1]


# -- contents ---------------------------------------------------------------------------

# The bytes of each file searched for keys and tokens (the copy reads whole files;
# searching is bounded so a large data file costs no more than this).
SCAN_BYTES = 1024 * 1024

# (what it is, its shapes): the shape is never shown, only what it is. Each shape
# starts with a literal, which `re` finds at memory speed (an alternation or a
# leading `\b` would be a hundred times slower); `_token_at` checks the boundary.
TOKEN_SHAPES: tuple[tuple[str, tuple[bytes, ...]], ...] = (
    ("a private key block (-----BEGIN ... PRIVATE KEY-----)",
     (rb"-----BEGIN[A-Z0-9 ]{0,40} PRIVATE KEY(?: BLOCK)?-----",)),
    ("a PuTTY private key file", (rb"PuTTY-User-Key-File-\d",)),
    ("a GitHub token (ghp_/gho_/ghu_/ghs_/ghr_)", (rb"gh[pousr]_[A-Za-z0-9]{36,}",)),
    ("a GitHub token (github_pat_)", (rb"github_pat_[A-Za-z0-9_]{22,}",)),
    ("an AWS access key id (AKIA/ASIA...)", (rb"AKIA[0-9A-Z]{16}\b", rb"ASIA[0-9A-Z]{16}\b")),
    ("a Slack token (xox?-)", (rb"xox[abeoprs]-[0-9A-Za-z-]{10,}",)),
    ("a GitLab token (glpat-)", (rb"glpat-[0-9A-Za-z_-]{20,}",)),
    ("an npm token (npm_)", (rb"npm_[A-Za-z0-9]{36}\b",)),
    ("a PyPI token (pypi-AgE...)", (rb"pypi-AgE[A-Za-z0-9_-]{20,}",)),
    ("a Google API key (AIza...)", (rb"AIza[0-9A-Za-z_-]{35}",)),
    ("an OpenAI or Anthropic key (sk-...)",
     (rb"sk-(?:proj-|ant-[a-z]+\d*-|svcacct-|admin-)?[A-Za-z0-9_-]{32,}",)),
    ("a Stripe secret key (sk_live_/rk_live_)",
     (rb"sk_live_[0-9A-Za-z]{20,}", rb"rk_live_[0-9A-Za-z]{20,}")),
    ("a Hugging Face token (hf_)", (rb"hf_[A-Za-z]{34}\b",)),
)  # fmt: skip
_TOKENS = tuple((what, re.compile(shape)) for what, shapes in TOKEN_SHAPES for shape in shapes)
_WORD = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")


def token_reason(data: bytes) -> str | None:
    """What key or token the first SCAN_BYTES of `data` hold, and on which line, or
    None. Never the value. The first one in the file is named."""
    window = data[:SCAN_BYTES]
    first: tuple[int, str] | None = None
    for what, shape in _TOKENS:
        at = _token_at(window, shape)
        if at is not None and (first is None or at < first[0]):
            first = (at, what)
    if first is None:
        return None
    line = window.count(b"\n", 0, first[0]) + 1
    return (
        f"its content holds {first[1]} on line {line}; a file holding a key or token is "
        "never copied, whatever its name"
    )


def _token_at(window: bytes, shape: re.Pattern[bytes]) -> int | None:
    """Where the first match of `shape` starting a word is (`task-...` is no `sk-`)."""
    for found in shape.finditer(window):
        start = found.start()
        if start == 0 or window[start - 1] not in _WORD or window[start] == ord("-"):
            return start
    return None


def _npmrc_key(line: str) -> str:
    return line.partition("=")[0]


def _ini_key(line: str) -> str:
    return re.split(r"[=:]", line, maxsplit=1)[0]


def _yaml_key(line: str) -> str:
    line = line.removeprefix("- ")
    if line[:1] in "\"'":  # a quoted key ("//host": ...)
        return line[1:].partition(line[0])[0]
    return re.split(r":(?:\s|$)", line, maxsplit=1)[0]


def _yarnrc_key(line: str) -> str:
    if line.startswith('"'):  # "//host/:_authToken" value
        return line[1:].partition('"')[0]
    return re.split(r"[\s=]", line, maxsplit=1)[0]


# npm's settings that are, or go with, a login ("//host/:_authToken" ends in one too).
_NPM_CREDENTIAL_KEYS = frozenset(
    {"_auth", "_authtoken", "_password", "password", "username", "email", "certfile", "keyfile",
     "cert", "key", "otp"}
)  # fmt: skip
_YARN_CREDENTIAL_KEYS = _NPM_CREDENTIAL_KEYS | {"npmauthtoken", "npmauthident", "npmpassword"}
_PIP_CREDENTIAL_KEYS = frozenset({"password", "token", "client-cert", "client_cert"})
_USERINFO_URL = re.compile(r"[a-z][a-z0-9+.-]*://[^/\s@]+@", re.IGNORECASE)
_PLAIN_KEY = re.compile(r"[a-z0-9_.@:-]{1,60}")

# Files judged by their content: name -> (what a credential in it is, its line's key,
# its credential keys, whether a `//host` key is host-scoped, hence a login).
_Checked = tuple[str, Callable[[str], str], frozenset[str], bool]
CONTENT_CHECKED: dict[str, _Checked] = {
    ".npmrc": ("package registry login", _npmrc_key, _NPM_CREDENTIAL_KEYS, True),
    ".yarnrc": ("package registry login", _yarnrc_key, _YARN_CREDENTIAL_KEYS, True),
    ".yarnrc.yml": ("package registry login", _yaml_key, _YARN_CREDENTIAL_KEYS, True),
    "pip.conf": ("package index login", _ini_key, _PIP_CREDENTIAL_KEYS, False),
    "pip.ini": ("package index login", _ini_key, _PIP_CREDENTIAL_KEYS, False),
}


def content_checked(parts: tuple[str, ...]) -> bool:
    """The entry's name is judged by its content (CONTENT_CHECKED), or is a backup of one."""
    return _checked_name(parts[-1].lower()) is not None


def _checked_name(name: str) -> str | None:
    return next((n for n in _unwrapped(name) if n in CONTENT_CHECKED), None)


def content_secret_reason(parts: tuple[str, ...], data: bytes | None) -> str | None:
    """Why a file is not copied for its content, or None when it may be: a settings
    file (CONTENT_CHECKED) with a credential-shaped line, or any file holding a key
    or token (`token_reason`). `data` is None for a link (never copied under a
    content-checked name; any other link is not judged by content)."""
    name = parts[-1].lower()
    checked = _checked_name(name)
    if data is None:
        if checked is None:
            return None
        what = CONTENT_CHECKED[checked][0]
        return f"secret-shaped link name ({name}: {what}); a link's target is not checked"
    if checked is not None:
        what, key_of, keys, host_scoped = CONTENT_CHECKED[checked]
        found = settings_credential(data, key_of, keys, host_scoped=host_scoped)
        if found is not None:
            return (
                f"{name} holds a credential-shaped setting ({found}: {what}); a {name} is "
                "copied only when it holds settings alone"
            )
    return token_reason(data)


def npmrc_credential(data: bytes) -> str | None:
    """`line N: key` of the first credential-shaped line of an .npmrc, or None."""
    return settings_credential(data, _npmrc_key, _NPM_CREDENTIAL_KEYS, host_scoped=True)


def settings_credential(
    data: bytes, key_of: Callable[[str], str], keys: frozenset[str], *, host_scoped: bool
) -> str | None:
    """`line N: key` of the first credential-shaped line of a settings file, or None.

    Credential-shaped: a login key (`keys`; the part after a scope's last `:` counts,
    `//host/:_authToken`), any host-scoped `//host...` key where those are logins,
    and a URL with a user in it (`https://user:pass@host/`). A file that is not
    UTF-8 cannot be judged and counts as one."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return "not UTF-8 text, so it cannot be checked"
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith(("#", ";", "[")):
            continue
        key = key_of(line).strip().strip("\"'").lower()
        if host_scoped and key.startswith("//"):
            return f"line {number}: a host-scoped setting"
        if key.rsplit(":", 1)[-1] in keys:
            return f"line {number}: {key[:60]}"
        if _USERINFO_URL.search(line):
            # The key only when it is a plain name: a line without a key is the URL itself.
            shown = key if _PLAIN_KEY.fullmatch(key) else "a value"
            return f"line {number}: {shown} (a URL with a user in it)"
    return None
