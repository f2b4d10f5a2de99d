"""Identifiers: UUID strings everywhere, checked before they reach SQL."""

from __future__ import annotations

import uuid


def new_id() -> str:
    return str(uuid.uuid4())


def normalize_id(value: str) -> str | None:
    """The canonical lowercase form of a UUID string, or None when it is not one."""
    if not 32 <= len(value) <= 38:
        return None
    try:
        return str(uuid.UUID(value))
    except ValueError:
        return None
