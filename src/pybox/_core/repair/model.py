"""Which model proposes code: a local command or an HTTP provider, never its key."""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from pybox._core.errors import InvalidRequest


class ProviderKind(StrEnum):
    COMMAND = "command"
    OPENAI = "openai"
    ANTHROPIC = "anthropic"


OPENAI_BASE_URL = "https://api.openai.com/v1"
ANTHROPIC_BASE_URL = "https://api.anthropic.com"
DEFAULT_KEY_ENV = {
    ProviderKind.OPENAI: "OPENAI_API_KEY",
    ProviderKind.ANTHROPIC: "ANTHROPIC_API_KEY",
}
ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class RepairModel:
    """Which model proposes code. The API key is never held here: only the name of
    the environment variable it is read from when the loop starts."""

    provider: ProviderKind
    argv: tuple[str, ...] = ()
    model: str | None = None
    base_url: str | None = None
    key_env: str | None = None
    max_tokens: int = 8192

    @classmethod
    def command(cls, command: str | Sequence[str]) -> RepairModel:
        """Any local command: the prompt on its stdin, the reply on its stdout.

        A string is split like a shell would split words (no shell runs it)."""
        if isinstance(command, str):
            try:
                argv = tuple(shlex.split(command))
            except ValueError as exc:
                raise InvalidRequest(
                    f"Cannot split the model command {command!r}: {exc}."
                ) from None
        else:
            argv = tuple(command)
        if not argv or not all(isinstance(a, str) and a for a in argv):
            raise InvalidRequest(
                "The model command is empty. Give a command that reads a prompt on stdin and "
                "writes its reply on stdout, for example --model-cmd 'llm -m gpt-4o'."
            )
        return cls(ProviderKind.COMMAND, argv=argv)

    @classmethod
    def openai(
        cls, model: str, *, base_url: str | None = None, key_env: str = "OPENAI_API_KEY"
    ) -> RepairModel:
        """An OpenAI-compatible chat-completions endpoint."""
        return cls._http(ProviderKind.OPENAI, model, base_url or OPENAI_BASE_URL, key_env, 8192)

    @classmethod
    def anthropic(
        cls,
        model: str,
        *,
        base_url: str | None = None,
        key_env: str = "ANTHROPIC_API_KEY",
        max_tokens: int = 8192,
    ) -> RepairModel:
        """The Anthropic messages API."""
        return cls._http(
            ProviderKind.ANTHROPIC, model, base_url or ANTHROPIC_BASE_URL, key_env, max_tokens
        )

    @classmethod
    def _http(
        cls, kind: ProviderKind, model: str, base_url: str, key_env: str, max_tokens: int
    ) -> RepairModel:
        if not isinstance(model, str) or not model.strip():
            raise InvalidRequest(f"The {kind.value} provider needs a model name (--model NAME).")
        if not isinstance(key_env, str) or not ENV_NAME_RE.fullmatch(key_env):
            raise InvalidRequest(
                f"{key_env!r} is not an environment variable name. Name the variable that "
                "holds the API key (the key itself never goes on the command line)."
            )
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise InvalidRequest(f"max_tokens must be a positive whole number, not {max_tokens!r}.")
        return cls(kind, model=model, base_url=base_url, key_env=key_env, max_tokens=max_tokens)

    def to_dict(self) -> dict[str, Any]:
        """What the report records: never a key, and of a command only its program,
        since arguments may hold secrets."""
        if self.provider is ProviderKind.COMMAND:
            return {
                "provider": self.provider.value,
                "command": self.argv[0],
                "arguments": len(self.argv) - 1,
            }
        return {
            "provider": self.provider.value,
            "model": self.model,
            "base_url": self.base_url,
            "key_env": self.key_env,
        }

    def describe(self) -> str:
        if self.provider is ProviderKind.COMMAND:
            return f"command {self.argv[0]}"
        return f"{self.provider.value} model {self.model} at {self.base_url}"
