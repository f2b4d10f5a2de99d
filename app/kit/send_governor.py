"""The send governor: one budget of messages per second per channel, shared by every sender.

Meta limits each business number to a throughput (80 messages/s by default, error 130429 when
exceeded) and each business-to-customer pair to about one message every 6 seconds with bursts of
up to 45 (error 131056). Campaigns and conversation replies on one channel draw from the same
budget here, whatever process they run in, so neither starves the other nor trips the platform.

The governor only paces: it says when a send may leave, and never queues or schedules work.

Both limits are steps of the one GCRA bucket (app/kit/gcra.py, in Python and in Lua) kept in
integer microseconds, so the in-process and the Redis governors decide alike:

- throughput: a bucket of `rate` tokens per second holding at most `rate` x 0.1 s of them (so an
  idle channel may burst for a tenth of a second, never more). `acquire` grants as many tokens as
  are there, up to `wanted`, in one step; a caller that wants many waits until a batch worth
  `rate` x 20 ms is ready rather than taking them one at a time, so 1,000 messages/s cost about
  fifty Redis round trips per second, not a thousand;
- a hold (after 130429) stops the channel until it ends, and the bucket restarts empty so the
  platform sees the rate rise again gradually rather than a burst;
- pair rate: per (channel, recipient), one send per 6 s with a burst of 45, and a 131056 pushes
  that recipient's next send out by the platform's wait.
"""

from __future__ import annotations

import asyncio
import heapq
import math
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Protocol

from app.kit import gcra

if TYPE_CHECKING:
    from redis.asyncio import Redis

__all__ = [
    "MAX_MESSAGES_PER_SECOND",
    "PAIR_BURST",
    "PAIR_INTERVAL_SECONDS",
    "LocalSendGovernor",
    "RedisSendGovernor",
    "SendGovernor",
    "build_send_governor",
    "throughput_backoff",
]

_US_PER_S: Final = gcra.US_PER_S
MAX_MESSAGES_PER_SECOND: Final = 1000
# How much of a second an idle channel may send at once, and how much of one a caller wanting
# many sends waits for before taking them (fewer round trips, still smooth at every rate).
_BURST_FRACTION: Final = 10  # capacity = rate / 10 tokens (0.1 s)
_BATCH_FRACTION: Final = 50  # batch = rate / 50 tokens (20 ms)
# Meta's business-to-consumer pair rate: one message every 6 s, bursts of up to 45.
PAIR_INTERVAL_SECONDS: Final = 6.0
PAIR_BURST: Final = 45
_PAIR_INTERVAL_US: Final = round(PAIR_INTERVAL_SECONDS * _US_PER_S)
_PAIR_BURST_US: Final = PAIR_BURST * _PAIR_INTERVAL_US
# A 130429 without a hint: 1 s, doubling per consecutive one, at most 60 s.
_HOLD_BASE_SECONDS: Final = 1.0
_HOLD_MAX_SECONDS: Final = 60.0

Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]


class SendGovernor(Protocol):
    """Paces every send of a channel; all implementations decide alike."""

    async def acquire(self, channel_id: str, rate: int, wanted: int) -> int:
        """Waits until at least one send may leave `channel_id` paced at `rate` messages/s
        (honouring any hold), then grants and returns n, 1 <= n <= wanted, sends that may leave
        now. A caller wanting many is woken once a batch (rate x 20 ms) is ready, so it pays one
        step per batch rather than per message. Cancelling the waiting task grants nothing."""
        ...

    async def hold(self, channel_id: str, seconds: float) -> None:
        """The platform answered 130429 (throughput exceeded): nothing leaves the channel for
        `seconds`; an earlier hold that ends later is kept."""
        ...

    async def recipient_wait(self, channel_id: str, recipient: str) -> float:
        """Seconds to wait before the next send to this recipient may leave (Meta's pair rate,
        131056); 0 = now. Records the send when it returns 0."""
        ...

    async def recipient_waits(self, channel_id: str, recipients: Sequence[str]) -> list[float]:
        """`recipient_wait` for many recipients in one step, answers in the same order."""
        ...

    async def pair_limited(self, channel_id: str, recipient: str, seconds: float) -> None:
        """The platform answered 131056 for this recipient: its next send waits `seconds`."""
        ...


