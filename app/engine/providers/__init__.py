"""The LLM providers' adapters, one module each over the provider's official SDK.

An adapter module is imported on first use (`adapter`): each SDK builds hundreds of pydantic
models at import, seconds of CPU that every API, worker and voice process would otherwise pay
at start whether or not any of its organizations uses that provider.

Each adapter module gives `HTTP_MODULE` (the httpx flavour its SDK takes), `sdk_client(options,
http_client)` and `chat(client, model, custom_endpoint=...)`.
"""

from __future__ import annotations

import importlib
from types import ModuleType

_ADAPTERS = {
    "openai": "app.engine.providers.openai",
    "anthropic": "app.engine.providers.anthropic",
    "groq": "app.engine.providers.groq",
}
DEFAULT_PROVIDER = "openai"


def adapter(provider: str) -> ModuleType:
    """The adapter of `provider` (an unknown name falls back to the OpenAI-compatible one)."""
    return importlib.import_module(_ADAPTERS.get(provider, _ADAPTERS[DEFAULT_PROVIDER]))
