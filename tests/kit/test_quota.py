"""WaitingQuota: places waited for by key, never all taken by one key."""

from __future__ import annotations

import asyncio

from app.kit.quota import WaitingQuota


async def hold(quota: WaitingQuota, key: str, entered: list[str], leave: asyncio.Event) -> None:
    async with quota.held(key):
        entered.append(key)
        await leave.wait()


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_a_key_at_its_cap_waits_while_another_key_takes_the_free_place() -> None:
    quota = WaitingQuota(per_key=2, total=3)
    entered: list[str] = []
    leave = {name: asyncio.Event() for name in ("a1", "a2", "a3", "b1")}
    tasks = [
        asyncio.create_task(hold(quota, key, entered, leave[name]))
        for name, key in (("a1", "a"), ("a2", "a"), ("a3", "a"), ("b1", "b"))
    ]
    await settle()
    assert entered == ["a", "a", "b"]  # the third "a" waits: its key is at its cap
    assert quota.held_by("a") == 2
    leave["a1"].set()
    await settle()
    assert entered == ["a", "a", "b", "a"]  # the freed place goes to the waiting "a"
    for event in leave.values():
        event.set()
    await asyncio.gather(*tasks)
    assert quota.held_by("a") == quota.held_by("b") == 0


async def test_a_freed_place_goes_to_the_first_waiter_whose_key_may_take_it() -> None:
    quota = WaitingQuota(per_key=1, total=2)
    entered: list[str] = []
    leave = {name: asyncio.Event() for name in ("a1", "b1", "a2", "c1")}
    tasks = []
    for name in ("a1", "b1", "a2", "c1"):
        tasks.append(asyncio.create_task(hold(quota, name[0], entered, leave[name])))
        await settle()
    assert entered == ["a", "b"]
    leave["b1"].set()  # "a2" waited first, but "a" is at its cap: "c" takes the place
    await settle()
    assert entered == ["a", "b", "c"]
    leave["a1"].set()
    await settle()
    assert entered == ["a", "b", "c", "a"]
    for event in leave.values():
        event.set()
    await asyncio.gather(*tasks)


async def a_holder_and_two_waiters() -> tuple[
    WaitingQuota, list[str], dict[str, asyncio.Event], list[asyncio.Task[None]]
]:
    """One place: "a" holds it, then "b" and "c" wait for it, in that order."""
    quota = WaitingQuota(per_key=1, total=1)
    entered: list[str] = []
    leave = {key: asyncio.Event() for key in ("a", "b", "c")}
    tasks = []
    for key in ("a", "b", "c"):
        tasks.append(asyncio.create_task(hold(quota, key, entered, leave[key])))
        await settle()
    return quota, entered, leave, tasks


async def test_a_cancelled_waiter_takes_no_place_with_it() -> None:
    quota, entered, leave, (first, cancelled, last) = await a_holder_and_two_waiters()
    cancelled.cancel()
    await settle()
    leave["a"].set()
    await settle()
    assert entered == ["a", "c"]
    assert cancelled.cancelled()
    leave["c"].set()
    await asyncio.gather(first, last)
    assert quota.held_by("b") == quota.held_by("c") == 0


async def test_a_waiter_cancelled_as_it_is_handed_a_place_gives_it_back() -> None:
    quota, entered, leave, (first, handed, last) = await a_holder_and_two_waiters()
    leave["a"].set()
    await asyncio.sleep(0)  # "a" leaves and hands its place to "b", which has not run yet
    assert quota.held_by("b") == 1
    handed.cancel()
    await settle()
    assert handed.cancelled()
    assert entered == ["a", "c"]  # "b" gave the place back; "c" took it
    leave["c"].set()
    await asyncio.gather(first, last)
    assert quota.held_by("b") == quota.held_by("c") == 0
