"""Rate limiting with GCRA, in memory or in Redis, with one set of rules.

A limit "`limit` per `period`, with bursts of up to `limit`" is one GCRA bucket
per key (app/kit/gcra.py, the one implementation in Python and in Lua), so it
costs one read and one write per hit, and the in-memory and Redis limiters give
identical decisions (integer microseconds: a burst of exactly `limit` is never
denied by a rounding error).

The emission interval (time one request "costs") is `ceil(period / limit)`
microseconds, so a limit is never exceeded because of rounding; the price is
that a rate above 1,000,000/s behaves like 1,000,000/s.
"""

from __future__ import annotations

import heapq
import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Protocol

from app.kit import gcra
from app.kit.redis_clients import REDIS_FAILURES, OutageReport

if TYPE_CHECKING:
    from redis.asyncio import Redis

__all__ = [
    "Decision",
    "FallbackRateLimiter",
    "MemoryRateLimiter",
    "RateLimit",
    "RateLimiter",
    "RedisRateLimiter",
    "build_rate_limiter",
]

_US_PER_S: Final = 1_000_000
_UNIT_SECONDS: Final = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_RATE_RE: Final = re.compile(r"\s*(\d+)\s*/\s*(\d*)\s*([smhd])\s*")


@dataclass(frozen=True, slots=True)
class RateLimit:
    """`limit` requests per `period` seconds; `limit` is also the burst size."""

    limit: int
    period: float

    def __post_init__(self) -> None:
        # Validate here, not only in parse(), so a bad limit built in code
        # fails at startup rather than on the first request.
        if isinstance(self.limit, bool) or not isinstance(self.limit, int) or self.limit < 1:
            raise ValueError(f"rate limit must be a positive integer, got {self.limit!r}")
        if not math.isfinite(self.period) or round(self.period * _US_PER_S) < 1:
            raise ValueError(f"rate period must be at least 1 microsecond, got {self.period!r}")

    @classmethod
    def parse(cls, text: str) -> RateLimit:
        """Read "100/s", "6000/m", "100000/h", "5/d" or "50/10s" (units s, m, h, d)."""
        match = _RATE_RE.fullmatch(text)
        if match is None:
            raise ValueError(
                f"invalid rate limit {text!r}: expected '<count>/<unit>' or "
                "'<count>/<n><unit>' with unit s, m, h or d, e.g. '100/s' or '50/10s'"
            )
        count, multiplier, unit = match.groups()
        if int(count) < 1:
            raise ValueError(f"invalid rate limit {text!r}: count must be at least 1")
        if multiplier and int(multiplier) < 1:
            raise ValueError(f"invalid rate limit {text!r}: period must be at least 1{unit}")
        period = int(multiplier or 1) * _UNIT_SECONDS[unit]
        return cls(limit=int(count), period=float(period))


@dataclass(frozen=True, slots=True)
class Decision:
    """The outcome of one hit, with what a client needs for its headers."""

    allowed: bool
    remaining: int
    retry_after: float
    """Seconds until this hit (same cost) would be allowed; 0 when allowed."""
    reset_after: float
    """Seconds until the bucket is full again."""


class RateLimiter(Protocol):
    """What request handling depends on, so the backend is a deployment choice."""

    async def hit(self, key: str, limit: RateLimit, cost: int = 1) -> Decision:
        """Spend `cost` units of `key`'s allowance, if there is enough of it."""
        ...

    async def close(self) -> None:
        """Release what the limiter owns."""
        ...


