"""The one GCRA step (app/kit/gcra.py): its Python and Lua versions answer alike, and the
request limits and the send governor are steps of it."""

from __future__ import annotations

import random

import pytest
from redis.asyncio import Redis

from app.kit import gcra
from tests.kit.test_ratelimit import redis_client  # noqa: F401 (fixture)

_STEP_LUA = (
    gcra.LUA
    + """
local a = {}
for i = 1, 7 do a[i] = tonumber(ARGV[i]) end
return {gcra(a[1], a[2], a[3], a[4], a[5], a[6], a[7])}
"""
)


def test_a_full_bucket_grants_its_burst_then_paces() -> None:
    now, interval, burst = 10_000_000, 1_000, 5_000  # 1,000/s, 5 tokens
    first = gcra.step(0, now, interval, burst, 1, 8)
    assert first == gcra.Step(True, 5, 5, 0, now + 5_000)
    empty = gcra.step(first.tat, now, interval, burst, 1, 8)
    assert empty == gcra.Step(False, 0, 0, 1_000, now + 5_000)
    later = gcra.step(first.tat, now + 2_500, interval, burst, 1, 8)
    assert (later.allowed, later.granted) == (True, 2)


def test_need_zero_peeks_without_taking() -> None:
    assert gcra.step(0, 1_000_000, 100, 1_000, 0, 0) == gcra.Step(True, 0, 10, 0, 1_000_000)


def test_a_floor_restarts_the_bucket_empty() -> None:
    now = 5_000_000
    held = gcra.step(0, now, 1_000, 10_000, 1, 1, floor=now + 10_000)
    assert (held.allowed, held.available, held.wait) == (False, 0, 1_000)


@pytest.mark.parametrize("seed", range(4))
async def test_lua_answers_as_python(redis_client: Redis, seed: int) -> None:  # noqa: F811
    rng = random.Random(seed)
    script = redis_client.register_script(_STEP_LUA)
    now = 1_700_000_000_000_000  # epoch-sized microseconds, like Redis TIME
    answers: set[bool] = set()
    for _ in range(200):
        now += rng.choice([0, 1, 999, 20_000, 3_000_000])
        interval = rng.choice([1, 1_000, 12_500, 6_000_000])
        burst = interval * rng.randint(1, 45)
        need = rng.randint(0, 3)
        wanted = need + rng.randint(0, 50)
        stored = rng.choice([0, now - rng.randint(0, 10**7), now + rng.randint(0, 10**8)])
        floor = rng.choice([0, 0, now + rng.randint(-(10**6), 10**6)])
        expected = gcra.step(stored, now, interval, burst, need, wanted, floor)
        reply = await script(args=[stored, now, interval, burst, need, wanted, floor])
        allowed, granted, available, wait, tat = (int(value) for value in reply)
        assert gcra.Step(bool(allowed), granted, available, wait, tat) == expected
        answers.add(expected.allowed)
    assert answers == {True, False}
