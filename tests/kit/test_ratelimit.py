"""Tests for app.kit.ratelimit: parsing, the GCRA rules, and both backends.

Redis tests need TEST_REDIS_URL (e.g. redis://127.0.0.1:6379/15, a dedicated
db: it is flushed). Without it they skip, unless REQUIRE_SERVICES=1.
"""

from __future__ import annotations

import asyncio
import math
import os
import random
import uuid
from collections.abc import AsyncIterator, Callable

import pytest
import pytest_asyncio
from hypothesis import given, settings
from hypothesis import strategies as st
from redis.asyncio import Redis

from app.kit.ratelimit import (
    Decision,
    FallbackRateLimiter,
    MemoryRateLimiter,
    RateLimit,
    RateLimiter,
    RedisRateLimiter,
    build_rate_limiter,
)

US = 1_000_000


class FakeClock:
    """A settable monotonic clock, in seconds like time.monotonic."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def interval_us(limit: RateLimit) -> int:
    """The emission interval the limiter uses: ceil(period / limit) in µs."""
    return math.ceil(round(limit.period * US) / limit.limit)


# --- RateLimit.parse ---------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "limit", "period"),
    [
        ("100/s", 100, 1.0),
        ("6000/m", 6000, 60.0),
        ("100000/h", 100000, 3600.0),
        ("5/d", 5, 86400.0),
        ("50/10s", 50, 10.0),
        ("1/1s", 1, 1.0),
        ("30/15m", 30, 900.0),
        (" 10 / 2h ", 10, 7200.0),
    ],
)
def test_parse_valid(text: str, limit: int, period: float) -> None:
    assert RateLimit.parse(text) == RateLimit(limit=limit, period=period)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "100",
        "/s",
        "100/",
        "100/x",
        "100/S",
        "100/sec",
        "100/ss",
        "s/100",
        "0/s",
        "-1/s",
        "+1/s",
        "1.5/s",
        "100/0s",
        "100/-1s",
        "100/1.5s",
        "100 per second",
        "100/s/s",
    ],
)
def test_parse_invalid(text: str) -> None:
    with pytest.raises(ValueError, match="invalid rate limit"):
        RateLimit.parse(text)


@pytest.mark.parametrize(
    ("limit", "period"),
    [
        (0, 1.0),
        (-1, 1.0),
        (True, 1.0),
        (1, 0.0),
        (1, -1.0),
        (1, math.nan),
        (1, math.inf),
    ],
)
def test_rate_limit_rejects_bad_values(limit: int, period: float) -> None:
    with pytest.raises(ValueError):
        RateLimit(limit=limit, period=period)


# --- MemoryRateLimiter with a fake clock -------------------------------------


@pytest.mark.asyncio
async def test_memory_burst_then_deny() -> None:
    clock = FakeClock()
    limiter = MemoryRateLimiter(clock=clock)
    limit = RateLimit.parse("5/s")

    decisions = [await limiter.hit("k", limit) for _ in range(5)]
    assert [d.allowed for d in decisions] == [True] * 5
    assert [d.remaining for d in decisions] == [4, 3, 2, 1, 0]
    assert all(d.retry_after == 0 for d in decisions)
    assert decisions[-1].reset_after == pytest.approx(1.0)

    denied = await limiter.hit("k", limit)
    assert denied == Decision(allowed=False, remaining=0, retry_after=0.2, reset_after=1.0)


@pytest.mark.asyncio
async def test_memory_refills_at_the_rate() -> None:
    clock = FakeClock()
    limiter = MemoryRateLimiter(clock=clock)
    limit = RateLimit.parse("5/s")
    for _ in range(5):
        await limiter.hit("k", limit)

    clock.advance(0.1)  # half an interval: still nothing
    denied = await limiter.hit("k", limit)
    assert not denied.allowed
    assert denied.retry_after == pytest.approx(0.1)

    clock.advance(denied.retry_after)  # exactly when it said: allowed
    allowed = await limiter.hit("k", limit)
    assert allowed.allowed
    assert allowed.remaining == 0

    clock.advance(0.4)  # two intervals refill two requests
    assert (await limiter.hit("k", limit, cost=0)).remaining == 2

    clock.advance(10)  # full again, never more than the burst
    full = await limiter.hit("k", limit, cost=0)
    assert full == Decision(allowed=True, remaining=5, retry_after=0.0, reset_after=0.0)


@pytest.mark.asyncio
async def test_memory_denied_hits_do_not_consume() -> None:
    clock = FakeClock()
    limiter = MemoryRateLimiter(clock=clock)
    limit = RateLimit.parse("2/s")
    await limiter.hit("k", limit)
    await limiter.hit("k", limit)
    for _ in range(100):  # hammering while denied must not push the wait out
        clock.advance(0.001)
        assert not (await limiter.hit("k", limit)).allowed
    clock.advance(0.5 - 0.1)
    assert (await limiter.hit("k", limit)).allowed


@pytest.mark.asyncio
async def test_memory_cost_greater_than_one() -> None:
    clock = FakeClock()
    limiter = MemoryRateLimiter(clock=clock)
    limit = RateLimit.parse("10/s")

    first = await limiter.hit("k", limit, cost=7)
    assert (first.allowed, first.remaining) == (True, 3)
    assert first.reset_after == pytest.approx(0.7)

    too_much = await limiter.hit("k", limit, cost=4)
    assert (too_much.allowed, too_much.remaining) == (False, 3)
    assert too_much.retry_after == pytest.approx(0.1)

    assert (await limiter.hit("k", limit, cost=3)).allowed
    clock.advance(0.4)
    assert (await limiter.hit("k", limit, cost=4)).allowed
    assert not (await limiter.hit("k", limit, cost=1)).allowed


@pytest.mark.asyncio
async def test_memory_rejects_impossible_costs() -> None:
    limiter = MemoryRateLimiter(clock=FakeClock())
    limit = RateLimit.parse("3/s")
    with pytest.raises(ValueError, match="exceeds the burst"):
        await limiter.hit("k", limit, cost=4)
    with pytest.raises(ValueError, match="non-negative"):
        await limiter.hit("k", limit, cost=-1)
    assert limiter.key_count == 0


@pytest.mark.asyncio
async def test_memory_cost_zero_peeks_without_storing() -> None:
    limiter = MemoryRateLimiter(clock=FakeClock())
    limit = RateLimit.parse("3/s")
    peek = await limiter.hit("k", limit, cost=0)
    assert peek == Decision(allowed=True, remaining=3, retry_after=0.0, reset_after=0.0)
    assert limiter.key_count == 0


@pytest.mark.asyncio
async def test_memory_keys_are_independent() -> None:
    limiter = MemoryRateLimiter(clock=FakeClock())
    limit = RateLimit.parse("2/m")
    assert (await limiter.hit("a", limit)).allowed
    assert (await limiter.hit("a", limit)).allowed
    assert not (await limiter.hit("a", limit)).allowed
    assert (await limiter.hit("b", limit)).remaining == 1
    # The same key under a different limit shares the TAT; callers namespace keys.
    assert limiter.key_count == 2


@pytest.mark.asyncio
async def test_memory_concurrent_hits_allow_exactly_the_burst() -> None:
    limiter = MemoryRateLimiter(clock=FakeClock())
    limit = RateLimit.parse("10/h")
    results = await asyncio.gather(*(limiter.hit("k", limit) for _ in range(50)))
    assert sum(d.allowed for d in results) == 10


@pytest.mark.asyncio
async def test_memory_real_clock_default() -> None:
    limiter = MemoryRateLimiter()
    limit = RateLimit.parse("1/h")
    assert (await limiter.hit("k", limit)).allowed
    assert not (await limiter.hit("k", limit)).allowed
    await limiter.close()
    assert limiter.key_count == 0
    assert (await limiter.hit("k", limit)).allowed


# --- eviction ------------------------------------------------------------------


def count_evictions(limiter: MemoryRateLimiter) -> list[int]:
    """Wrap the limiter's eviction to count sweeps."""
    calls: list[int] = []
    original: Callable[[int], None] = limiter._evict

    def counting(now: int) -> None:
        calls.append(now)
        original(now)

    limiter._evict = counting  # type: ignore[method-assign]
    return calls


