"""Rate limits in front of every route: one bucket per credential and one per organization."""

from __future__ import annotations

from app.kit.errors import RateLimited
from app.kit.ratelimit import RateLimit, RateLimiter


async def enforce(
    limiter: RateLimiter,
    credential_id: str,
    organization_id: str,
    per_key: RateLimit,
    per_org: RateLimit,
) -> None:
    """Raise RateLimited when either the credential's or its organization's bucket is empty."""
    decision = await limiter.hit(f"key:{credential_id}", per_key)
    if not decision.allowed:
        raise RateLimited(decision.retry_after)
    decision = await limiter.hit(f"org:{organization_id}", per_org)
    if not decision.allowed:
        raise RateLimited(decision.retry_after)
