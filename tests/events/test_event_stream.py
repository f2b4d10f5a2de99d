"""The Redis event stream holds one pub/sub connection per process, whatever the number of
subscriptions (app/kit/event_stream.py).

The issue's reproduction: an API process's listening pool held 100 connections and each
`events` subscription took one, so org A's 10 sockets x 10 subscriptions made org B's next
subscription fail at once (MaxConnectionsError, `stream_interrupted`). Scaled down here to a
pool of 2 and 20 subscriptions: every one of them, of either organization, gets its own
organization's events and nothing else, over one connection.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
from redis.asyncio import Redis

from app.core.jsonutil import dumps
from app.kit.event_stream import CHANNEL_PREFIX, RedisEventStream, StreamInterrupted
from tests.events.test_graphql_subscription import _redis_url
from tests.workers.tcp_proxy import SilentableProxy, silentable_proxy

pytestmark = pytest.mark.redis

WAIT_SECONDS = 5.0


@pytest.fixture
async def redis_url() -> str:
    return await _redis_url()


@pytest.fixture
async def direct(redis_url: str) -> AsyncIterator[Redis]:
    client = Redis.from_url(redis_url)
    yield client
    await client.aclose()


@pytest.fixture
async def proxied_url(redis_url: str) -> AsyncIterator[tuple[str, SilentableProxy]]:
    """A URL of the same Redis through a proxy the test can sever."""
    parts = urlsplit(redis_url)
    async with silentable_proxy(parts.hostname or "127.0.0.1", parts.port or 6379) as proxy:
        yield urlunsplit(parts._replace(netloc=f"127.0.0.1:{proxy.port}")), proxy


def organization() -> str:
    return f"org-{uuid.uuid4().hex}"


async def numsub(client: Redis, organization_id: str) -> int:
    [(_channel, count)] = await client.pubsub_numsub(CHANNEL_PREFIX + organization_id)
    return int(count)


async def until(check: Any) -> None:
    deadline = asyncio.get_running_loop().time() + WAIT_SECONDS
    while not await check():
        assert asyncio.get_running_loop().time() < deadline, "never happened"
        await asyncio.sleep(0.01)


class Subscriber:
    """One subscription, read by a task of its own."""

    def __init__(self, stream: RedisEventStream, organization_id: str) -> None:
        self.organization_id = organization_id
        self.iterator: AsyncIterator[dict[str, Any]] = stream.subscribe(organization_id)
        self.received: list[dict[str, Any]] = []
        self.task = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for body in self.iterator:
            self.received.append(body)

    async def close(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)
        await self.iterator.aclose()  # type: ignore[attr-defined]


@pytest.fixture
async def small_pool(redis_url: str) -> AsyncIterator[Redis]:
    """The listening client with a pool of 2 connections (100 in production)."""
    listener = Redis.from_url(redis_url, max_connections=2)
    yield listener
    await listener.aclose()


async def test_every_subscription_shares_one_connection(
    redis_url: str, direct: Redis, small_pool: Redis
) -> None:
    publisher = Redis.from_url(redis_url)
    stream = RedisEventStream(publisher, small_pool)
    org_a, org_b = organization(), organization()
    subscribers = [Subscriber(stream, org_a) for _ in range(10)]
    subscribers += [Subscriber(stream, org_b) for _ in range(10)]
    try:
        await until(lambda: _probed(stream, subscribers, [org_a, org_b]))
        # One connection, subscribed once to each organization's channel.
        assert await numsub(direct, org_a) == 1
        assert await numsub(direct, org_b) == 1
        await stream.publish(org_a, dumps({"id": "evt_a"}))
        await stream.publish(org_b, dumps({"id": "evt_b"}))
        await until(lambda: _all_received(subscribers))
        for subscriber in subscribers:
            expected = "evt_a" if subscriber.organization_id == org_a else "evt_b"
            assert [body["id"] for body in subscriber.received[-1:]] == [expected]
            assert {body["id"] for body in subscriber.received[:-1]} <= {"probe_" + expected[-1]}

        # The last subscriber of an organization to leave unsubscribes its channel.
        for subscriber in subscribers[:9]:
            await subscriber.close()
        assert await numsub(direct, org_a) == 1
        await subscribers[9].close()
        await until(lambda: _numsub_is(direct, org_a, 0))
        assert await numsub(direct, org_b) == 1
    finally:
        for subscriber in subscribers:
            await subscriber.close()
        await stream.aclose()
        await publisher.aclose()
    assert await numsub(direct, org_b) == 0


async def test_a_dropped_connection_ends_every_subscription_and_the_next_reconnects(
    redis_url: str, proxied_url: tuple[str, SilentableProxy]
) -> None:
    url, proxy = proxied_url
    publisher = Redis.from_url(redis_url)
    listener = Redis.from_url(url)
    stream = RedisEventStream(publisher, listener)
    org = organization()
    first, second = Subscriber(stream, org), Subscriber(stream, org)
    try:
        await until(lambda: _subscribed(stream, 2))
        proxy.sever()
        for subscriber in (first, second):
            with pytest.raises(StreamInterrupted):
                await asyncio.wait_for(subscriber.task, WAIT_SECONDS)
        assert stream.subscriber_count == 0

        again = Subscriber(stream, org)
        await until(lambda: _subscribed(stream, 1))

        async def delivered() -> bool:
            await stream.publish(org, dumps({"id": "evt_again"}))
            await asyncio.sleep(0.05)
            return bool(again.received)

        await until(delivered)
        await again.close()
    finally:
        await first.close()
        await second.close()
        await stream.aclose()
        await publisher.aclose()
        await listener.aclose()


async def _subscribed(stream: RedisEventStream, count: int) -> bool:
    return stream.subscriber_count == count


async def _probed(stream: RedisEventStream, subscribers: list[Subscriber], orgs: list[str]) -> bool:
    """Every subscription is live once each has relayed a probe (subscribing is asynchronous);
    probes name their organization's letter, so a wrong delivery shows."""
    for org, letter in zip(orgs, "ab", strict=True):
        await stream.publish(org, dumps({"id": f"probe_{letter}"}))
    await asyncio.sleep(0.02)
    return all(subscriber.received for subscriber in subscribers)


async def _all_received(subscribers: list[Subscriber]) -> bool:
    return all(
        any(not body["id"].startswith("probe_") for body in subscriber.received)
        for subscriber in subscribers
    )


async def _numsub_is(client: Redis, organization_id: str, count: int) -> bool:
    return await numsub(client, organization_id) == count
