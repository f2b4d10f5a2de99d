"""The organization's provider credentials as stored (sealed), cached whole per organization.

Every turn of the conversation engine needs the organization's credential for its model (and
for its calendar when it books); reading the table each time cost a session and a round trip
per turn. The cache holds the rows as they are stored, key still sealed (app/kit/crypto.py):
nothing readable reaches Redis. Every write invalidates after its commit (app/kit/cache.py
explains the order).
"""

from __future__ import annotations

from redis.asyncio import Redis

from app.kit.cache import GenerationalCache, backend_for

NAMESPACE = "provider_credentials"
# A safety net only (writes invalidate at once); bounds staleness across processes without Redis.
TTL_SECONDS = 300


def credential_cache(redis: Redis | None) -> GenerationalCache:
    """The cache in Redis when the process has a client (REDIS_URL), else in this process."""
    return GenerationalCache(backend_for(redis), NAMESPACE, TTL_SECONDS)
