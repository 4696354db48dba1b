"""Model providers for the repair loop: a local command, or an HTTP API over urllib.

A provider turns a prompt into reply text and nothing else: it never runs the
reply. Each call is bounded in time (the loop's time left) and in bytes (the
loop's reply bytes left). API keys are read from the environment when the
provider is opened, sent only in the request header, and scrubbed from any
error text; they are never written anywhere.

- `provider`: the protocol every provider follows, and `open_provider`, which
  checks the choice and opens one;
- `command`: a local command, prompt on stdin, reply on stdout;
- `http_api`: what the HTTP providers share (a bounded POST, no redirects,
  rate limits, the base URL and key checks);
- `openai`, `anthropic`: one module per HTTP API.
"""

from __future__ import annotations

from pybox._adapters.model_providers.provider import ModelProvider, open_provider

__all__ = ["ModelProvider", "open_provider"]