@pytest.mark.asyncio
async def test_eviction_keeps_memory_bounded_and_is_amortised() -> None:
    limiter = MemoryRateLimiter(clock=FakeClock(), max_keys=100)
    sweeps = count_evictions(limiter)
    limit = RateLimit.parse("10/h")  # nothing expires during the test
    for i in range(10_000):
        await limiter.hit(f"k{i}", limit)
        assert limiter.key_count <= 100
    # Each sweep frees a tenth of max_keys, so at most one per 10 new keys.
    assert len(sweeps) <= 10_000 // 10


@pytest.mark.asyncio
async def test_eviction_drops_expired_keys_first() -> None:
    clock = FakeClock()
    limiter = MemoryRateLimiter(clock=clock, max_keys=10)
    short, long_ = RateLimit.parse("1/s"), RateLimit.parse("1/h")
    for i in range(5):
        await limiter.hit(f"long{i}", long_)
    for i in range(5):
        await limiter.hit(f"short{i}", short)
    assert limiter.key_count == 10

    clock.advance(2)  # the short buckets are full again: their TAT has passed
    await limiter.hit("new", long_)
    assert limiter.key_count == 6
    for i in range(5):  # live keys were kept, so they are still limited
        assert not (await limiter.hit(f"long{i}", long_)).allowed


