"""Live events for GraphQL subscriptions: Redis pub/sub when configured, in-process otherwise.

Workers publish each event once it is committed and fanned out; every API process relays the
events of the subscriber's organization. Delivery is best effort (a subscriber that falls
behind by `QUEUE_LIMIT` events loses the oldest ones, and an event published while Redis fails
is dropped, after the client's timeout); webhooks are the durable channel.

On Redis an API process holds ONE pub/sub connection, on the listening client (no read
timeout, app/kit/redis_clients.py: subscribers may idle for minutes), whatever the number of
subscriptions: the first subscriber of an organization subscribes its channel, the last one
to leave unsubscribes it, and one reader task hands each message to the subscribers of its
channel. A tenant's subscriptions therefore cost queues in memory, never connections another
tenant needs (each organization's count is capped as well: `SubscriptionQuota`).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any, Protocol

import structlog
from redis.asyncio import Redis
from redis.asyncio.client import PubSub

from app.core.jsonutil import loads
from app.kit.quota import KeyedQuota
from app.kit.redis_clients import REDIS_FAILURES, OutageReport

logger = structlog.get_logger("switchboard.events")

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

    async def aclose(self) -> None:
        """Stop listening (the process's resources are closing)."""
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

    async def aclose(self) -> None:
        """Nothing to close: the stream is the process's, shared by its API and worker."""

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


class StreamInterrupted(Exception):
    """The shared pub/sub connection failed: every subscription on it ends."""


class _Inbox:
    """One subscription's queue: event bodies, or the failure that ended the stream."""

    def __init__(self) -> None:
        self.queue = asyncio.Queue[bytes | BaseException](maxsize=QUEUE_LIMIT)

    def put(self, item: bytes | BaseException) -> None:
        if isinstance(item, BaseException):
            while not self.queue.empty():  # a failure is never dropped, it jumps the queue
                self.queue.get_nowait()
        _put_dropping_oldest(self.queue, item)  # type: ignore[arg-type]

    async def get(self) -> bytes:
        item = await self.queue.get()
        if isinstance(item, BaseException):
            raise item
        return item


class RedisEventStream(_Subscribing):
    """Across processes and machines: one channel per organization. Publishes on `redis` (its
    commands time out); listens on `listener` (no read timeout; `redis` when not given) through
    one pub/sub connection for every subscription of the process."""

    def __init__(self, redis: Redis, listener: Redis | None = None) -> None:
        self._redis = redis
        self._listener = listener or redis
        self._publish_failures = OutageReport("event_publish")
        # Channel -> its subscribers' inboxes; the pub/sub connection is subscribed to exactly
        # these channels (changed under `_lock`, so SUBSCRIBE and UNSUBSCRIBE never interleave).
        self._channels: dict[bytes, set[_Inbox]] = {}
        self._lock = asyncio.Lock()
        self._pubsub: PubSub | None = None
        self._reader: asyncio.Task[None] | None = None

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
        channel = (CHANNEL_PREFIX + organization_id).encode()
        inbox = _Inbox()
        await self._join(channel, inbox)
        try:
            yield None
            while True:
                yield loads(await inbox.get())
        finally:
            await self._leave(channel, inbox)

    @property
    def subscriber_count(self) -> int:
        return sum(len(inboxes) for inboxes in self._channels.values())

    async def _join(self, channel: bytes, inbox: _Inbox) -> None:
        async with self._lock:
            inboxes = self._channels.get(channel)
            if inboxes is None:
                pubsub = self._pubsub
                if pubsub is None:
                    pubsub = self._pubsub = self._listener.pubsub()
                try:
                    await pubsub.subscribe(channel)
                except BaseException:
                    if not self._channels:  # nothing else uses it: start afresh next time
                        await self._close_pubsub()
                    raise
                inboxes = self._channels[channel] = set()
                if self._reader is None or self._reader.done():
                    self._reader = asyncio.create_task(self._read(pubsub))
            inboxes.add(inbox)

    async def _leave(self, channel: bytes, inbox: _Inbox) -> None:
        async with self._lock:
            inboxes = self._channels.get(channel)
            if inboxes is None or inbox not in inboxes:
                return  # the connection failed and forgot it already
            inboxes.discard(inbox)
            if inboxes or self._pubsub is None:
                return
            del self._channels[channel]
            with contextlib.suppress(*REDIS_FAILURES):  # the reader notices a dead connection
                await self._pubsub.unsubscribe(channel)

    async def _read(self, pubsub: PubSub) -> None:
        """Hands every message to the subscribers of its channel, until the connection fails."""
        try:
            while True:
                message = await pubsub.get_message(timeout=None)
                if message is None or message["type"] != "message":
                    continue  # (un)subscribe confirmations
                for inbox in self._channels.get(message["channel"], ()):
                    inbox.put(message["data"])
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            logger.warning("event stream connection failed", error=repr(exc))
            async with self._lock:
                if self._pubsub is pubsub:
                    failed, self._channels = self._channels, {}
                    interrupted = StreamInterrupted("the event stream's connection failed")
                    interrupted.__cause__ = exc
                    for inboxes in failed.values():
                        for inbox in inboxes:
                            inbox.put(interrupted)
                    self._reader = None
                    await self._close_pubsub()

    async def _close_pubsub(self) -> None:
        pubsub, self._pubsub = self._pubsub, None
        if pubsub is not None:
            with contextlib.suppress(*REDIS_FAILURES):
                await pubsub.aclose()  # type: ignore[no-untyped-call]

    async def aclose(self) -> None:
        reader, self._reader = self._reader, None
        if reader is not None:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
        async with self._lock:
            self._channels = {}
            await self._close_pubsub()


class PendingRead:
    """Reads a stream with a timeout, keeping one read pending across timeouts: cancelling a
    read would close the stream's generator. The stream's failure is raised by `next`."""

    def __init__(self, stream: AsyncIterator[dict[str, Any]]) -> None:
        self._stream = stream
        self._read: asyncio.Future[dict[str, Any]] | None = None

    async def next(self, within: float) -> dict[str, Any] | None:
        """The next event, or None when none came `within` seconds."""
        if self._read is None:
            self._read = asyncio.ensure_future(anext(self._stream))
        done, _ = await asyncio.wait({self._read}, timeout=within)
        if not done:
            return None
        read, self._read = self._read, None
        return read.result()

    async def close(self) -> None:
        """Cancels the pending read, so the stream's generator is idle and can be closed."""
        if self._read is not None:
            read, self._read = self._read, None
            read.cancel()
            with contextlib.suppress(BaseException):
                await read


class TooManySubscriptions(Exception):
    """The organization holds as many open subscriptions in this process as it may."""

    def __init__(self, limit: int) -> None:
        super().__init__(
            f"The organization has {limit} open subscriptions on this server, the most it may; "
            "close one first"
        )
        self.limit = limit


class SubscriptionQuota:
    """Open subscriptions per organization in one process, at most `per_organization` each,
    so one tenant's sockets can never take what another's subscriptions need."""

    def __init__(self, per_organization: int) -> None:
        self.per_organization = per_organization
        self._open = KeyedQuota(per_organization)

    def open_count(self, organization_id: str) -> int:
        return self._open.held_by(organization_id)

    def take(self, organization_id: str) -> None:
        """One more open subscription, or TooManySubscriptions; `release` gives it back."""
        if not self._open.take(organization_id):
            raise TooManySubscriptions(self.per_organization)

    def release(self, organization_id: str) -> None:
        self._open.release(organization_id)


# The embedded mode's stream: shared by the API and the in-process worker of one process.
LOCAL_EVENT_STREAM = LocalEventStream()
