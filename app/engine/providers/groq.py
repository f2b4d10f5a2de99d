"""Groq through its official `groq` SDK: the chat completions shape (OpenAI-compatible),
with Groq's own client, error classes and usage report (`x_groq.usage` when streaming)."""

from __future__ import annotations

from typing import Any

import groq
import httpx

from app.engine.providers.openai import OpenAICompatibleChat


def groq_chat(client: Any, model: str) -> OpenAICompatibleChat:
    return OpenAICompatibleChat(
        client,
        model,
        provider="groq",
        errors=groq,
        max_tokens_field="max_completion_tokens",
        usage_in_stream=False,  # Groq always reports it, in `x_groq.usage`
        completions_path="/openai/v1/chat/completions",  # the groq SDK's own
    )


HTTP_MODULE = httpx


def sdk_client(options: dict[str, Any], http_client: Any) -> Any:
    return groq.AsyncGroq(**options, http_client=http_client)


def chat(client: Any, model: str, *, custom_endpoint: bool) -> OpenAICompatibleChat:
    return groq_chat(client, model)