@pytest.mark.asyncio
async def test_eviction_of_live_keys_forgets_the_least_debt_first() -> None:
    clock = FakeClock()
    limiter = MemoryRateLimiter(clock=clock, max_keys=10)
    hourly = RateLimit.parse("1/h")
    assert (await limiter.hit("throttled", hourly)).allowed  # owes an hour
    for i in range(1000):  # a flood of keys that each owe 1/100 s
        clock.advance(0.001)
        await limiter.hit(f"flood{i}", RateLimit.parse("100/s"))
        assert limiter.key_count <= 10
    assert not (await limiter.hit("throttled", hourly)).allowed


def test_max_keys_must_be_positive() -> None:
    with pytest.raises(ValueError):
        MemoryRateLimiter(max_keys=0)


# --- properties -------------------------------------------------------------------

limits = st.builds(
    RateLimit,
    limit=st.integers(min_value=1, max_value=20),
    # Tiny periods make the emission interval a few µs, where any rounding
    # in the rate (e.g. floor instead of ceil) adds up to extra hits quickly.
    period=st.sampled_from([0.00001, 0.0001, 0.001, 0.05, 0.3, 1.0, 7.0]),
)


@st.composite
def limit_and_hits(draw: st.DrawFn) -> tuple[RateLimit, list[tuple[int, int]]]:
    """A limit and hits as (µs since the previous hit, cost).

    The largest gap is drawn per sequence: up to one or two emission intervals
    keeps the bucket near empty, where the bounds are tight and rate rounding
    errors add up; longer gaps exercise refilling and idle keys.
    """
    limit = draw(limits)
    t = interval_us(limit)
    max_gap = draw(st.sampled_from([t, 2 * t, 3 * t * limit.limit]))
    gap = st.one_of(st.just(0), st.integers(min_value=0, max_value=max_gap))
    cost = st.integers(min_value=1, max_value=min(3, limit.limit))
    hits = draw(st.lists(st.tuples(gap, cost), min_size=1, max_size=300))
    return limit, hits


def run_sequence(
    limit: RateLimit, gaps_and_costs: list[tuple[int, int]]
) -> list[tuple[int, int, Decision]]:
    """Feed the hits to a fresh memory limiter: (time µs, cost, decision) each."""

    async def scenario() -> list[tuple[int, int, Decision]]:
        clock = FakeClock(0.0)
        limiter = MemoryRateLimiter(clock=clock)
        now, out = 0, []
        for gap, cost in gaps_and_costs:
            now += gap
            clock.now = now / US
            out.append((now, cost, await limiter.hit("k", limit, cost=cost)))
        return out

    return asyncio.run(scenario())


@settings(max_examples=100, deadline=None)
@given(case=limit_and_hits())
def test_property_allowed_cost_in_any_window_is_bounded(
    case: tuple[RateLimit, list[tuple[int, int]]],
) -> None:
    """GCRA bound: in any closed window of w µs, allowed cost <= limit + floor(w / T).

    T = ceil(period / limit) µs is the emission interval, so this also gives
    allowed <= limit + w * limit / period (the burst plus the steady rate).
    The maximum over windows is reached by windows from one allowed hit to
    another, so checking those pairs checks every window.
    """
    limit, hits = case
    t = interval_us(limit)
    allowed = [(now, cost) for now, cost, d in run_sequence(limit, hits) if d.allowed]
    for i, (start, _) in enumerate(allowed):
        total = 0
        for end, cost in allowed[i:]:
            total += cost
            window = end - start
            assert total <= limit.limit + window // t
            assert total <= limit.limit + window * limit.limit / (limit.period * US)


