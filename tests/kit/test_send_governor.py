"""The send governor (app/kit/send_governor.py): pacing, batched grants, holds, the pair rate,
bounded state; in one process (on a fake clock) and shared through Redis (on real time).

Real-time assertions bound what a governor can never do (send faster than its rate, return
before a hold ends): a loaded machine only makes things slower, so those bounds cannot flake.
Upper bounds on time are kept loose for the same reason.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import random
import time
import uuid
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from redis.asyncio import Redis

from app.kit.send_governor import (
    PAIR_BURST,
    PAIR_INTERVAL_SECONDS,
    LocalSendGovernor,
    RedisSendGovernor,
    SendGovernor,
    _grant,
    _Pace,
    _pair_step,
    build_send_governor,
    throughput_backoff,
)


class FakeTime:
    """A clock that only moves when the governor sleeps."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        assert seconds > 0
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.fixture
def fake() -> FakeTime:
    return FakeTime()


@pytest.fixture
def local(fake: FakeTime) -> LocalSendGovernor:
    return LocalSendGovernor(clock=fake.clock, sleep=fake.sleep)


# --- one process, fake clock -----------------------------------------------------------------


async def test_paces_at_the_rate_after_a_tenth_of_a_second_burst(
    local: LocalSendGovernor, fake: FakeTime
) -> None:
    start = fake.now
    granted_at: list[float] = []
    for _ in range(200):
        assert await local.acquire("ch", 100, 1) == 1
        granted_at.append(fake.now - start)
    # 10 at once (0.1 s of budget), then one every 10 ms: the 200th at 1.9 s.
    assert granted_at[:10] == [0.0] * 10
    assert granted_at[-1] == pytest.approx(1.9, abs=1e-5)
    for earlier, later in itertools.pairwise(granted_at[10:]):
        assert later - earlier == pytest.approx(0.01, abs=1e-5)


async def test_many_wanted_are_granted_in_batches(local: LocalSendGovernor, fake: FakeTime) -> None:
    start, total, steps = fake.now, 0, 0
    grants = []
    while total < 1000:
        granted = await local.acquire("ch", 1000, 1000)
        grants.append(granted)
        total += granted
        steps += 1
    # 100 at once, then batches of 20 ms worth: ~46 steps for 1,000 sends, never one each.
    assert grants[0] == 100
    assert set(grants[1:-1]) == {20}
    assert steps <= 50
    assert fake.now - start == pytest.approx(0.9, abs=0.021)


async def test_a_small_want_is_never_made_to_wait_for_a_batch(
    local: LocalSendGovernor, fake: FakeTime
) -> None:
    assert await local.acquire("ch", 1000, 1000) == 100  # the bucket is now empty
    before = fake.now
    assert await local.acquire("ch", 1000, 1) == 1
    assert fake.now - before == pytest.approx(0.001, abs=1e-5)  # one interval, not a batch


async def test_channels_have_their_own_budgets(local: LocalSendGovernor, fake: FakeTime) -> None:
    assert await local.acquire("a", 80, 80) == 8
    assert await local.acquire("b", 80, 80) == 8
    assert fake.sleeps == []


async def test_hold_stops_the_channel_and_it_restarts_empty(
    local: LocalSendGovernor, fake: FakeTime
) -> None:
    await local.acquire("ch", 100, 1)
    await local.hold("ch", 2.0)
    await local.hold("ch", 0.5)  # a shorter hold never cuts a longer one short
    held_from = fake.now
    assert await local.acquire("ch", 100, 100) == 2
    # Nothing before the hold ends; then the bucket fills from empty (2 sends = 20 ms).
    assert fake.now - held_from == pytest.approx(2.02, abs=1e-5)
    other = await local.acquire("other", 100, 100)
    assert other == 10  # another channel is not held


async def test_hold_rejects_a_bad_duration(local: LocalSendGovernor) -> None:
    for seconds in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError):
            await local.hold("ch", seconds)


@pytest.mark.parametrize(("rate", "wanted"), [(0, 1), (1, 0), (-3, 5), (True, 1), (5, 2.0)])
async def test_acquire_rejects_bad_arguments(
    local: LocalSendGovernor, rate: object, wanted: object
) -> None:
    with pytest.raises(ValueError):
        await local.acquire("ch", rate, wanted)  # type: ignore[arg-type]


