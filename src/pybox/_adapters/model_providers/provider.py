"""The protocol every model provider follows, and `open_provider`, which opens one.

A provider is opened before anything runs, so a missing command or key is a
refusal before any box starts, not a model error after.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Mapping
from typing import Protocol

from pybox._adapters.model_providers.anthropic import AnthropicProvider
from pybox._adapters.model_providers.command import CommandProvider
from pybox._adapters.model_providers.http_api import check_base_url
from pybox._adapters.model_providers.openai import OpenAIProvider
from pybox._core.errors import ConfigError
from pybox._core.repair import Prompt, ProviderKind, RepairModel


class ModelProvider(Protocol):
    def ask(
        self,
        prompt: Prompt,
        *,
        timeout_s: float,
        max_reply_bytes: int,
        cancel: threading.Event | None = None,
    ) -> str:
        """The model's reply text, or ModelError (ModelTimeout, ModelRateLimited,
        ModelReplyTooLarge)."""
        ...


def open_provider(model: RepairModel, environ: Mapping[str, str]) -> ModelProvider:
    """A ready provider, or a clear error before anything is sent."""
    if model.provider is ProviderKind.COMMAND:
        # Found now, so a typo is a refusal before any box runs, not a model error after.
        program = model.argv[0] if model.argv else ""
        if not program or shutil.which(program, path=environ.get("PATH", os.defpath)) is None:
            raise ConfigError(
                f"The model command {program!r} was not found (looked in PATH"
                f"{'' if '/' not in program else ' and at that path'}): nothing was run. "
                "Install it, or give its full path in --model-cmd."
            )
        return CommandProvider(model.argv, environ)
    assert model.key_env is not None and model.base_url is not None
    key = environ.get(model.key_env, "")
    if not key.strip():
        raise ConfigError(
            f"The {model.provider.value} provider reads its API key from the environment "
            f"variable {model.key_env}, which is not set. Export it, or name another "
            "variable with --key-env."
        )
    key = key.strip()
    bad = next((i for i, char in enumerate(key) if not "!" <= char <= "~"), None)
    if bad is not None:
        # Never the key itself, nor the character: only where the problem is.
        raise ConfigError(
            f"The API key in the environment variable {model.key_env} has a character an "
            f"HTTP header cannot carry (a line break, a space, a control or a non-ASCII "
            f"character) at position {bad + 1} of {len(key)}. Set the variable to the key "
            "alone."
        )
    base = check_base_url(model.base_url)
    if model.provider is ProviderKind.OPENAI:
        return OpenAIProvider(model, base, key)
    return AnthropicProvider(model, base, key)