@settings(max_examples=80, deadline=None)
@given(case=limit_and_hits())
def test_property_denied_hits_change_nothing(
    case: tuple[RateLimit, list[tuple[int, int]]],
) -> None:
    """Replaying only the allowed hits gives the same decisions for them."""
    limit, hits = case
    results = run_sequence(limit, hits)
    kept: list[tuple[int, int]] = []
    previous = 0
    for now, cost, decision in results:
        if decision.allowed:
            kept.append((now - previous, cost))
            previous = now
    replay = run_sequence(limit, kept)
    assert [d for _, _, d in replay] == [d for _, _, d in results if d.allowed]


@settings(max_examples=80, deadline=None)
@given(
    limit=limits,
    gaps=st.lists(st.one_of(st.just(0), st.integers(0, 10**7)), max_size=100),
)
def test_property_hits_at_the_rate_are_never_denied(limit: RateLimit, gaps: list[int]) -> None:
    """Hits at least one interval apart are always allowed (no false denials)."""
    t = interval_us(limit)
    results = run_sequence(limit, [(t + gap, 1) for gap in gaps])
    assert all(d.allowed for _, _, d in results)


@settings(max_examples=80, deadline=None)
@given(case=limit_and_hits())
def test_property_decision_fields_are_consistent(
    case: tuple[RateLimit, list[tuple[int, int]]],
) -> None:
    """Remaining, retry_after and reset_after stay within what GCRA allows."""
    limit, hits = case
    for _, _, d in run_sequence(limit, hits):
        assert 0 <= d.remaining <= limit.limit
        assert d.reset_after <= interval_us(limit) * limit.limit / US
        if d.allowed:
            assert d.retry_after == 0
        else:
            assert 0 < d.retry_after <= d.reset_after


# --- build_rate_limiter ---------------------------------------------------------


def test_build_without_redis_is_in_memory() -> None:
    assert isinstance(build_rate_limiter(None), MemoryRateLimiter)


def test_build_with_redis_is_redis_backed_with_a_local_fallback() -> None:
    client = Redis()  # never connects: only the script's SHA is computed
    limiter: RateLimiter = build_rate_limiter(client)
    assert isinstance(limiter, FallbackRateLimiter)
    assert isinstance(limiter.primary, RedisRateLimiter)
    assert isinstance(limiter.fallback, MemoryRateLimiter)


# --- Redis -------------------------------------------------------------------------


@pytest_asyncio.fixture
async def redis_client() -> AsyncIterator[Redis]:
    """A client on TEST_REDIS_URL's dedicated db, flushed before and after."""
    url = os.environ.get("TEST_REDIS_URL")
    if not url:
        if os.environ.get("REQUIRE_SERVICES") == "1":
            pytest.fail("REQUIRE_SERVICES=1 but TEST_REDIS_URL is not set")
        pytest.skip("TEST_REDIS_URL is not set")
    client = Redis.from_url(url)
    db = int(client.connection_pool.connection_kwargs.get("db") or 0)
    if db == 0:
        await client.aclose()
        pytest.fail(f"TEST_REDIS_URL must name a dedicated db (not 0), it is flushed: {url}")
    await client.flushdb()
    try:
        yield client
    finally:
        await client.flushdb()
        await client.aclose()


@pytest.fixture
def prefix() -> str:
    """A key prefix no other test uses."""
    return f"sb:rl:test:{uuid.uuid4().hex}:"


@pytest.mark.asyncio
async def test_redis_burst_deny_and_refill(redis_client: Redis, prefix: str) -> None:
    limiter = RedisRateLimiter(redis_client, prefix=prefix)
    limit = RateLimit.parse("10/s")

    decisions = [await limiter.hit("k", limit) for _ in range(10)]
    assert all(d.allowed for d in decisions)
    assert decisions[0].remaining == 9
    assert decisions[-1].remaining == 0

    denied = await limiter.hit("k", limit)
    assert not denied.allowed
    assert denied.remaining == 0
    # period / limit, minus the few ms the burst itself took.
    assert 0.05 < denied.retry_after <= 0.1
    assert denied.retry_after < denied.reset_after <= 1.0

    await asyncio.sleep(denied.retry_after + 0.01)
    assert (await limiter.hit("k", limit)).allowed


