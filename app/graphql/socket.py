"""The websocket side of the GraphQL endpoint, for every domain's subscriptions.

`SocketContext` is the context of one graphql-transport-ws connection; `LiveEvents` is one
subscription's share of the organization's event stream (app/kit/event_stream.py), counted
against the organization's open subscriptions in this process. The `events` subscription
(app/events/graphql.py) and the calls' and campaigns' progress subscriptions build on them,
and `follow_live` is the one loop and error path all three run.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import structlog
from graphql import GraphQLError
from sqlalchemy.ext.asyncio import AsyncSession

from app.access.credentials import resolve_credential
from app.access.subject import Subject
from app.graphql.context import Context
from app.graphql.errors import Unauthenticated, as_graphql_error
from app.kit.errors import DomainError
from app.kit.event_stream import TooManySubscriptions

logger = structlog.get_logger("switchboard.graphql")

T = TypeVar("T")

# A subscription outlives the handshake that checked its credential: before sending an event,
# the credential is checked again if its last check is older than this, so a revoked key or an
# expired JWT stops receiving events within this delay.
RECHECK_SECONDS = 5.0

SUBSCRIPTIONS_OVER_WEBSOCKET = (
    "Subscriptions are served over WebSocket (graphql-transport-ws) at /graphql, not over POST"
)


@dataclass
class SocketContext(Context):
    """The context of one websocket, shared by its operations for as long as it is open.

    It holds no session open: `db()` and `unit_of_work()` open one per use, and `session` is
    never begun.
    """

    # Filled by Strawberry from the connection_init payload.
    connection_params: dict[str, object] = field(default_factory=dict)
    # Set once the connection is accepted (app/graphql/view.py), for the re-checks.
    authorization: str | None = None
    checked_at: float = 0.0

    @asynccontextmanager
    async def db(self) -> AsyncIterator[AsyncSession]:
        async with self.resources.session(writes=False) as session:
            yield session

    @asynccontextmanager
    async def unit_of_work(self) -> AsyncIterator[AsyncSession]:
        async with self.resources.session(writes=True) as session:
            yield session
            await session.commit()

    async def recheck(self) -> None:
        """Unauthenticated once the credential of the connection no longer validates."""
        now = time.monotonic()
        if now - self.checked_at < RECHECK_SECONDS:
            return
        resources = self.resources
        async with resources.session(writes=False) as session:
            try:
                await resolve_credential(
                    session, self.authorization, resources.secret_key, resources.credential_cache
                )
            except DomainError as exc:
                raise Unauthenticated(exc.message) from exc
        self.checked_at = now


class SubscriptionSlot:
    """One of the organization's open subscriptions in this process, for a subscription
    that follows something without the event stream (e.g. an import's progress, read
    again as it runs): taken when it starts (a GraphQL error once the organization has none
    left), given back by `release` however it ends."""

    def __init__(self, context: SocketContext, organization_id: str) -> None:
        self._organization_id = organization_id
        self._quota = context.resources.subscriptions
        try:
            self._quota.take(organization_id)
        except TooManySubscriptions as exc:
            raise GraphQLError(str(exc), extensions={"code": "too_many_subscriptions"}) from None
        self._released = False

    def release(self) -> None:
        if not self._released:
            self._released = True
            self._quota.release(self._organization_id)


class LiveEvents:
    """The organization's event stream for one subscription, counted against the
    organization's open subscriptions in this process: made when the subscription starts (a
    GraphQL error once the organization has none left), closed with it."""

    def __init__(self, context: SocketContext, subject: Subject) -> None:
        self._organization_id = subject.organization_id
        self._quota = context.resources.subscriptions
        try:
            self._quota.take(self._organization_id)
        except TooManySubscriptions as exc:
            raise GraphQLError(str(exc), extensions={"code": "too_many_subscriptions"}) from None
        self._events = context.resources.event_stream
        self._stream: AsyncIterator[dict[str, Any]] = self._events.subscribe(self._organization_id)
        self._closed = False

    async def subscribed(self) -> LiveEvents:
        """Subscribe now rather than on the first read: every event published from here on
        is kept, so a snapshot read after this misses nothing in between."""
        self._stream = await self._events.open(self._organization_id)
        return self

    def __aiter__(self) -> LiveEvents:
        return self

    async def __anext__(self) -> dict[str, Any]:
        return await anext(self._stream)

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            # Unsubscribes now rather than whenever the stream is garbage collected.
            if isinstance(self._stream, AsyncGenerator):
                await self._stream.aclose()
        finally:
            self._quota.release(self._organization_id)


async def follow_live(
    stream: LiveEvents, steps: AsyncIterator[T], organization_id: str
) -> AsyncGenerator[T, None]:
    """The loop of every live-progress subscription (events, campaigns, calls): hands out
    `steps`, made from `stream`, with one error path. A GraphQL error ends the subscription
    as it is, a domain error as its GraphQL error; any other failure (e.g. the event stream
    lost with Redis) is logged and ends it with `stream_interrupted`, since Strawberry would
    send the client str(exc). The steps and the stream are closed however it ends."""
    try:
        async for step in steps:
            yield step
    except GraphQLError:
        raise
    except DomainError as exc:
        raise as_graphql_error(exc) from exc
    except Exception as exc:
        logger.exception("event stream failed", organization_id=organization_id)
        raise GraphQLError(
            "The event stream was interrupted; subscribe again",
            extensions={"code": "stream_interrupted"},
        ) from exc
    finally:
        try:
            close = getattr(steps, "aclose", None)
            if close is not None:
                await close()
        finally:
            await stream.aclose()
