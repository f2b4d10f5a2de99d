"""Quick reply types and fields; each field calls one quick replies service operation."""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

import strawberry
from strawberry.types import Info

from app.auth.scopes import Scope
from app.graphql.contacts import DeletePayload
from app.graphql.context import Context
from app.graphql.errors import UserError, user_errors
from app.graphql.inputs import provided
from app.graphql.pagination import Connection, connection
from app.graphql.permissions import requires
from app.graphql.planned import plannable
from app.kit.errors import DomainError, NotFound
from app.kit.validation import parse_model
from app.quick_replies import service
from app.quick_replies.cache import snippet_cache
from app.quick_replies.schemas import QuickReplyCreate, QuickReplyUpdate


@strawberry.type(description="A canned message snippet, inserted by typing its shortcut.")
class QuickReply:
    id: strawberry.ID
    shortcut: str = strawberry.field(description="Slash-prefixed trigger, e.g. /thanks")
    content: str = strawberry.field(description="The text the shortcut expands to")
    created_at: datetime
    updated_at: datetime


QuickReplyConnection = Connection[QuickReply]


@strawberry.type
class QuickReplyPayload:
    quick_reply: QuickReply | None = None
    errors: list[UserError] = strawberry.field(default_factory=list)


@strawberry.input
class QuickReplyCreateInput:
    shortcut: str
    content: str


@strawberry.input(description="Only the fields given change.")
class QuickReplyUpdateInput:
    shortcut: str | None = strawberry.UNSET
    content: str | None = strawberry.UNSET


def as_quick_reply(value: Any) -> QuickReply:
    # Rows and entities carry the same attributes as the type; no copy is needed.
    return cast(QuickReply, value)


@strawberry.type
class QuickReplyQuery:
    @strawberry.field(extensions=requires(Scope.FULL_ACCESS))
    @plannable
    async def quick_replies(
        self,
        info: Info[Context, None],
        first: int | None = None,
        after: str | None = None,
        last: int | None = None,
        before: str | None = None,
    ) -> QuickReplyConnection:
        return await connection(
            info.context,
            (first, after, last, before),
            lambda session, subject, params: service.list_quick_replies(session, subject, params),
            as_quick_reply,
        )

    @strawberry.field(extensions=requires(Scope.FULL_ACCESS))
    @plannable
    async def quick_reply(self, info: Info[Context, None], id: strawberry.ID) -> QuickReply | None:
        context = info.context
        try:
            async with context.db() as session:
                return as_quick_reply(
                    await service.get_quick_reply(session, context.require_subject(), id)
                )
        except NotFound:
            return None

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
class QuickReplyMutation:
    @strawberry.mutation(extensions=requires(Scope.FULL_ACCESS))
    async def create_quick_reply(
        self, info: Info[Context, None], input: QuickReplyCreateInput
    ) -> QuickReplyPayload:
        context = info.context
        try:
            data = parse_model(QuickReplyCreate, provided(input), "input")
            cache = snippet_cache(context.resources.redis)
            async with context.unit_of_work() as session:
                quick_reply = await service.create_quick_reply(
                    session, context.require_subject(), data, cache
                )
        except DomainError as exc:
            return QuickReplyPayload(errors=user_errors(exc))
        return QuickReplyPayload(quick_reply=as_quick_reply(quick_reply))

    @strawberry.mutation(extensions=requires(Scope.FULL_ACCESS))
    async def update_quick_reply(
        self, info: Info[Context, None], id: strawberry.ID, input: QuickReplyUpdateInput
    ) -> QuickReplyPayload:
        context = info.context
        try:
            data = parse_model(QuickReplyUpdate, provided(input), "input")
            cache = snippet_cache(context.resources.redis)
            async with context.unit_of_work() as session:
                quick_reply = await service.update_quick_reply(
                    session, context.require_subject(), id, data, cache
                )
        except DomainError as exc:
            return QuickReplyPayload(errors=user_errors(exc))
        return QuickReplyPayload(quick_reply=as_quick_reply(quick_reply))

    @strawberry.mutation(extensions=requires(Scope.FULL_ACCESS))
    async def delete_quick_reply(
        self, info: Info[Context, None], id: strawberry.ID
    ) -> DeletePayload:
        context = info.context
        try:
            cache = snippet_cache(context.resources.redis)
            async with context.unit_of_work() as session:
                await service.delete_quick_reply(session, context.require_subject(), id, cache)
        except DomainError as exc:
            return DeletePayload(errors=user_errors(exc))
        return DeletePayload(deleted_id=id)
