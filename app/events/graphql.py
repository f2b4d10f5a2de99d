"""`events(types)`: the organization's events as they happen, over graphql-transport-ws.

The stream is best effort (app/events/stream.py): a subscriber that is away or too slow misses
events. Webhooks are the durable channel; both carry the same body.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing, asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

import strawberry
import structlog
from graphql import GraphQLError
from sqlalchemy.ext.asyncio import AsyncSession
from strawberry.scalars import JSON
from strawberry.types import Info

from app.auth.scopes import Scope
from app.auth.service import resolve_credential
from app.auth.subject import Subject
from app.events.stream import TooManySubscriptions
from app.graphql.context import Context
from app.graphql.errors import Unauthenticated, as_graphql_error
from app.graphql.permissions import requires
from app.kit.errors import DomainError
from app.knowledge.service import KNOWLEDGE_EVENTS
from app.webhooks.events import SUBSCRIBABLE_EVENTS, WEBHOOK_DISABLED

logger = structlog.get_logger("switchboard.graphql")

T = TypeVar("T")

# Every type the stream carries: `webhook.test` goes to one subscription only, never fanned out.
STREAMED_EVENTS: tuple[str, ...] = (*SUBSCRIBABLE_EVENTS, WEBHOOK_DISABLED, *KNOWLEDGE_EVENTS)
_STREAMED = frozenset(STREAMED_EVENTS)

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


@strawberry.type(description="Something that happened in the organization, as webhooks get it.")
class Event:
    id: strawberry.ID
    type: str
    created_at: datetime
    organization_id: str
    livemode: bool
    data: JSON = strawberry.field(description="The resource as REST returned it at that moment")


def as_event(body: dict[str, Any]) -> Event:
    return Event(
        id=strawberry.ID(body["id"]),
        type=body["type"],
        created_at=datetime.fromisoformat(body["created_at"]),
        organization_id=body["organization_id"],
        livemode=body["livemode"],
        data=body["data"],
    )


def _invalid_types(message: str) -> GraphQLError:
    return GraphQLError(message, extensions={"code": "invalid_input", "field": "types"})


def wanted_types(types: list[str] | None) -> frozenset[str] | None:
    """The event types asked for (None: every type); unknown names are refused by name."""
    if types is None:
        return None
    if not types:
        raise _invalid_types("types must name at least one event; leave it out for every event")
    unknown = [name for name in dict.fromkeys(types) if name not in _STREAMED]
    if unknown:
        raise _invalid_types(
            f"Unknown event type(s): {', '.join(unknown)}. "
            f"Allowed types: {', '.join(STREAMED_EVENTS)}"
        )
    return frozenset(types)


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


async def _events(
    context: SocketContext, subject: Subject, stream: LiveEvents, wanted: frozenset[str] | None
) -> AsyncGenerator[Event, None]:
    async for body in stream:
        # A test key sees test-mode events only, a live key live ones, as with webhooks.
        if body.get("livemode") is not subject.livemode:
            continue
        if wanted is not None and body.get("type") not in wanted:
            continue
        await context.recheck()
        yield as_event(body)


async def _relay(
    context: SocketContext, subject: Subject, wanted: frozenset[str] | None
) -> AsyncGenerator[Event, None]:
    stream = LiveEvents(context, subject)
    events = follow_live(stream, _events(context, subject, stream, wanted), subject.organization_id)
    async with aclosing(events):
        async for event in events:
            yield event


@strawberry.type
class Subscription:
    @strawberry.subscription(
        extensions=requires(Scope.WEBHOOKS_ADMIN),
        description=(
            "The organization's events of the credential's mode (test or live) as they "
            "happen; `types` keeps only the named ones. Best effort: webhooks are durable."
        ),
    )
    async def events(
        self, info: Info[Context, None], types: list[str] | None = None
    ) -> AsyncGenerator[Event, None]:
        # Not a generator itself: bad arguments are refused before the subscription starts,
        # as an `error` message rather than a `next` carrying errors.
        context = info.context
        if not isinstance(context, SocketContext):
            raise GraphQLError(SUBSCRIPTIONS_OVER_WEBSOCKET, extensions={"code": "bad_request"})
        subject = context.require_subject()
        return _relay(context, subject, wanted_types(types))
