"""The LLM providers' adapters, one module each over the provider's official SDK.

An adapter module is imported on first use: each SDK builds hundreds of pydantic models at
import, seconds of CPU that every API, worker and voice process would otherwise pay at start
whether or not any of its organizations uses that provider. Where conversations run, `load`
imports it in a thread (a turn's event loop is never blocked for seconds by an import, which
would fire every timer on it at once), and `preload` starts all of them in the background as
soon as a process sets up the engine. A server that runs conversations awaits `load_all` before
it freezes its start-up heap (app/main.py).

Each adapter module gives `HTTP_MODULE` (the httpx flavour its SDK takes), `sdk_client(options,
http_client)` and `chat(client, model, custom_endpoint=...)`.
"""

from __future__ import annotations

import asyncio
import importlib
import sys
import threading
from types import ModuleType

_ADAPTERS = {
    "openai": "app.engine.providers.openai",
    "anthropic": "app.engine.providers.anthropic",
    "groq": "app.engine.providers.groq",
}
DEFAULT_PROVIDER = "openai"


def _module_name(provider: str) -> str:
    """An unknown name falls back to the OpenAI-compatible adapter."""
    return _ADAPTERS.get(provider, _ADAPTERS[DEFAULT_PROVIDER])


def adapter(provider: str) -> ModuleType:
    """The adapter of `provider`, imported here if `load` has not done it yet."""
    return importlib.import_module(_module_name(provider))


async def load(provider: str) -> ModuleType:
    """The adapter of `provider`; its first import runs in a thread."""
    module = sys.modules.get(_module_name(provider))
    if module is None:
        module = await asyncio.to_thread(adapter, provider)
    return module


_preloading = threading.Lock()
_preload_started = False


def _import_all() -> None:
    for provider in _ADAPTERS:
        adapter(provider)


def _claim_preload() -> bool:
    """True for the one caller per process that imports the adapters."""
    global _preload_started
    with _preloading:
        if _preload_started:
            return False
        _preload_started = True
        return True


def preload() -> None:
    """Import every adapter in a background thread, once per process (the engine's clients
    ask; a process may make several)."""
    if _claim_preload():
        threading.Thread(target=_import_all, name="llm-adapters", daemon=True).start()


async def load_all() -> None:
    """Import every adapter now, in a thread, before the process freezes its start-up heap:
    imported later, the SDKs' objects would compete with the first requests for the GIL and
    stay in the young collections."""
    if _claim_preload():
        await asyncio.to_thread(_import_all)
