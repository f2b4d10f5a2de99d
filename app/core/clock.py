"""Time in one place, so tests and ordering agree on UTC with microseconds."""

from __future__ import annotations

from datetime import UTC, datetime


def utcnow() -> datetime:
    return datetime.now(UTC)


def isoformat(value: datetime | None) -> str | None:
    """ISO 8601 in UTC with a `Z` suffix, the format every response uses."""
    if value is None:
        return None
    if value.tzinfo is not UTC:
        value = value.astimezone(UTC)
    return value.isoformat().replace("+00:00", "Z")
