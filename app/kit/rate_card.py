"""Meta's message rate card, `SWITCHBOARD_MESSAGE_RATE_CARD`: a price per message by pricing
category and recipient country (docs/api.md "Meta's limits and ratings"). Read here once, by
the settings' validation and by the campaigns domain's costs (app/campaigns/costs.py).

The card is JSON: `{"currency": "USD", "rates": {"marketing": {"US": 0.025, "*": 0.05},
"utility": {"*": 0.004}}}`: per category (Meta's lower-case words), a price per ISO country
and `*` for the others. A category or country the card does not price costs 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import orjson
import phonenumbers

ANY_COUNTRY = "*"
UNKNOWN_COUNTRY = "ZZ"
DEFAULT_CURRENCY = "USD"
# "+351…": the longest calling code is three digits.
PREFIX_LENGTH = 4


@dataclass(frozen=True, slots=True)
class RateCard:
    currency: str
    rates: dict[str, dict[str, float]]

    def rate(self, category: str | None, country: str) -> float:
        table = self.rates.get((category or "").lower())
        if not table:
            return 0.0
        return table.get(country, table.get(ANY_COUNTRY, 0.0))


def parse_rate_card(text: str | None) -> RateCard:
    """The card of the setting; ValueError names what is wrong."""
    if not text:
        return RateCard(DEFAULT_CURRENCY, {})
    try:
        value: Any = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise ValueError("message_rate_card must be a JSON object") from exc
    if not isinstance(value, dict) or not isinstance(value.get("rates", {}), dict):
        raise ValueError('message_rate_card must be {"currency": …, "rates": {category: {…}}}')
    currency = value.get("currency", DEFAULT_CURRENCY)
    if not isinstance(currency, str) or not 0 < len(currency) <= 8:
        raise ValueError("message_rate_card.currency must be a currency code such as USD")
    rates: dict[str, dict[str, float]] = {}
    for category, table in value.get("rates", {}).items():
        if not isinstance(table, dict):
            raise ValueError(f"message_rate_card.rates[{category!r}] must map countries to prices")
        prices: dict[str, float] = {}
        for country, price in table.items():
            if isinstance(price, bool) or not isinstance(price, int | float) or price < 0:
                raise ValueError(
                    f"message_rate_card.rates[{category!r}][{country!r}] must be a price >= 0"
                )
            prices[str(country).upper() if country != ANY_COUNTRY else ANY_COUNTRY] = float(price)
        rates[str(category).lower()] = prices
    return RateCard(currency.upper(), rates)


@lru_cache(maxsize=8)
def rate_card(text: str | None) -> RateCard:
    return parse_rate_card(text)


@lru_cache(maxsize=4096)
def country_of(prefix: str) -> str:
    """The region of a number's calling code, from its first characters ("+351", "+1415")."""
    digits = prefix.lstrip("+")
    for length in range(1, min(3, len(digits)) + 1):
        if not digits[:length].isdigit():
            break
        region = phonenumbers.region_code_for_country_code(int(digits[:length]))
        if region != UNKNOWN_COUNTRY:
            return str(region)
    return UNKNOWN_COUNTRY