def _intervals(limit: RateLimit, cost: int) -> tuple[int, int]:
    """(emission interval, burst tolerance) in microseconds, after checking `cost`.

    A cost above the burst size could never be allowed, so it is a caller bug,
    not a denial; cost 0 is a peek that reports state without spending.
    """
    if isinstance(cost, bool) or not isinstance(cost, int) or cost < 0:
        raise ValueError(f"rate limit cost must be a non-negative integer, got {cost!r}")
    if cost > limit.limit:
        raise ValueError(f"rate limit cost {cost} exceeds the burst size {limit.limit}")
    period_us = round(limit.period * _US_PER_S)
    interval = -(-period_us // limit.limit)  # ceil: never allow more than asked
    return interval, interval * limit.limit


def _gcra(
    stored_tat: int | None, now: int, interval: int, burst: int, cost: int
) -> tuple[int, int, int, int]:
    """One hit as a GCRA step: (allowed 0/1, remaining, retry_after_us, TAT after the hit).

    A denied hit leaves the TAT as it was, so retrying early costs nothing. `_LUA` reads
    the step's answer the same way.
    """
    outcome = gcra.step(stored_tat or 0, now, interval, burst, cost, cost)
    if not outcome.allowed:
        return 0, max(0, outcome.available), outcome.wait, outcome.tat
    return 1, outcome.available - cost, 0, outcome.tat


def _decision(allowed: int, remaining: int, retry_after_us: int, reset_after_us: int) -> Decision:
    return Decision(
        allowed=bool(allowed),
        remaining=int(remaining),
        retry_after=max(0, int(retry_after_us)) / _US_PER_S,
        reset_after=max(0, int(reset_after_us)) / _US_PER_S,
    )


class MemoryRateLimiter:
    """In-process limiter for the single-machine mode without Redis.

    Safe under asyncio because `hit` never awaits between reading and writing
    a key; it is not meant to be shared across threads. Memory is bounded by
    `max_keys` (see `_evict`).
    """

    def __init__(
        self, clock: Callable[[], float] = time.monotonic, max_keys: int = 100_000
    ) -> None:
        if max_keys < 1:
            raise ValueError(f"max_keys must be at least 1, got {max_keys!r}")
        self._clock = clock
        self._max_keys = max_keys
        self._tats: dict[str, int] = {}

    @property
    def key_count(self) -> int:
        """How many keys are held now (for metrics and tests)."""
        return len(self._tats)

    async def hit(self, key: str, limit: RateLimit, cost: int = 1) -> Decision:
        """Spend `cost` of `key`'s allowance at the clock's current time."""
        interval, burst = _intervals(limit, cost)
        now = round(self._clock() * _US_PER_S)
        stored = self._tats.get(key)
        allowed, remaining, retry_after, tat_after = _gcra(stored, now, interval, burst, cost)
        if allowed and cost > 0:
            if stored is None and len(self._tats) >= self._max_keys:
                self._evict(now)
            self._tats[key] = tat_after
        return _decision(allowed, remaining, retry_after, tat_after - now)

    def _evict(self, now: int) -> None:
        """Make room for a new key, freeing at least a tenth of `max_keys`.

        Keys whose TAT has passed are full buckets, identical to absent keys,
        so dropping them loses nothing. If that is not enough (more live keys
        than `max_keys`), the keys with the smallest TAT go next: they owe the
        least time, so forgetting them gives away the least allowance. Freeing
        a fixed fraction each time makes the O(n) sweep amortised O(1) per hit.
        """
        self._tats = {k: tat for k, tat in self._tats.items() if tat > now}
        target = self._max_keys - max(1, self._max_keys // 10)
        excess = len(self._tats) - target
        if excess > 0:
            for k, _ in heapq.nsmallest(excess, self._tats.items(), key=lambda item: item[1]):
                del self._tats[k]

    async def close(self) -> None:
        """Forget all state."""
        self._tats.clear()


# Mirrors `_gcra`. KEYS[1]: bucket key. ARGV: interval_us, burst_us, cost,
# and optionally a fixed "now" in microseconds (tests only, to compare with
# the in-memory limiter). Time comes from the Redis server so replica clocks
# don't matter. TIME before a write needs effects replication, the default
# since Redis 5 and the only mode in 7, so no redis.replicate_commands().
# The key expires when the bucket is full again, so idle keys vanish.
_LUA: Final = (
    gcra.LUA
    + """
local interval = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local cost = tonumber(ARGV[3])
local now
if ARGV[4] then
  now = tonumber(ARGV[4])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local stored = tonumber(redis.call('GET', KEYS[1]) or 0)
local allowed, _, available, wait, tat = gcra(stored, now, interval, burst, cost, cost, 0)
if allowed == 0 then
  return {0, math.max(0, available), wait, tat - now}
end
if cost > 0 then
  redis.call('SET', KEYS[1], string.format('%.0f', tat), 'PX', math.ceil((tat - now) / 1000))
end
return {1, available - cost, 0, tat - now}
"""
)


class RedisRateLimiter:
    """Limiter shared by all API replicas: one atomic Lua call (EVALSHA) per hit.

    Redis errors propagate, so the caller chooses between failing open and
    failing closed. The client is owned by the caller and is not closed here.
    """

    def __init__(self, redis: Redis, prefix: str = "sb:rl:") -> None:
        self._redis = redis
        self._prefix = prefix
        # register_script hashes locally; the script is loaded on first use
        # (NOSCRIPT retry) and every later hit is a single EVALSHA.
        self._script = redis.register_script(_LUA)

    async def hit(self, key: str, limit: RateLimit, cost: int = 1) -> Decision:
        """Spend `cost` of `key`'s allowance at the Redis server's current time."""
        return await self._hit(key, limit, cost, None)

    async def _hit(self, key: str, limit: RateLimit, cost: int, now_us: int | None) -> Decision:
        interval, burst = _intervals(limit, cost)
        args: list[int] = [interval, burst, cost]
        if now_us is not None:
            args.append(now_us)
        reply = await self._script(keys=[self._prefix + key], args=args)
        allowed, remaining, retry_after, reset_after = (int(v) for v in reply)
        return _decision(allowed, remaining, retry_after, reset_after)

    async def close(self) -> None:
        """Nothing to release: the Redis client belongs to the caller."""


class FallbackRateLimiter:
    """Redis's shared buckets while Redis answers; this process's own buckets while it fails.

    Failing open, but not unlimited: every limit keeps applying per process (with N processes,
    at most N times the configured rate) until Redis answers again, and then Redis's buckets
    apply again. A failure sends every hit to the local buckets for `retry_seconds`; after that
    one hit probes Redis (the others stay local until the probe answers), so a silent Redis
    costs a request its timeout only once per `retry_seconds`, never each request.
    """

    def __init__(
        self,
        primary: RateLimiter,
        fallback: MemoryRateLimiter | None = None,
        *,
        retry_seconds: float = 1.0,
        probe_seconds: float = 5.0,
        report: OutageReport | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.primary = primary
        self.fallback = fallback or MemoryRateLimiter()
        self.retry_seconds = retry_seconds
        # How long a probe may take before another hit may probe: longer than any timeout.
        self.probe_seconds = probe_seconds
        self._report = report or OutageReport("rate_limiter")
        self._clock = clock
        self._local_until = 0.0

    @property
    def failing(self) -> bool:
        """Whether hits go to the local buckets now."""
        return self._clock() < self._local_until

    async def hit(self, key: str, limit: RateLimit, cost: int = 1) -> Decision:
        now = self._clock()
        if now < self._local_until:
            return await self.fallback.hit(key, limit, cost)
        probing = self._local_until > 0
        if probing:
            self._local_until = now + self.probe_seconds
        try:
            decision = await self.primary.hit(key, limit, cost)
        except REDIS_FAILURES as exc:
            self._local_until = self._clock() + self.retry_seconds
            self._report.failed(exc, "per-process rate limits")
            return await self.fallback.hit(key, limit, cost)
        if probing:
            self._local_until = 0.0
        return decision

    async def close(self) -> None:
        await self.primary.close()
        await self.fallback.close()


def build_rate_limiter(redis: Redis | None) -> RateLimiter:
    """Redis when configured (shared across replicas, per process while Redis fails),
    otherwise in-process."""
    if redis is None:
        return MemoryRateLimiter()
    return FallbackRateLimiter(RedisRateLimiter(redis))
