"""The scopes an API key can carry (spec "Scopes" table)."""

from __future__ import annotations

from enum import StrEnum


class Scope(StrEnum):
    FULL_ACCESS = "full_access"
    AGENTS_READ = "agents:read"
    AGENTS_WRITE = "agents:write"
    CALLS_DISPATCH = "calls:dispatch"
    CALLS_READ = "calls:read"
    CAMPAIGNS_MANAGE = "campaigns:manage"
    WEBHOOKS_ADMIN = "webhooks:admin"


ALL_SCOPES: frozenset[str] = frozenset(scope.value for scope in Scope)


def parse_scopes(values: list[str] | str) -> list[Scope]:
    """Scopes from a list or a comma-separated string; unknown names raise ValueError."""
    items = values.split(",") if isinstance(values, str) else values
    cleaned = [item.strip() for item in items if item.strip()]
    unknown = sorted(set(cleaned) - ALL_SCOPES)
    if unknown:
        raise ValueError(
            f"unknown scopes: {', '.join(unknown)}; allowed: {', '.join(sorted(ALL_SCOPES))}"
        )
    if not cleaned:
        raise ValueError("at least one scope is required")
    return [Scope(item) for item in dict.fromkeys(cleaned)]