async def test_cancelled_acquire_takes_nothing() -> None:
    governor = LocalSendGovernor()
    assert await governor.acquire("ch", 10, 10) == 1  # capacity 1 at 10/s: now empty
    before = governor._tats["ch"]
    waiting = asyncio.create_task(governor.acquire("ch", 10, 1))
    await asyncio.sleep(0.01)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert governor._tats["ch"] == before  # the cancelled waiter took no turn


async def test_pair_rate_allows_a_burst_of_45_then_one_per_6_s(
    local: LocalSendGovernor, fake: FakeTime
) -> None:
    waits = [await local.recipient_wait("ch", "+14155550100") for _ in range(PAIR_BURST)]
    assert waits == [0.0] * PAIR_BURST
    assert await local.recipient_wait("ch", "+14155550100") == pytest.approx(PAIR_INTERVAL_SECONDS)
    # A wait that is not 0 records nothing: asking again gives the same answer.
    assert await local.recipient_wait("ch", "+14155550100") == pytest.approx(PAIR_INTERVAL_SECONDS)
    assert await local.recipient_wait("ch", "+14155550199") == 0.0  # another recipient
    assert await local.recipient_wait("other", "+14155550100") == 0.0  # another channel
    fake.now += PAIR_INTERVAL_SECONDS
    assert await local.recipient_wait("ch", "+14155550100") == 0.0
    assert await local.recipient_wait("ch", "+14155550100") == pytest.approx(PAIR_INTERVAL_SECONDS)


async def test_pair_limited_pushes_the_next_send_out(
    local: LocalSendGovernor, fake: FakeTime
) -> None:
    await local.pair_limited("ch", "+14155550100", 30.0)
    assert await local.recipient_wait("ch", "+14155550100") == pytest.approx(30.0)
    fake.now += 30.0
    assert await local.recipient_wait("ch", "+14155550100") == 0.0
    # Throttled by the platform, the recipient does not get its burst back at once.
    assert await local.recipient_wait("ch", "+14155550100") == pytest.approx(PAIR_INTERVAL_SECONDS)


async def test_recipient_waits_answers_in_order(local: LocalSendGovernor) -> None:
    await local.pair_limited("ch", "+2", 12.0)
    waits = await local.recipient_waits("ch", ["+1", "+2", "+3", "+1"])
    assert waits == [0.0, pytest.approx(12.0), 0.0, 0.0]
    assert await local.recipient_waits("ch", []) == []


async def test_local_state_is_bounded(fake: FakeTime) -> None:
    governor = LocalSendGovernor(clock=fake.clock, sleep=fake.sleep, max_keys=50)
    for i in range(500):
        await governor.recipient_wait("ch", f"+1415555{i:04d}")
        await governor.acquire(f"ch{i}", 80, 1)
        assert governor.key_count <= 50


def test_throughput_backoff() -> None:
    assert throughput_backoff(3.0, 5) == 3.0  # the platform's hint wins
    assert throughput_backoff(600.0, 1) == 60.0
    assert 0.9 <= throughput_backoff(None, 1) <= 1.0
    assert 3.6 <= throughput_backoff(None, 3) <= 4.0
    assert 54 <= throughput_backoff(None, 40) <= 60.0
    assert 0.9 <= throughput_backoff(0.0, 1) <= 1.0


def test_build_without_redis_is_local() -> None:
    assert isinstance(build_send_governor(None), LocalSendGovernor)
    assert isinstance(build_send_governor(Redis()), RedisSendGovernor)  # never connects


async def test_local_concurrent_senders_never_exceed_the_rate() -> None:
    """Real time: four tasks draw from one channel; no second holds more than its share."""
    governor = LocalSendGovernor()
    stamps = await _draw([governor] * 4, rate=200, total=500, wanted=7)
    _assert_paced(stamps, rate=200, total=500)


# --- shared through Redis, real time -----------------------------------------------------------


@pytest_asyncio.fixture
async def redis_url() -> AsyncIterator[str]:
    """TEST_REDIS_URL's dedicated db, flushed before and after."""
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
    await client.aclose()
    yield url
    client = Redis.from_url(url)
    await client.flushdb()
    await client.aclose()


@pytest_asyncio.fixture
async def clients(redis_url: str) -> AsyncIterator[tuple[Redis, Redis]]:
    """Two clients, as two processes (an API replica and a worker) would have."""
    first, second = Redis.from_url(redis_url), Redis.from_url(redis_url)
    yield first, second
    await first.aclose()
    await second.aclose()


