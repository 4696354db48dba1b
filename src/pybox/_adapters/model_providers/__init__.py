"""Model providers for the repair loop (being split into one module per provider)."""

from __future__ import annotations

from pybox._adapters.model_providers.http_api import (
    ModelProvider,
    OpenAIProvider,
    open_provider,
    retry_after_s,
    scrub_secret,
)

__all__ = ["ModelProvider", "OpenAIProvider", "open_provider", "retry_after_s", "scrub_secret"]
