"""EndpointGate: the per-endpoint cap and circuit breaker that keep delivery fair."""

from __future__ import annotations

import asyncio

import pytest

from app.webhooks.sender import BUSY_RETRY_SECONDS, MAX_OPEN_SECONDS, EndpointGate


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def gate(clock: Clock) -> EndpointGate:
    return EndpointGate(
        concurrency=2,
        failures_to_open=3,
        open_seconds=10,
        busy_defer_seconds=4,
        slot_wait_seconds=0.05,
        clock=clock,
    )


async def test_a_busy_endpoint_hands_its_slot_to_a_waiter_and_others_go_on(
    gate: EndpointGate,
) -> None:
    assert await gate.admit("a") is None
    assert await gate.admit("a") is None
    waiting = asyncio.ensure_future(gate.admit("a"))
    await asyncio.sleep(0)
    assert await gate.admit("b") is None  # another endpoint is not held up
    gate.release("a", success=True)
    assert await waiting is None  # the freed slot went to the waiter


async def test_an_endpoint_whose_slots_stay_taken_defers(gate: EndpointGate) -> None:
    for _ in range(2):
        assert await gate.admit("a") is None
    wait = await gate.admit("a")  # waited slot_wait_seconds, then deferred briefly (healthy)
    assert wait is not None
    assert BUSY_RETRY_SECONDS / 2 <= wait <= BUSY_RETRY_SECONDS
    gate.release("a", success=False)
    assert await gate.admit("a") is None
    wait = await gate.admit("a")  # a failing endpoint frees slots as attempts time out
    assert wait is not None
    assert 2 <= wait <= 4


async def test_waiters_per_endpoint_are_bounded(gate: EndpointGate) -> None:
    for _ in range(2):
        await gate.admit("a")
    waiters = [asyncio.ensure_future(gate.admit("a")) for _ in range(2)]
    await asyncio.sleep(0)
    third = await gate.admit("a")  # two wait already: deferred at once
    assert third is not None
    assert not any(waiter.done() for waiter in waiters)
    await asyncio.gather(*waiters)


async def test_failures_in_a_row_open_the_circuit_then_one_trial_closes_it(
    gate: EndpointGate, clock: Clock
) -> None:
    for _ in range(3):
        assert await gate.admit("dead") is None
        gate.release("dead", success=False)
    assert gate.is_open("dead")
    wait = await gate.admit("dead")
    assert wait is not None
    assert 10 <= wait <= 11

    clock.now += 10.5  # half-open: one trial at a time
    assert await gate.admit("dead") is None
    assert await gate.admit("dead") is not None
    gate.release("dead", success=True)
    assert not gate.is_open("dead")
    assert await gate.admit("dead") is None
    assert await gate.admit("dead") is None  # closed: the full cap again


async def test_waiters_are_told_to_defer_when_the_circuit_opens(gate: EndpointGate) -> None:
    for _ in range(2):
        await gate.admit("dead")
    gate.release("dead", success=False)
    gate.release("dead", success=False)
    await gate.admit("dead")
    await gate.admit("dead")
    waiter = asyncio.ensure_future(gate.admit("dead"))
    await asyncio.sleep(0)
    gate.release("dead", success=False)  # the third failure in a row
    wait = await waiter
    assert wait is not None
    assert 10 <= wait <= 11


async def test_a_failed_trial_reopens_for_longer_up_to_a_limit(
    gate: EndpointGate, clock: Clock
) -> None:
    for _ in range(3):
        await gate.admit("dead")
        gate.release("dead", success=False)
    waits = []
    for _ in range(10):
        clock.now += MAX_OPEN_SECONDS + 1
        assert await gate.admit("dead") is None  # the trial
        gate.release("dead", success=False)
        wait = await gate.admit("dead")
        assert wait is not None
        waits.append(int(wait))  # whole seconds: the jitter is under one
    assert waits[:3] == [20, 40, 80]
    assert waits[-1] == MAX_OPEN_SECONDS


async def test_a_success_resets_the_failure_count(gate: EndpointGate) -> None:
    for success in (False, False, True, False, False):
        assert await gate.admit("flaky") is None
        gate.release("flaky", success=success)
    assert not gate.is_open("flaky")


async def test_attempts_in_flight_when_it_opens_do_not_extend_the_circuit(
    clock: Clock,
) -> None:
    gate = EndpointGate(
        concurrency=8, failures_to_open=3, open_seconds=10, busy_defer_seconds=4, clock=clock
    )
    for _ in range(6):
        assert await gate.admit("dead") is None
    for _ in range(6):  # three open it, three more were in flight
        gate.release("dead", success=False)
    wait = await gate.admit("dead")
    assert wait is not None
    assert 10 <= wait <= 11
