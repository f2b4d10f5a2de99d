"""The organization's snippet list (shortcut → content), cached whole per organization.

Every write invalidates it after its commit (app/kit/cache.py explains the order); shortcut
expansion reads it.
"""

from __future__ import annotations

from redis.asyncio import Redis

from app.kit.cache import GenerationalCache, backend_for

NAMESPACE = "quick_replies"
# A safety net only (writes invalidate at once); bounds staleness across processes without Redis.
TTL_SECONDS = 300


def snippet_cache(redis: Redis | None) -> GenerationalCache:
    """The cache in Redis when the process has a client (REDIS_URL), else in this process."""
    return GenerationalCache(backend_for(redis), NAMESPACE, TTL_SECONDS)