def throughput_backoff(retry_after: float | None, consecutive: int) -> float:
    """The hold after a 130429: the platform's hint when it gives one, else 1 s doubling per
    consecutive 130429 (`consecutive` counts from 1) up to 60 s, with a little jitter so the
    senders of many channels do not all return in the same instant."""
    if retry_after is not None and retry_after > 0:
        return min(retry_after, _HOLD_MAX_SECONDS)
    doubled = _HOLD_BASE_SECONDS * 2.0 ** max(0, consecutive - 1)
    ceiling: float = min(_HOLD_MAX_SECONDS, doubled)
    return ceiling * random.uniform(0.9, 1.0)


def _check_acquire(rate: int, wanted: int) -> None:
    if isinstance(rate, bool) or not isinstance(rate, int) or rate < 1:
        raise ValueError(f"send rate must be a positive integer, got {rate!r}")
    if isinstance(wanted, bool) or not isinstance(wanted, int) or wanted < 1:
        raise ValueError(f"wanted sends must be a positive integer, got {wanted!r}")


def _check_seconds(seconds: float) -> int:
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"a wait must be a non-negative number of seconds, got {seconds!r}")
    return round(seconds * _US_PER_S)


@dataclass(frozen=True, slots=True)
class _Pace:
    """A rate in the units the buckets use (microseconds and tokens)."""

    interval: int
    burst: int
    need: int

    @classmethod
    def of(cls, rate: int, wanted: int) -> _Pace:
        interval = -(-_US_PER_S // rate)  # ceil: never faster than asked
        capacity = max(1, rate // _BURST_FRACTION)
        need = min(wanted, max(1, rate // _BATCH_FRACTION))
        return cls(interval, capacity * interval, need)


def _grant(
    stored_tat: int, hold_until: int, now: int, pace: _Pace, wanted: int
) -> tuple[int, int, int]:
    """One throughput step: (granted, wait_us, TAT after). `_ACQUIRE_LUA` mirrors it.

    The bucket never starts a hold's end full: its floor is `hold_until + burst`, empty at the
    end of the hold and filling at the rate from there.
    """
    if hold_until > now:
        return 0, hold_until - now, stored_tat
    outcome = gcra.step(
        stored_tat, now, pace.interval, pace.burst, pace.need, wanted, hold_until + pace.burst
    )
    if outcome.allowed:
        return outcome.granted, 0, outcome.tat
    return 0, outcome.wait, stored_tat


def _pair_step(stored_tat: int, now: int) -> tuple[int, int]:
    """One pair-rate step: (wait_us, TAT after); records the send when the wait is 0.
    `_PAIR_LUA` mirrors it."""
    outcome = gcra.step(stored_tat, now, _PAIR_INTERVAL_US, _PAIR_BURST_US, 1, 1)
    if outcome.allowed:
        return 0, outcome.tat
    return outcome.wait, stored_tat


def _pair_limited_tat(stored_tat: int, now: int, wait_us: int) -> int:
    """The TAT that lets the recipient's next send leave `wait_us` from now, not earlier."""
    return max(stored_tat, now + wait_us + _PAIR_BURST_US - _PAIR_INTERVAL_US)


class LocalSendGovernor:
    """The governor of one process (no Redis): asyncio only, never awaits mid-decision.

    State is bounded: entries whose bucket is full and whose hold has passed are the same as
    absent ones and are swept once `max_keys` is reached.
    """

    def __init__(
        self,
        *,
        clock: Clock = time.monotonic,
        sleep: Sleep = asyncio.sleep,
        max_keys: int = 100_000,
    ) -> None:
        if max_keys < 1:
            raise ValueError(f"max_keys must be at least 1, got {max_keys!r}")
        self._clock = clock
        self._sleep = sleep
        self._max_keys = max_keys
        self._tats: dict[str, int] = {}
        self._holds: dict[str, int] = {}
        self._pairs: dict[tuple[str, str], int] = {}

    def _now(self) -> int:
        return round(self._clock() * _US_PER_S)

    @property
    def key_count(self) -> int:
        """How many entries are held now (for tests and metrics)."""
        return len(self._tats) + len(self._holds) + len(self._pairs)

    async def acquire(self, channel_id: str, rate: int, wanted: int) -> int:
        _check_acquire(rate, wanted)
        pace = _Pace.of(rate, wanted)
        while True:
            now = self._now()
            hold_until = self._holds.get(channel_id, 0)
            stored = self._tats.get(channel_id, 0)
            granted, wait, tat = _grant(stored, hold_until, now, pace, wanted)
            if granted:
                if channel_id not in self._tats:
                    self._make_room(now)
                self._tats[channel_id] = tat
                if hold_until and hold_until + pace.burst <= now:
                    del self._holds[channel_id]
                return granted
            await self._sleep(wait / _US_PER_S)

    async def hold(self, channel_id: str, seconds: float) -> None:
        wait = _check_seconds(seconds)
        now = self._now()
        if channel_id not in self._holds:
            self._make_room(now)
        self._holds[channel_id] = max(self._holds.get(channel_id, 0), now + wait)

    async def recipient_wait(self, channel_id: str, recipient: str) -> float:
        return (await self.recipient_waits(channel_id, [recipient]))[0]

    async def recipient_waits(self, channel_id: str, recipients: Sequence[str]) -> list[float]:
        now = self._now()
        waits: list[float] = []
        for recipient in recipients:
            key = (channel_id, recipient)
            wait, tat = _pair_step(self._pairs.get(key, 0), now)
            if wait == 0:
                if key not in self._pairs:
                    self._make_room(now)
                self._pairs[key] = tat
            waits.append(wait / _US_PER_S)
        return waits

    async def pair_limited(self, channel_id: str, recipient: str, seconds: float) -> None:
        wait = _check_seconds(seconds)
        now = self._now()
        key = (channel_id, recipient)
        if key not in self._pairs:
            self._make_room(now)
        self._pairs[key] = _pair_limited_tat(self._pairs.get(key, 0), now, wait)

    def _make_room(self, now: int) -> None:
        """Before adding an entry: once `max_keys` are held, drop those that have run out (a
        full bucket, a past hold: the same as absent), then if still full the buckets ending
        soonest, which forgets the least. Freeing a tenth each time keeps it amortised O(1)."""
        if self.key_count < self._max_keys:
            return
        # A bucket whose TAT has passed is full; a hold matters until its end plus a burst.
        self._tats = {k: v for k, v in self._tats.items() if v > now}
        self._holds = {k: v for k, v in self._holds.items() if v + _US_PER_S > now}
        self._pairs = {k: v for k, v in self._pairs.items() if v > now}
        excess = self.key_count - (self._max_keys - max(1, self._max_keys // 10))
        if excess <= 0:
            return
        buckets: list[tuple[int, dict[Any, int], Any]] = [
            *((tat, self._tats, key) for key, tat in self._tats.items()),
            *((tat, self._pairs, key) for key, tat in self._pairs.items()),
        ]
        for _, entries, key in heapq.nsmallest(excess, buckets, key=lambda item: item[0]):
            del entries[key]


# KEYS[1]: the channel's TAT, KEYS[2]: its hold (end time). ARGV: interval_us, burst_us, wanted,
# need, and optionally a fixed "now" (tests). Mirrors `_grant`. Time is the Redis server's, so
# the clocks of API replicas and workers never matter; TIME before a write is fine under effects
# replication (the only mode since Redis 7). The TAT key lives until the bucket is full again.
_ACQUIRE_LUA: Final = (
    gcra.LUA
    + """
local interval = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local wanted = tonumber(ARGV[3])
local need = tonumber(ARGV[4])
local now
if ARGV[5] then
  now = tonumber(ARGV[5])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local hold_until = tonumber(redis.call('GET', KEYS[2]) or 0)
if hold_until > now then
  return {0, hold_until - now}
end
local stored = tonumber(redis.call('GET', KEYS[1]) or 0)
local allowed, granted, _, wait, tat =
  gcra(stored, now, interval, burst, need, wanted, hold_until + burst)
if allowed == 1 then
  redis.call('SET', KEYS[1], string.format('%.0f', tat),
             'PX', math.max(1, math.ceil((tat - now) / 1000)))
  return {granted, 0}
end
return {0, wait}
"""
)

# KEYS[1]: the channel's hold. ARGV: seconds in microseconds. Keeps the later end; the key
# outlives the hold by a second so the bucket restarts empty (its floor) even after a quiet hold.
_HOLD_LUA: Final = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local hold_until = math.max(tonumber(redis.call('GET', KEYS[1]) or 0), now + tonumber(ARGV[1]))
redis.call('SET', KEYS[1], string.format('%.0f', hold_until),
           'PX', math.ceil((hold_until - now) / 1000) + 1000)
return 1
"""

# KEYS: one pair key per recipient (same order as the answer). ARGV: interval_us, burst_us,
# and optionally a fixed "now". Mirrors `_pair_step`; keys live until the pair's bucket is full.
_PAIR_LUA: Final = (
    gcra.LUA
    + """
local interval = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local now
if ARGV[3] then
  now = tonumber(ARGV[3])
else
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local waits = {}
for i, key in ipairs(KEYS) do
  local allowed, _, _, wait, tat =
    gcra(tonumber(redis.call('GET', key) or 0), now, interval, burst, 1, 1, 0)
  if allowed == 1 then
    redis.call('SET', key, string.format('%.0f', tat),
               'PX', math.max(1, math.ceil((tat - now) / 1000)))
  end
  waits[i] = wait
end
return waits
"""
)

# KEYS[1]: the pair key. ARGV: interval_us, burst_us, wait_us. Mirrors `_pair_limited_tat`.
_PAIR_LIMITED_LUA: Final = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local tat = math.max(tonumber(redis.call('GET', KEYS[1]) or 0),
                     now + tonumber(ARGV[3]) + burst - interval)
redis.call('SET', KEYS[1], string.format('%.0f', tat),
           'PX', math.max(1, math.ceil((tat - now) / 1000)))
return 1
"""


class RedisSendGovernor:
    """The governor every API replica and worker shares: one Lua call (EVALSHA) per step.

    Keys (all expire on their own; `{channel}` is a cluster hash tag, so one channel's keys
    share a slot): `<prefix>{channel}:tat`, `<prefix>{channel}:hold`, and
    `<prefix>{channel}:pair:<recipient>`. Redis errors propagate. The client belongs to the
    caller and is not closed here.
    """

    def __init__(self, redis: Redis, *, prefix: str = "sb:gov:", sleep: Sleep = asyncio.sleep):
        self._prefix = prefix
        self._sleep = sleep
        self._acquire = redis.register_script(_ACQUIRE_LUA)
        self._hold = redis.register_script(_HOLD_LUA)
        self._pair = redis.register_script(_PAIR_LUA)
        self._pair_limited = redis.register_script(_PAIR_LIMITED_LUA)

    def _key(self, channel_id: str, name: str) -> str:
        return f"{self._prefix}{{{channel_id}}}:{name}"

    def pair_key(self, channel_id: str, recipient: str) -> str:
        return self._key(channel_id, f"pair:{recipient}")

    async def acquire(self, channel_id: str, rate: int, wanted: int) -> int:
        _check_acquire(rate, wanted)
        pace = _Pace.of(rate, wanted)
        keys = [self._key(channel_id, "tat"), self._key(channel_id, "hold")]
        args = [pace.interval, pace.burst, wanted, pace.need]
        while True:
            granted, wait = (int(v) for v in await self._acquire(keys=keys, args=args))
            if granted:
                return granted
            await self._sleep(wait / _US_PER_S)

    async def hold(self, channel_id: str, seconds: float) -> None:
        wait = _check_seconds(seconds)
        await self._hold(keys=[self._key(channel_id, "hold")], args=[wait])

    async def recipient_wait(self, channel_id: str, recipient: str) -> float:
        return (await self.recipient_waits(channel_id, [recipient]))[0]

    async def recipient_waits(self, channel_id: str, recipients: Sequence[str]) -> list[float]:
        if not recipients:
            return []
        keys = [self.pair_key(channel_id, recipient) for recipient in recipients]
        waits = await self._pair(keys=keys, args=[_PAIR_INTERVAL_US, _PAIR_BURST_US])
        return [int(wait) / _US_PER_S for wait in waits]

    async def pair_limited(self, channel_id: str, recipient: str, seconds: float) -> None:
        wait = _check_seconds(seconds)
        await self._pair_limited(
            keys=[self.pair_key(channel_id, recipient)],
            args=[_PAIR_INTERVAL_US, _PAIR_BURST_US, wait],
        )


def build_send_governor(redis: Redis | None) -> SendGovernor:
    """Redis when configured (one budget across processes), otherwise this process's own."""
    if redis is None:
        return LocalSendGovernor()
    return RedisSendGovernor(redis)
