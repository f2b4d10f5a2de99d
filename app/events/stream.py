"""Live events for GraphQL subscriptions: Redis pub/sub when configured, in-process otherwise.

Workers publish each event once it is committed and fanned out; every API process relays the
events of the subscriber's organization. Delivery is best effort (a subscriber that falls
behind by `QUEUE_LIMIT` events loses the oldest ones, and an event published while Redis fails
is dropped, after the client's timeout); webhooks are the durable channel. Subscribers listen
on a client without a read timeout (app/kit/redis_clients.py): they may idle for minutes.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any, Protocol

from redis.asyncio import Redis

from app.kit.jsonutil import loads
from app.kit.redis_clients import REDIS_FAILURES, OutageReport

CHANNEL_PREFIX = "switchboard:events:"
QUEUE_LIMIT = 1000


class EventStream(Protocol):
    async def publish(self, organization_id: str, body: bytes) -> None: ...

    async def publish_many(self, messages: list[tuple[str, bytes]]) -> None:
        """`publish` for a batch of (organization id, body), in order."""
        ...

    def subscribe(self, organization_id: str) -> AsyncIterator[dict[str, Any]]:
        """The organization's events, from when iteration starts (the subscription is made
        then)."""
        ...

    async def open(self, organization_id: str) -> AsyncGenerator[dict[str, Any], None]:
        """Subscribed on return: every event published from now on is kept for the caller,
        who may read a snapshot first and then iterate (and `aclose()` the iterator)."""
        ...


class _Subscribing:
    """`subscribe` and `open` on top of a stream's `_listen`, a generator that yields None
    once it is subscribed, then the events."""

    def _listen(self, organization_id: str) -> AsyncGenerator[dict[str, Any] | None, None]:
        raise NotImplementedError

    async def subscribe(self, organization_id: str) -> AsyncIterator[dict[str, Any]]:
        listener = self._listen(organization_id)
        try:
            async for body in listener:
                if body is not None:
                    yield body
        finally:
            await listener.aclose()  # unsubscribes now, not when garbage collected

    async def open(self, organization_id: str) -> AsyncGenerator[dict[str, Any], None]:
        listener = self._listen(organization_id)
        await anext(listener)  # runs up to the subscription; started, so aclose() undoes it
        return listener  # type: ignore[return-value]  # only the first item is None


class LocalEventStream(_Subscribing):
    """One process: the embedded worker publishes from its own thread and event loop."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._subscribers: dict[
            str, set[tuple[asyncio.AbstractEventLoop, asyncio.Queue[bytes]]]
        ] = {}

    async def publish(self, organization_id: str, body: bytes) -> None:
        with self._lock:
            targets = list(self._subscribers.get(organization_id, ()))
        for loop, queue in targets:
            loop.call_soon_threadsafe(_put_dropping_oldest, queue, body)

    async def publish_many(self, messages: list[tuple[str, bytes]]) -> None:
        for organization_id, body in messages:
            await self.publish(organization_id, body)

    async def _listen(self, organization_id: str) -> AsyncGenerator[dict[str, Any] | None, None]:
        entry = (asyncio.get_running_loop(), asyncio.Queue[bytes](maxsize=QUEUE_LIMIT))
        with self._lock:
            self._subscribers.setdefault(organization_id, set()).add(entry)
        try:
            yield None
            while True:
                yield loads(await entry[1].get())
        finally:
            with self._lock:
                subscribers = self._subscribers.get(organization_id)
                if subscribers is not None:
                    subscribers.discard(entry)
                    if not subscribers:
                        del self._subscribers[organization_id]


def _put_dropping_oldest(queue: asyncio.Queue[bytes], body: bytes) -> None:
    if queue.full():
        queue.get_nowait()
    queue.put_nowait(body)


class RedisEventStream(_Subscribing):
    """Across processes and machines: one channel per organization. Publishes on `redis` (its
    commands time out), listens on `listener` (no read timeout; `redis` when not given)."""

    def __init__(self, redis: Redis, listener: Redis | None = None) -> None:
        self._redis = redis
        self._listener = listener or redis
        self._publish_failures = OutageReport("event_publish")

    async def publish(self, organization_id: str, body: bytes) -> None:
        """Best effort: while Redis fails, the live copy of the event is dropped."""
        try:
            await self._redis.publish(CHANNEL_PREFIX + organization_id, body)
        except REDIS_FAILURES as exc:
            self._publish_failures.failed(exc, "event dropped")

    async def publish_many(self, messages: list[tuple[str, bytes]]) -> None:
        """One round trip for the batch (a pipeline, not a transaction)."""
        if len(messages) == 1:
            await self.publish(*messages[0])
            return
        async with self._redis.pipeline(transaction=False) as pipe:
            for organization_id, body in messages:
                pipe.publish(CHANNEL_PREFIX + organization_id, body)
            await pipe.execute()

    async def _listen(self, organization_id: str) -> AsyncGenerator[dict[str, Any] | None, None]:
        pubsub = self._listener.pubsub()
        await pubsub.subscribe(CHANNEL_PREFIX + organization_id)
        try:
            yield None
            async for message in pubsub.listen():
                if message.get("type") == "message":
                    yield loads(message["data"])
        finally:
            await pubsub.unsubscribe()
            await pubsub.aclose()  # type: ignore[no-untyped-call]


# The embedded mode's stream: shared by the API and the in-process worker of one process.
LOCAL_EVENT_STREAM = LocalEventStream()
