"""Rate limits in front of every route: one bucket per credential and one per organization."""

from __future__ import annotations

from app.auth.subject import Subject
from app.kit.errors import RateLimited
from app.kit.ratelimit import RateLimit, RateLimiter


async def enforce(
    limiter: RateLimiter, subject: Subject, per_key: RateLimit, per_org: RateLimit
) -> None:
    """Raise RateLimited when either the caller's or its organization's bucket is empty."""
    decision = await limiter.hit(f"key:{subject.principal_id}", per_key)
    if not decision.allowed:
        raise RateLimited(decision.retry_after)
    decision = await limiter.hit(f"org:{subject.organization_id}", per_org)
    if not decision.allowed:
        raise RateLimited(decision.retry_after)
