"""Which environment variables cross into an experiment's box (pure).

Only named ones: `"CI"` forwards the value of the process pybox runs in,
`"NODE_ENV=test"` injects a literal. Refused, with the name and never the
value:

- names that are not identifiers (`[A-Za-z_][A-Za-z0-9_]*`, at most 128), or
  given twice;
- a name-only forward the front end's `HostEnvPolicy` does not allow
  (`pybox._core.host_env`): the CLI and the API take any name from the user's
  own environment; the MCP server only the names its operator listed
  (`forward_env`, `pybox mcp --forward-env`), whether or not the name is set
  there, so an agent learns nothing of the server's environment;
- a name-only forward of a variable that is not set;
- credentials, unless the operator allows them: the same rule as a run's own
  variables (`pybox._core.request.credential_reason`), so a variable refused
  for `run` is refused here too. Names with `TOKEN`, `SECRET`, `PASSWORD`,
  `PASSWD`, `PASSPHRASE`, `KEY`, `CREDENTIAL`, `AUTH`, `COOKIE`, `SESSION`,
  `PRIVATE`, `CERT`, `DSN`, `JWT`, `BEARER`, `DATABASE_URL` or
  `CONNECTION_STRING` anywhere; `PASS` or `PAT` as a whole `_`-separated word
  (`DB_PASS`, `GH_PAT`; not `BYPASS`, `PASSTHROUGH`, `PATH`); `PWD` as a word
  beside another (`MYSQL_PWD`; not the shell's own `PWD` or `OLDPWD`, which
  are folders); the prefixes `AWS_`, `AZURE_`, `GCP_`, `GOOGLE_`, `GITHUB_`,
  `GH_`, `GITLAB_`, `OPENAI_`, `ANTHROPIC_`, `HF_`, `HUGGINGFACE_`, `SLACK_`,
  `STRIPE_`, `NPM_`, `PYPI_`, `TWINE_`, `DOCKER_`, `KUBE_`, `VAULT_`, `SSH_`,
  `GPG_`. And whatever the name, a value holding a URL with a password
  (`redis://:pw@host`, `https://user:pw@host`) or a token as its user
  (20 characters or more before the `@`);
- names pybox sets in every box (`PATH`, `HOME`, `TMPDIR`, `LANG`,
  `PYTHONUNBUFFERED`, `PYTHONDONTWRITEBYTECODE`, the thread counts, `PYBOX_*`:
  `pybox._core.posture.box_environment`), and the prefixes `PYBOX_`, `LD_`,
  `DYLD_` and `PYTHON`: they decide which programs and libraries every command
  in the box loads (and where Python writes bytecode, which would show up as
  changes), so a forwarded host value would make the experiment run something
  other than the project. Whatever the operator allows, these stay refused.

Values are kept out of every message and repr.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from pybox._core.errors import EnvRefused
from pybox._core.host_env import NOTHING_FROM_HOST, HostEnvPolicy
from pybox._core.posture import box_environment
from pybox._core.request import ENV_NAME_RE, MAX_ENV, MAX_ENV_BYTES, credential_reason

RESERVED_NAMES = frozenset(box_environment())
RESERVED_PREFIXES = ("PYBOX_", "LD_", "DYLD_", "PYTHON")


@dataclass(frozen=True)
class ForwardedEnv:
    values: Mapping[str, str] = field(repr=False, default_factory=lambda: MappingProxyType({}))
    names: tuple[str, ...] = ()  # in the order given; what may be stored and shown

    def pairs(self) -> tuple[tuple[str, str], ...]:
        """As `RunRequest.env` takes them."""
        return tuple((name, self.values[name]) for name in self.names)


def resolve_env(
    specs: object,
    host_env: Mapping[str, str],
    *,
    from_host: HostEnvPolicy = NOTHING_FROM_HOST,
    allow_credential_names: bool = False,
) -> ForwardedEnv:
    """The variables `specs` names. A name alone takes its value from `host_env` (the
    process pybox runs in) only when `from_host` allows that name."""
    if specs is None:
        return ForwardedEnv()
    if not isinstance(specs, list | tuple):
        raise EnvRefused(
            f'env must be a list of strings ("NAME" or "NAME=value"), not {type(specs).__name__}.'
        )
    if len(specs) > MAX_ENV:
        raise EnvRefused(f"{len(specs)} environment variables were named; the most is {MAX_ENV}.")
    values: dict[str, str] = {}
    total = 0
    for spec in specs:
        if not isinstance(spec, str):
            raise EnvRefused(
                f'Each env item must be a string ("NAME" or "NAME=value"), not '
                f"{type(spec).__name__}."
            )
        name, literal, value = spec.partition("=")
        _check_name(name)
        if name in values:
            raise EnvRefused(f"Environment variable {name} is named twice; name it once.")
        # Whose value a name alone takes is the front end's call, asked before
        # anything about the name's value (set or not) can show in the answer.
        if not literal and not from_host.allows(name):
            raise EnvRefused(from_host.refusal(name))
        if not allow_credential_names:
            _refuse_credential(credential_reason(name, ""))  # the name, before any lookup
        if not literal:
            if name not in host_env:
                raise EnvRefused(
                    f"Environment variable {name} is not set where pybox runs, so there is no "
                    f"value to forward. Give it as {name}=value, or leave it out."
                )
            value = host_env[name]
        if "\0" in value:
            raise EnvRefused(f"The value of environment variable {name} holds a NUL character.")
        if not allow_credential_names:
            _refuse_credential(credential_reason(name, value))
        total += len(name) + len(value.encode("utf-8", "surrogateescape")) + 2
        if total > MAX_ENV_BYTES:
            raise EnvRefused(
                f"The environment variables come to more than {MAX_ENV_BYTES} bytes (at "
                f"{name}); pass large data as a file in the project instead."
            )
        values[name] = value
    return ForwardedEnv(MappingProxyType(values), tuple(values))


def _check_name(name: str) -> None:
    if not ENV_NAME_RE.fullmatch(name):
        raise EnvRefused(
            f"Environment variable name {name[:80]!r} is not usable: use letters, digits and "
            '\'_\', not starting with a digit, at most 128 characters ("NAME" or "NAME=value").'
        )
    upper = name.upper()
    if upper in RESERVED_NAMES or upper.startswith(RESERVED_PREFIXES):
        raise EnvRefused(
            f"Environment variable {name} is one pybox sets in every box, or decides which "
            "programs and libraries the box loads (PATH, HOME, TMPDIR, LANG, LD_*, DYLD_*, "
            "PYTHON*, PYBOX_*); it cannot be forwarded. Choose another name."
        )


def _refuse_credential(reason: str | None) -> None:
    if reason is not None:
        raise EnvRefused(
            f"{reason}; pybox does not hand credentials to the code in an experiment. Leave "
            "it out (or rename a variable that holds none), or have the operator set "
            "allow_credential_env = true (PYBOX_ALLOW_CREDENTIAL_ENV=1)."
        )
