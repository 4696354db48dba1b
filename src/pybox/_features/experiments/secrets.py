"""Secret-shaped names: never copied into a box, whatever the configuration (pure).

A name is matched case-insensitively (a case-insensitive file system opens
`.ENV` as `.env`), against the entry's own name and against every folder above
it, so a listing from anywhere (the host walk, the box's digest) is filtered
the same way. The file patterns apply to files and links (a link named `.env`
is as secret as the file). Folders are matched against the credential folders
and `.env*` only (a folder named `.env` is usually a virtual environment, or
holds secrets): a package folder named `credentials/` is code, and is copied.
"""

from __future__ import annotations

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
    (".npmrc", "package registry login"),
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