@pytest.fixture
def prefix() -> str:
    return f"sb:gov:test:{uuid.uuid4().hex}:"


async def test_redis_paces_at_the_rate(clients: tuple[Redis, Redis], prefix: str) -> None:
    governor = RedisSendGovernor(clients[0], prefix=prefix)
    stamps = await _draw([governor], rate=100, total=200, wanted=1)
    _assert_paced(stamps, rate=100, total=200)


async def test_two_redis_governors_share_one_budget(
    clients: tuple[Redis, Redis], prefix: str
) -> None:
    api = RedisSendGovernor(clients[0], prefix=prefix)
    worker = RedisSendGovernor(clients[1], prefix=prefix)
    # Two senders in each "process"; separate budgets would finish in half the time.
    stamps = await _draw([api, api, worker, worker], rate=100, total=300, wanted=5)
    _assert_paced(stamps, rate=100, total=300)


async def test_redis_grants_in_batches(clients: tuple[Redis, Redis], prefix: str) -> None:
    governor = RedisSendGovernor(clients[0], prefix=prefix)
    steps = _count_scripts(clients[0])
    total = 0
    started = time.monotonic()
    while total < 1000:
        total += await governor.acquire("ch", 1000, 1000)
    elapsed = time.monotonic() - started
    assert elapsed >= 0.9 - 0.02
    # ~46 round trips at 1,000/s on a quiet machine; a slow one sleeps longer and takes more
    # per step, so this bound holds either way. One per message would be 1,000.
    assert steps.count <= 120, steps.count
    steps.restore()


async def test_redis_hold_is_seen_by_every_process(
    clients: tuple[Redis, Redis], prefix: str
) -> None:
    api = RedisSendGovernor(clients[0], prefix=prefix)
    worker = RedisSendGovernor(clients[1], prefix=prefix)
    assert await worker.acquire("ch", 100, 100) == 10
    await api.hold("ch", 0.6)
    started = time.monotonic()
    assert await worker.acquire("ch", 100, 100) >= 2
    # Not before the hold ends, and then from an empty bucket: 2 sends' worth (20 ms) later.
    assert time.monotonic() - started >= 0.62 - 0.01
    hold_ttl = await clients[0].pttl(f"{prefix}{{ch}}:hold")
    assert 0 < hold_ttl <= 1000  # the hold's end plus a second, no more


async def test_redis_keys_expire(clients: tuple[Redis, Redis], prefix: str) -> None:
    governor = RedisSendGovernor(clients[0], prefix=prefix)
    await governor.acquire("ch", 1000, 1000)
    # Lives until the bucket is full again (0.1 s here): a full bucket is the absent key.
    assert await clients[0].pttl(f"{prefix}{{ch}}:tat") in (*range(1, 101), -2)
    await governor.hold("ch", 5.0)
    await governor.recipient_waits("ch", [f"+1415555{i:04d}" for i in range(200)])
    await governor.pair_limited("ch", "+14155550999", 30.0)
    keys = [key for key in await clients[0].keys(f"{prefix}*") if not key.endswith(b":tat")]
    assert len(keys) == 202
    ttls = {key.decode(): await clients[0].pttl(key) for key in keys}
    assert all(ttl > 0 for ttl in ttls.values()), ttls  # every key goes away on its own
    assert 5000 < ttls[f"{prefix}{{ch}}:hold"] <= 6000
    assert ttls[f"{prefix}{{ch}}:pair:+14155550000"] <= PAIR_INTERVAL_SECONDS * 1000
    assert ttls[f"{prefix}{{ch}}:pair:+14155550999"] <= (30 + PAIR_BURST * 6) * 1000


async def test_redis_pair_rate_across_processes(clients: tuple[Redis, Redis], prefix: str) -> None:
    api = RedisSendGovernor(clients[0], prefix=prefix)
    worker = RedisSendGovernor(clients[1], prefix=prefix)
    first = await api.recipient_waits("ch", ["+14155550100"] * 30)
    second = await worker.recipient_waits("ch", ["+14155550100"] * 15)
    assert first + second == [0.0] * PAIR_BURST
    wait = await worker.recipient_wait("ch", "+14155550100")
    assert PAIR_INTERVAL_SECONDS - 1 < wait <= PAIR_INTERVAL_SECONDS
    await worker.pair_limited("ch", "+14155550101", 20.0)
    assert 19 < await api.recipient_wait("ch", "+14155550101") <= 20


