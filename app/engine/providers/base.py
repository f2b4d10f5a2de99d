"""What every LLM provider of the engine implements, and how its failures are told apart.

One module per provider (openai.py, anthropic.py, groq.py, offline.py) turns the engine's
`CompletionRequest` into the provider's request through its official SDK and the answer
(streamed or whole) back into a `Completion`. The SDKs' own retries are off: the turn loop
(app/engine/turn.py) retries, so the per-turn deadline bounds every attempt and backoff.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from app.engine.types import Completion, Message, ToolSpec

# Receives the reply's words as they stream (live voice speaks them before the end).
TextSink = Callable[[str], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class CompletionRequest:
    system: str
    messages: Sequence[Message]
    tools: Sequence[ToolSpec]
    temperature: float
    max_output_tokens: int
    stream: bool


class ProviderFailure(Exception):
    """A provider call that failed. `retryable`: 429, 5xx, a timeout or a broken connection;
    anything else (401 bad key, 400 unknown model) would fail the same way again."""

    def __init__(
        self,
        provider: str,
        message: str,
        *,
        retryable: bool,
        status: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.provider = provider
        self.message = message
        self.retryable = retryable
        self.status = status
        self.retry_after = retry_after


class LanguageModel(Protocol):
    provider: str
    model: str

    async def complete(
        self, request: CompletionRequest, on_text: TextSink | None = None
    ) -> Completion: ...


def status_failure(provider: str, status: int, message: str, headers: Any) -> ProviderFailure:
    """The failure of an HTTP answer with `status` (the SDKs' APIStatusError)."""
    return ProviderFailure(
        provider,
        f"{provider} answered {status}: {_short(message)}",
        retryable=status == 429 or status >= 500 or status == 408,
        status=status,
        retry_after=retry_after_seconds(headers),
    )


def retry_after_seconds(headers: Any) -> float | None:
    """`retry-after-ms` or `retry-after` (seconds) of a provider answer, when readable."""
    if headers is None:
        return None
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            return max(0.0, float(value) * scale)
        except ValueError:
            continue
    return None


def _short(message: str) -> str:
    text = " ".join(str(message).split())
    return text[:300]
