"""The Anthropic messages API as the model."""

from __future__ import annotations

from typing import Any

from pybox._adapters.model_providers.http_api import HTTPProvider
from pybox._core.errors import ModelError
from pybox._core.repair import Prompt

ANTHROPIC_VERSION = "2023-06-01"


class AnthropicProvider(HTTPProvider):
    """The Anthropic messages API, `POST {base}/v1/messages`."""

    path = "/v1/messages"

    def _headers(self) -> dict[str, str]:
        return {"x-api-key": self._key, "anthropic-version": ANTHROPIC_VERSION}

    def _body(self, prompt: Prompt) -> dict[str, Any]:
        return {
            "model": self.model.model,
            "max_tokens": self.model.max_tokens,
            "system": prompt.system,
            "messages": [{"role": "user", "content": prompt.user}],
        }

    def _reply(self, answer: dict[str, Any]) -> str:
        content = answer.get("content")
        if not isinstance(content, list):
            raise ModelError(f"{self.what} answered without a content list.")
        return "".join(
            block["text"]
            for block in content
            if isinstance(block, dict)
            and block.get("type") == "text"
            and isinstance(block.get("text"), str)
        )