@pytest.mark.asyncio
async def test_redis_key_expires_when_full(redis_client: Redis, prefix: str) -> None:
    limiter = RedisRateLimiter(redis_client, prefix=prefix)
    decision = await limiter.hit("k", RateLimit.parse("6/m"))
    ttl_ms = await redis_client.pttl(prefix + "k")
    assert 0 < ttl_ms <= math.ceil(decision.reset_after * 1000)
    assert ttl_ms > 9_000

    await limiter.hit("idle", RateLimit(limit=1, period=0.05))
    assert await redis_client.exists(prefix + "idle") == 1
    await asyncio.sleep(0.15)
    assert await redis_client.exists(prefix + "idle") == 0


@pytest.mark.asyncio
async def test_redis_cost_and_peek(redis_client: Redis, prefix: str) -> None:
    limiter = RedisRateLimiter(redis_client, prefix=prefix)
    limit = RateLimit.parse("10/h")

    peek = await limiter.hit("k", limit, cost=0)
    assert (peek.allowed, peek.remaining) == (True, 10)
    assert await redis_client.exists(prefix + "k") == 0

    assert (await limiter.hit("k", limit, cost=7)).remaining == 3
    denied = await limiter.hit("k", limit, cost=4)
    assert (denied.allowed, denied.remaining) == (False, 3)
    assert denied.retry_after == pytest.approx(360, abs=1)
    with pytest.raises(ValueError):
        await limiter.hit("k", limit, cost=11)


@pytest.mark.asyncio
async def test_redis_is_atomic_across_replicas(redis_client: Redis, prefix: str) -> None:
    """Two clients (two API replicas) hammering one key get exactly the burst."""
    other = Redis.from_url(os.environ["TEST_REDIS_URL"], decode_responses=True)
    try:
        replicas = [
            RedisRateLimiter(redis_client, prefix=prefix),
            RedisRateLimiter(other, prefix=prefix),
        ]
        limit = RateLimit.parse("10/h")
        results = await asyncio.gather(*(replicas[i % 2].hit("k", limit) for i in range(60)))
        assert sum(d.allowed for d in results) == 10
    finally:
        await other.aclose()


@pytest.mark.asyncio
async def test_redis_hit_is_one_round_trip(redis_client: Redis, prefix: str) -> None:
    limiter = RedisRateLimiter(redis_client, prefix=prefix)
    limit = RateLimit.parse("5/s")
    await limiter.hit("warm", limit)  # loads the script if the server lacks it
    commands: list[object] = []
    original = redis_client.execute_command

    async def recording(*args: object, **options: object) -> object:
        commands.append(args[0])
        return await original(*args, **options)  # type: ignore[no-untyped-call]

    redis_client.execute_command = recording  # type: ignore[method-assign]
    try:
        await limiter.hit("k", limit)
    finally:
        redis_client.execute_command = original  # type: ignore[method-assign]
    assert commands == ["EVALSHA"]


@pytest.mark.asyncio
@pytest.mark.parametrize("seed", range(8))
async def test_redis_matches_memory_decision_for_decision(
    redis_client: Redis, prefix: str, seed: int
) -> None:
    """Same limit and hit times (pinned via the script's test-only `now`): same decisions.

    Periods are long so no key expires in real time (its Redis TTL) while the
    fake time says it is still in use.
    """
    rng = random.Random(seed)
    limit = RateLimit(limit=rng.randint(1, 20), period=rng.choice([10.0, 60.0, 3600.0]))
    step = max(1, interval_us(limit) * 3)
    clock = FakeClock()
    memory = MemoryRateLimiter(clock=clock)
    redis = RedisRateLimiter(redis_client, prefix=prefix)
    now_us = 1_700_000_000 * US  # epoch-sized, like Redis TIME
    outcomes: set[bool] = set()
    for _ in range(300):
        now_us += rng.choice([0, 0, rng.randint(0, step)])
        cost = rng.randint(0, min(3, limit.limit))
        key = rng.choice(["a", "b"])
        clock.now = now_us / US
        expected = await memory.hit(key, limit, cost)
        actual = await redis._hit(key, limit, cost, now_us)
        assert actual == expected
        outcomes.add(actual.allowed)
    assert outcomes == {True, False}  # the sequence exercised both branches
