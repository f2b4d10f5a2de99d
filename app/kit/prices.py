"""The readers of the two price settings, `SWITCHBOARD_LLM_PRICES` and
`SWITCHBOARD_VOICE_PRICES`: the settings validate with them at start, and the conversation
engine's pricing (app/engine/pricing.py) reads its override tables with them, so a table the
settings accepted is one the engine can read.
"""

from __future__ import annotations

from typing import Any

import orjson


def _json_object(text: str, setting: str) -> dict[Any, Any]:
    try:
        value: Any = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"{setting} must be a JSON object") from exc
    if not isinstance(value, dict):
        raise ValueError(f"{setting} must be a JSON object")
    return value


def parse_prices(text: str | None) -> dict[str, tuple[float, float]]:
    """The override table of `llm_prices`; ValueError names what is wrong."""
    if not text:
        return {}
    value = _json_object(text, "llm_prices")
    prices: dict[str, tuple[float, float]] = {}
    for key, pair in value.items():
        if (
            not isinstance(pair, list)
            or len(pair) != 2
            or not all(
                isinstance(p, int | float) and not isinstance(p, bool) and p >= 0 for p in pair
            )
        ):
            raise ValueError(f"llm_prices[{key!r}] must be [input, output] USD per million tokens")
        prices[str(key)] = (float(pair[0]), float(pair[1]))
    return prices


def parse_speech_prices(text: str | None) -> dict[str, float]:
    """The override table of `voice_prices`; ValueError names what is wrong."""
    if not text:
        return {}
    value = _json_object(text, "voice_prices")
    prices: dict[str, float] = {}
    for key, price in value.items():
        if isinstance(price, bool) or not isinstance(price, int | float) or price < 0:
            raise ValueError(f"voice_prices[{key!r}] must be a number of USD, 0 or more")
        prices[str(key)] = float(price)
    return prices