@pytest.mark.parametrize("seed", range(6))
async def test_redis_script_matches_the_local_decisions(
    clients: tuple[Redis, Redis], prefix: str, seed: int
) -> None:
    """The Lua scripts mirror `_grant` and `_pair_step`: same inputs (a pinned "now"), same
    answers, over random sequences of asks and holds."""
    rng = random.Random(seed)
    redis = clients[0]
    governor = RedisSendGovernor(redis, prefix=prefix)
    tat_key, hold_key = f"{prefix}{{ch}}:tat", f"{prefix}{{ch}}:hold"
    pair_key = f"{prefix}{{ch}}:pair:+1"
    # Far in the future so no key expires (real TTL) while the pinned time says it is in use.
    now = int(time.time() * 1_000_000) + 10**12
    tat = hold_until = pair_tat = 0
    for _ in range(120):
        now += rng.choice([0, 1, 500, 3_000, 12_500, 100_000, 2_000_000])
        if rng.random() < 0.05:
            hold_until = max(hold_until, now + rng.randint(1, 3_000_000))
            await redis.set(hold_key, hold_until)
        rate, wanted = rng.choice([1, 3, 80, 333, 1000]), rng.randint(1, 300)
        pace = _Pace.of(rate, wanted)
        expected_granted, expected_wait, tat = _grant(tat, hold_until, now, pace, wanted)
        reply = await governor._acquire(
            keys=[tat_key, hold_key], args=[pace.interval, pace.burst, wanted, pace.need, now]
        )
        assert [int(v) for v in reply] == [expected_granted, expected_wait]
        expected_pair, pair_tat = _pair_step(pair_tat, now)
        (pair_reply,) = await governor._pair(
            keys=[pair_key], args=[int(PAIR_INTERVAL_SECONDS * 1e6), PAIR_BURST * 6_000_000, now]
        )
        assert int(pair_reply) == expected_pair


# --- helpers --------------------------------------------------------------------------------


async def _draw(senders: list[SendGovernor], *, rate: int, total: int, wanted: int) -> list[float]:
    """Every sender acquires until `total` sends were granted between them: the start, then
    the monotonic time of each granted send."""
    stamps: list[float] = []
    remaining = total

    async def sender(each: SendGovernor) -> None:
        nonlocal remaining
        while remaining > 0:
            granted = await each.acquire("ch", rate, min(wanted, max(1, remaining)))
            remaining -= granted
            stamps.extend([time.monotonic()] * granted)

    started = time.monotonic()
    await asyncio.gather(*(sender(each) for each in senders))
    return [started, *stamps]


def _assert_paced(stamps: list[float], *, rate: int, total: int) -> None:
    """The granted sends took at least (total - burst) / rate seconds, never more than a
    second's budget plus the burst left within any one second, and not wildly longer than
    the rate implies."""
    started, grants = stamps[0], sorted(stamps[1:])
    assert len(grants) >= total
    burst = max(1, rate // 10)
    elapsed = grants[total - 1] - started
    ideal = (total - burst) / rate
    assert elapsed >= ideal - 0.02, (elapsed, ideal)
    assert elapsed <= ideal * 3 + 2, (elapsed, ideal)  # loose: a loaded machine is slow
    # Any one-second window: at most a second of budget plus the burst (and the senders'
    # overshoot of their last step), with slack for stamps taken after the grant.
    ceiling = rate + burst + rate // 4
    for index, at in enumerate(grants):
        within = sum(1 for later in grants[index:] if later - at < 1.0)
        assert within <= ceiling, (within, ceiling)


class _ScriptCounter:
    def __init__(self, client: Redis) -> None:
        self.client = client
        self.count = 0
        self.original = client.execute_command

        async def counting(*args: object, **options: object) -> object:
            if args and args[0] in ("EVALSHA", "EVAL"):
                self.count += 1
            return await self.original(*args, **options)  # type: ignore[no-untyped-call]

        client.execute_command = counting  # type: ignore[method-assign]

    def restore(self) -> None:
        self.client.execute_command = self.original  # type: ignore[method-assign]


def _count_scripts(client: Redis) -> _ScriptCounter:
    return _ScriptCounter(client)
