"""Helpers for GraphQL input objects."""

from __future__ import annotations

from typing import Any

import strawberry


def provided(value: Any) -> dict[str, Any]:
    """The input's fields the caller actually sent (UNSET ones dropped)."""
    return {key: item for key, item in vars(value).items() if item is not strawberry.UNSET}
