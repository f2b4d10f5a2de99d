"""Meta's webhooks arrive at least once and in any order: each carries the time Meta sent it
(`entry[].time`, unix seconds), and a stored object keeps the time of the latest update it
applied per kind, so an older update that arrives late, or one that arrives twice, changes
nothing."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from app.core.clock import utcnow


def event_time(entry: dict[str, Any]) -> int:
    """`entry.time` as unix seconds; now when Meta gave none (then it counts as newest)."""
    value = entry.get("time")
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return int(value)
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return int(utcnow().timestamp())


def as_datetime(seconds: int) -> datetime:
    return datetime.fromtimestamp(seconds, tz=UTC)


def is_newest(times: dict[str, Any] | None, kind: str, at: int) -> bool:
    """Whether an update of `kind` sent at `at` is as new as any applied (equal: a redelivery,
    applied again to the same end)."""
    seen = (times or {}).get(kind)
    return not isinstance(seen, int | float) or at >= seen


def with_time(times: dict[str, Any] | None, kind: str, at: int) -> dict[str, Any]:
    """A new mapping (so the JSON column is seen as changed) with `kind` at `at`."""
    return {**(times or {}), kind: at}
