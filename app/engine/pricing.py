"""What a reply costs: tokens in and out times the provider's price for the model, in USD.

Prices are per million tokens, `(input, output)`, keyed `provider/model`. The built-in table
holds the default models of each provider and a few common ones; `SWITCHBOARD_LLM_PRICES`
(JSON, `{"openai/gpt-4o": [2.5, 10]}`) adds or replaces entries. A model without a price
costs 0 (and the reply says `cost_known: false`). The offline responder is free.
"""

from __future__ import annotations

from functools import lru_cache

from app.engine.types import Usage
from app.kit.prices import parse_prices, parse_speech_prices

DEFAULT_PRICES: dict[str, tuple[float, float]] = {
    "openai/gpt-4o-mini": (0.15, 0.60),
    "openai/gpt-4o": (2.50, 10.00),
    "openai/gpt-4.1": (2.00, 8.00),
    "openai/gpt-4.1-mini": (0.40, 1.60),
    "openai/gpt-4.1-nano": (0.10, 0.40),
    "anthropic/claude-3-5-haiku-latest": (0.80, 4.00),
    "anthropic/claude-3-5-sonnet-latest": (3.00, 15.00),
    "anthropic/claude-sonnet-4-0": (3.00, 15.00),
    "groq/llama-3.3-70b-versatile": (0.59, 0.79),
    "groq/llama-3.1-8b-instant": (0.05, 0.08),
}


@lru_cache(maxsize=8)
def price_table(overrides: str | None) -> dict[str, tuple[float, float]]:
    return {**DEFAULT_PRICES, **parse_prices(overrides)}


def price_of(provider: str, model: str | None, overrides: str | None) -> tuple[float, float] | None:
    return price_table(overrides).get(f"{provider}/{model}")


def cost_usd(provider: str, model: str | None, usage: Usage, overrides: str | None) -> float:
    price = price_of(provider, model, overrides)
    if price is None:
        return 0.0
    return round((usage.input_tokens * price[0] + usage.output_tokens * price[1]) / 1_000_000, 8)


# Speech and carrier prices in USD (live calls, app/voice/): speech to text per minute of
# caller audio, speech per 1,000 characters spoken, and the carrier's per-minute price, used
# only until the carrier reports what the call cost. The offline voice and no STT are free.
DEFAULT_SPEECH_PRICES: dict[str, float] = {
    "deepgram": 0.0043,
    "elevenlabs": 0.18,
    "cartesia": 0.065,
    "offline": 0.0,
    "telephony": 0.014,
}


@lru_cache(maxsize=8)
def speech_price_table(overrides: str | None) -> dict[str, float]:
    return {**DEFAULT_SPEECH_PRICES, **parse_speech_prices(overrides)}


def speech_cost_usd(
    *,
    stt_provider: str | None,
    stt_seconds: float,
    tts_provider: str,
    tts_characters: int,
    overrides: str | None,
) -> float:
    """What a call's speech cost: minutes heard by the speech-to-text provider and characters
    spoken by the voice, each at its provider's price."""
    table = speech_price_table(overrides)
    heard = table.get(stt_provider, 0.0) * stt_seconds / 60 if stt_provider else 0.0
    spoken = table.get(tts_provider, 0.0) * tts_characters / 1000
    return round(heard + spoken, 8)
