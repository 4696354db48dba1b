"""Which environment variables cross into an experiment's box (pure).

Only named ones: `"CI"` forwards the host's value (refused when the host has
none), `"NODE_ENV=test"` injects a literal. Refused, with the name and never
the value:

- names that are not identifiers (`[A-Za-z_][A-Za-z0-9_]*`, at most 128), or
  given twice;
- credential-shaped names, unless the operator allows them: the same rule as a
  run's own variables (`pybox._core.request.CREDENTIAL_NAME_RE`: `*TOKEN*`,
  `*SECRET*`, `*KEY*`, `*PASSWORD*`, `*PASSWD*`, `*CREDENTIAL*`, `*AUTH*`,
  `*DSN*`, `DATABASE_URL`, `AWS_*`, `AZURE_*`, `GOOGLE_*`, `GITHUB_*`, ...):
  one rule everywhere, so a name refused for `run` is refused here too;
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
from pybox._core.posture import box_environment
from pybox._core.request import CREDENTIAL_NAME_RE, ENV_NAME_RE, MAX_ENV, MAX_ENV_BYTES

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
    specs: object, host_env: Mapping[str, str], *, allow_credential_names: bool = False
) -> ForwardedEnv:
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
        _check_name(name, allow_credential_names)
        if name in values:
            raise EnvRefused(f"Environment variable {name} is named twice; name it once.")
        if not literal:
            if name not in host_env:
                raise EnvRefused(
                    f"Environment variable {name} is not set where pybox runs, so there is no "
                    f"value to forward. Give it as {name}=value, or leave it out."
                )
            value = host_env[name]
        if "\0" in value:
            raise EnvRefused(f"The value of environment variable {name} holds a NUL character.")
        total += len(name) + len(value.encode("utf-8", "surrogateescape")) + 2
        if total > MAX_ENV_BYTES:
            raise EnvRefused(
                f"The environment variables come to more than {MAX_ENV_BYTES} bytes (at "
                f"{name}); pass large data as a file in the project instead."
            )
        values[name] = value
    return ForwardedEnv(MappingProxyType(values), tuple(values))


def _check_name(name: str, allow_credential_names: bool) -> None:
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
    if not allow_credential_names and CREDENTIAL_NAME_RE.search(name):
        raise EnvRefused(
            f"Environment variable {name} looks like a credential; pybox does not hand "
            "credentials to the code in an experiment. Rename it, or have the operator set "
            "allow_credential_env = true (PYBOX_ALLOW_CREDENTIAL_ENV=1)."
        )
