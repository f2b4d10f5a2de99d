"""Quick reply types and fields; each field calls one quick replies service operation."""

from __future__ import annotations

from typing import Any

import strawberry
from strawberry.types import Info

from app.access.scopes import Scope
from app.graphql.context import Context
from app.graphql.pagination import Connection
from app.graphql.permissions import requires
from app.graphql.planned import plannable
from app.graphql.resource import DomainMutations, Payload, list_field, node_field
from app.kit.errors import Conflict, InvalidInput, NotFound
from app.quick_replies import service
from app.quick_replies.cache import snippet_cache
from app.quick_replies.schemas import QUICK_REPLY, QuickReply, QuickReplyCreate, QuickReplyUpdate

QuickReplyConnection = Connection[QuickReply]


@strawberry.input
class QuickReplyCreateInput:
    shortcut: str
    content: str


@strawberry.input(description="Only the fields given change.")
class QuickReplyUpdateInput:
    shortcut: str | None = strawberry.UNSET
    content: str | None = strawberry.UNSET


def as_quick_reply(value: Any) -> QuickReply:
    return QUICK_REPLY.as_graphql(value)


QUICK_REPLIES = DomainMutations(
    "QuickReply",
    scope=Scope.FULL_ACCESS,
    errors=(InvalidInput, NotFound, Conflict),
    node=QuickReply,
    as_node=as_quick_reply,
)


@strawberry.type
class Query:
    quick_replies = list_field(
        Scope.FULL_ACCESS,
        service.list_quick_replies,
        as_quick_reply,
        QuickReply,
    )
    quick_reply = node_field(Scope.FULL_ACCESS, service.get_quick_reply, as_quick_reply, QuickReply)

    @strawberry.field(
        extensions=requires(Scope.FULL_ACCESS),
        description="The content a shortcut expands to (null when no quick reply has it), "
        "served from the organization's cached snippet list.",
    )
    @plannable
    async def quick_reply_expansion(self, info: Info[Context, None], shortcut: str) -> str | None:
        context = info.context
        subject = context.require_subject()
        # A session of its own: on a cache miss the list must be read in a snapshot newer than
        # the cache's generation token (the request's session may hold an older one). The lock
        # keeps sibling fields' database work one at a time, as `context.db()` does.
        async with context.lock, context.resources.session(writes=False) as session:
            return await service.expand_quick_reply(
                session, subject, shortcut, snippet_cache(context.resources.redis)
            )


@strawberry.type
class Mutation:
    @QUICK_REPLIES.mutation()
    async def create_quick_reply(
        self, info: Info[Context, None], input: QuickReplyCreateInput
    ) -> Payload:
        cache = snippet_cache(info.context.resources.redis)
        return await QUICK_REPLIES.save(
            info,
            QuickReplyCreate,
            input,
            lambda session, subject, data: service.create_quick_reply(
                session, subject, data, cache
            ),
        )

    @QUICK_REPLIES.mutation()
    async def update_quick_reply(
        self, info: Info[Context, None], id: strawberry.ID, input: QuickReplyUpdateInput
    ) -> Payload:
        cache = snippet_cache(info.context.resources.redis)
        return await QUICK_REPLIES.save(
            info,
            QuickReplyUpdate,
            input,
            lambda session, subject, data: service.update_quick_reply(
                session, subject, id, data, cache
            ),
        )

    @QUICK_REPLIES.mutation(payload=QUICK_REPLIES.delete_payload)
    async def delete_quick_reply(self, info: Info[Context, None], id: strawberry.ID) -> Payload:
        cache = snippet_cache(info.context.resources.redis)
        return await QUICK_REPLIES.delete(
            info,
            id,
            lambda session, subject, quick_reply_id: service.delete_quick_reply(
                session, subject, quick_reply_id, cache
            ),
        )
