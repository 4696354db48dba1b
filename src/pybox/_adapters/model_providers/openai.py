"""An OpenAI-compatible chat completions API as the model."""

from __future__ import annotations

from typing import Any

from pybox._adapters.model_providers.http_api import HTTPProvider
from pybox._core.errors import ModelError
from pybox._core.repair import Prompt


class OpenAIProvider(HTTPProvider):
    """An OpenAI-compatible `POST {base}/chat/completions`."""

    path = "/chat/completions"

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._key}"}

    def _body(self, prompt: Prompt) -> dict[str, Any]:
        return {
            "model": self.model.model,
            "messages": [
                {"role": "system", "content": prompt.system},
                {"role": "user", "content": prompt.user},
            ],
        }

    def _reply(self, answer: dict[str, Any]) -> str:
        try:
            content = answer["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError):
            raise ModelError(f"{self.what} answered without choices[0].message.content.") from None
        if content is None:
            return ""  # a refusal or a tool call: no program, an invalid proposal
        if not isinstance(content, str):
            raise ModelError(f"{self.what} answered a message whose content is not text.")
        return content
