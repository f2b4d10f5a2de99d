"""Conversation messages on GraphQL: a ticket's messages and replies.

A ticket's `messages` is declared here on the inbox's type (`TicketMessages`) and batched for
every ticket of a response into one query (`recent_messages_loader`).
"""

from __future__ import annotations

from typing import Any

import strawberry
from strawberry.dataloader import DataLoader
from strawberry.types import Info

from app.access.scopes import Scope
from app.conversations import service
from app.conversations.schemas import MESSAGE, ConversationMessage, MessageSend
from app.graphql.context import Context
from app.graphql.errors import as_graphql_error
from app.graphql.links import extends
from app.graphql.pagination import Connection, connection
from app.graphql.permissions import requires
from app.graphql.resource import DomainMutations, Payload
from app.inbox.graphql import Ticket
from app.kit.errors import InvalidInput, InvalidState, LiveModeForbidden, NotFound

ConversationMessageConnection = Connection[ConversationMessage]


def as_message(value: Any) -> ConversationMessage:
    return MESSAGE.as_graphql(value)


RECENT_MESSAGES_LOADER = "conversations.recent_messages"
MAX_RECENT_MESSAGES = 100


def recent_messages_loader(
    context: Context,
) -> DataLoader[tuple[str, int], list[ConversationMessage]]:
    """One query for the recent messages of every ticket a response shows (keys: id, limit)."""

    async def load(keys: list[tuple[str, int]]) -> list[list[ConversationMessage]]:
        largest = max(limit for _ticket_id, limit in keys)
        async with context.db() as session:
            by_ticket = await service.recent_messages_by_ticket(
                session, context.require_subject(), [ticket_id for ticket_id, _ in keys], largest
            )
        return [
            [as_message(row) for row in by_ticket.get(ticket_id, [])[:limit]]
            for ticket_id, limit in keys
        ]

    return context.loader(RECENT_MESSAGES_LOADER, load)


async def load_recent_messages(
    context: Context, ticket_id: str, limit: int
) -> list[ConversationMessage]:
    if not 1 <= limit <= MAX_RECENT_MESSAGES:
        raise as_graphql_error(
            InvalidInput(f"limit must be between 1 and {MAX_RECENT_MESSAGES}", field="limit")
        )
    return await recent_messages_loader(context).load((ticket_id, limit))


@extends(Ticket)
class TicketMessages(Ticket):
    @strawberry.field(description="The conversation's newest messages (all tickets: one query)")
    async def messages(
        self, info: Info[Context, None], limit: int = 20
    ) -> list[ConversationMessage]:
        return await load_recent_messages(info.context, self.id, limit)


MESSAGES = DomainMutations(
    "ConversationMessage",
    scope=Scope.FULL_ACCESS,
    errors=(
        InvalidInput,
        NotFound,
        InvalidState,
        service.OutsideServiceWindow,
        LiveModeForbidden,
    ),
    node=ConversationMessage,
    as_node=as_message,
    node_field="message",
)


@strawberry.input
class SendMessageInput:
    text: str | None = strawberry.UNSET
    template_name: str | None = strawberry.UNSET
    template_language: str | None = strawberry.UNSET
    body_parameters: list[str] | None = strawberry.UNSET


@strawberry.type
class Query:
    @strawberry.field(extensions=requires(Scope.FULL_ACCESS), description="Newest first.")
    async def ticket_messages(
        self,
        info: Info[Context, None],
        ticket_id: strawberry.ID,
        first: int | None = None,
        after: str | None = None,
        last: int | None = None,
        before: str | None = None,
    ) -> ConversationMessageConnection | None:
        return await connection(
            info.context,
            (first, after, last, before),
            lambda session, subject, params: service.list_messages(
                session, subject, ticket_id, params
            ),
            as_message,
        )


@strawberry.type
class Mutation:
    @MESSAGES.mutation(
        description="Reply on a ticket: text inside the 24-hour window, or an approved template."
    )
    async def send_ticket_message(
        self, info: Info[Context, None], ticket_id: strawberry.ID, input: SendMessageInput
    ) -> Payload:
        resources = info.context.resources
        return await MESSAGES.save(
            info,
            MessageSend,
            input,
            lambda session, subject, data: service.send_message(
                session, subject, resources, ticket_id, data
            ),
        )
