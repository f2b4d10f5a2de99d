"""`events(types)`: the organization's events as they happen, over graphql-transport-ws.

The stream is best effort (app/kit/event_stream.py): a subscriber that is away or too slow misses
events. Webhooks are the durable channel; both carry the same body.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing
from datetime import datetime
from typing import Any

import strawberry
from graphql import GraphQLError
from strawberry.scalars import JSON
from strawberry.types import Info

from app.access.scopes import Scope
from app.access.subject import Subject
from app.events.types import KNOWLEDGE_EVENTS, SUBSCRIBABLE_EVENTS, WEBHOOK_DISABLED
from app.graphql.context import Context
from app.graphql.permissions import requires
from app.graphql.socket import (
    SUBSCRIPTIONS_OVER_WEBSOCKET,
    LiveEvents,
    SocketContext,
    follow_live,
)

# Every type the stream carries: `webhook.test` goes to one subscription only, never fanned out.
STREAMED_EVENTS: tuple[str, ...] = (*SUBSCRIBABLE_EVENTS, WEBHOOK_DISABLED, *KNOWLEDGE_EVENTS)
_STREAMED = frozenset(STREAMED_EVENTS)


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
