"""Helpers for GraphQL input objects."""

from __future__ import annotations

from typing import Any

import strawberry


def provided(value: Any) -> Any:
    """An input as the dicts and lists a REST body would carry: the fields the caller actually
    sent (UNSET ones dropped), nested input objects included; anything else as it is."""
    if hasattr(value, "__strawberry_definition__"):
        return {
            key: provided(item) for key, item in vars(value).items() if item is not strawberry.UNSET
        }
    if isinstance(value, list):
        return [provided(item) for item in value]
    return value
