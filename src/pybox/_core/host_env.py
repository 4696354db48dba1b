"""Which variables a caller may take, by name alone, from the environment of the
process pybox runs in (pure).

A name-only forward (an experiment's `env=["CI"]`) copies a value out of pybox's
own process. Whose values those are depends on the front end, so the front end
decides and passes this policy down with the request:

- the CLI and the Python API: the process is the user's own, so every name
  (`HostEnvPolicy.callers_own()`);
- the MCP server (stdio and HTTP): the process is the operator's, and the agent
  is not the operator, so only the names the operator listed
  (`forward_env = [...]` in the config, `pybox mcp --forward-env NAME`:
  `HostEnvPolicy.operator_listed(...)`).

The default (`HostEnvPolicy()`) takes nothing: a caller that did not say is
refused, never handed the process's values. `NAME=value` is not governed here
(the caller already has the value); credential-shaped names and values are
refused either way (`pybox._core.request.credential_reason`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from pybox._core.errors import ConfigError
from pybox._core.request import ENV_NAME_RE


@dataclass(frozen=True)
class HostEnvPolicy:
    # None: every name (the caller's own environment); otherwise exactly these names.
    names: frozenset[str] | None = frozenset()

    @classmethod
    def callers_own(cls) -> HostEnvPolicy:
        return cls(None)

    @classmethod
    def operator_listed(cls, names: Iterable[str]) -> HostEnvPolicy:
        return cls(frozenset(names))

    def allows(self, name: str) -> bool:
        return self.names is None or name in self.names

    def refusal(self, name: str) -> str:
        """Why `name` is not taken from the process's environment, and how the operator
        may allow it. The same words whether or not the process has `name` set, so a
        refusal tells the caller nothing about the server's environment."""
        return (
            f"Environment variable {name} is given by name only, which would copy its value "
            "from the environment of the server pybox runs in; this server forwards only "
            f"the names its operator listed. Give it as {name}=value, or the operator can "
            f'list it: forward_env = ["{name}"] in the config or '
            f"`pybox mcp --forward-env {name}`."
        )


# The default wherever a caller did not say: nothing is taken from the process.
NOTHING_FROM_HOST = HostEnvPolicy()


def check_forward_names(names: object, where: str) -> tuple[str, ...]:
    """The operator's `forward_env` list, each an environment variable name."""
    if not isinstance(names, list | tuple) or not all(isinstance(n, str) for n in names):
        raise ConfigError(
            f'{where}: forward_env must be a list of environment variable names (["CI"]), '
            f"not {names!r}."
        )
    for name in names:
        if not ENV_NAME_RE.fullmatch(name):
            raise ConfigError(
                f"{where}: forward_env: {name[:80]!r} is not an environment variable name "
                "(letters, digits and '_', not starting with a digit, at most 128)."
            )
    return tuple(names)
