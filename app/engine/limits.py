"""Per-organization limits of AI work: conversations held at once and replies per minute.

Replies spend from the organization's `ai-replies` bucket of the process's rate limiter (GCRA,
Redis-backed when REDIS_URL is set, so every process shares it). Conversations hold a slot
while a channel runs one (`ConversationEngine.conversation`): a Redis sorted set of leases per
organization (one atomic script: drop expired leases, count, add), or an in-process table
without Redis. A lease expires on its own after the turn deadline times `LEASE_TURNS`, so a
killed worker never keeps a slot.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from redis.exceptions import RedisError

from app.kit.errors import RateLimited
from app.resources import Resources

LEASE_TURNS = 20
_ACQUIRE = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
if redis.call('ZSCORE', KEYS[1], ARGV[3]) then
  redis.call('ZADD', KEYS[1], ARGV[2], ARGV[3])
  return 1
end
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[4]) then
  return 0
end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return 1
"""


class ConversationLimitReached(RateLimited):
    """The organization already holds its maximum of concurrent AI conversations."""

    def __init__(self, retry_after: float = 5.0) -> None:
        super().__init__(retry_after)
        self.message = "Too many concurrent AI conversations for this organization; retry later."


class ReplyLimitReached(RateLimited):
    def __init__(self, retry_after: float) -> None:
        super().__init__(retry_after)
        self.message = "Too many AI replies per minute for this organization; retry later."


# Leases held without Redis: organization → {conversation key: expiry (monotonic)}.
_LOCAL_LEASES: dict[str, dict[str, float]] = {}


class ConversationLimits:
    def __init__(self, resources: Resources) -> None:
        self.resources = resources
        settings = resources.settings
        self.max_conversations = settings.ai_max_concurrent_conversations
        self.lease_seconds = settings.engine_turn_deadline_seconds * LEASE_TURNS

    async def spend_reply(self, organization_id: str) -> None:
        """One reply of the organization; waits for room within the turn deadline, else
        raises ReplyLimitReached."""
        limit = self.resources.settings.ai_replies_limit
        deadline = time.monotonic() + self.resources.settings.engine_turn_deadline_seconds
        while True:
            decision = await self.resources.rate_limiter.hit(f"ai-replies:{organization_id}", limit)
            if decision.allowed:
                return
            wait = decision.retry_after
            if time.monotonic() + wait > deadline:
                raise ReplyLimitReached(wait)
            await asyncio.sleep(wait)

    async def _acquire(self, organization_id: str, key: str) -> bool:
        redis = self.resources.redis
        if redis is not None:
            now_ms = int(time.time() * 1000)
            lease_ms = int(self.lease_seconds * 1000)
            try:
                taken = await redis.eval(
                    _ACQUIRE,
                    1,
                    f"switchboard:ai-conversations:{organization_id}",
                    now_ms,
                    now_ms + lease_ms,
                    key,
                    self.max_conversations,
                    lease_ms,
                )
                return bool(taken)
            except RedisError:
                pass  # Redis away: count in this process rather than refuse every conversation
        now = time.monotonic()
        leases = _LOCAL_LEASES.setdefault(organization_id, {})
        for held, expires in list(leases.items()):
            if expires <= now:
                del leases[held]
        if key not in leases and len(leases) >= self.max_conversations:
            return False
        leases[key] = now + self.lease_seconds
        return True

    async def _release(self, organization_id: str, key: str) -> None:
        redis = self.resources.redis
        if redis is not None:
            with contextlib.suppress(RedisError):
                await redis.zrem(f"switchboard:ai-conversations:{organization_id}", key)
        leases = _LOCAL_LEASES.get(organization_id)
        if leases is not None:
            leases.pop(key, None)
            if not leases:
                _LOCAL_LEASES.pop(organization_id, None)

    async def available(self, organization_id: str) -> bool:
        """Whether a new conversation would get a slot now (API calls refuse with 429)."""
        probe = f"probe:{time.monotonic_ns()}"
        if not await self._acquire(organization_id, probe):
            return False
        await self._release(organization_id, probe)
        return True

    @asynccontextmanager
    async def conversation(self, organization_id: str, key: str) -> AsyncIterator[None]:
        if not await self._acquire(organization_id, key):
            raise ConversationLimitReached(retry_after=math.ceil(min(self.lease_seconds, 5.0)))
        try:
            yield
        finally:
            await self._release(organization_id, key)
