"""Inbox ticket types and fields; each field calls one inbox service operation.

A ticket's `contact` comes from the same query as the ticket (every ticket read joins its
contact), and a contact's `openTicket` (declared here on the contacts domain's type,
`ContactOpenTicket`) from one batched query per request through `open_ticket_loader`: neither
costs a query per item of a list. A ticket's `messages` are the conversations domain's link.
"""

from __future__ import annotations

from typing import Any, cast

import strawberry
from strawberry.dataloader import DataLoader
from strawberry.types import Info

from app.access.scopes import Scope
from app.auth.graphql import User, user_loader
from app.contacts.graphql import Contact
from app.graphql.context import Context
from app.graphql.links import extends
from app.graphql.pagination import Connection, connection
from app.graphql.permissions import requires
from app.graphql.planned import plannable
from app.graphql.resource import Described, DomainMutations, Payload, node_field
from app.inbox import service
from app.inbox.models import TicketStatus as TicketStatusValue
from app.inbox.schemas import TICKET, TicketAssign, TicketCreate, TicketShape, TicketStatus
from app.kit.errors import InvalidInput, InvalidState, LiveModeForbidden, NotFound


@strawberry.type
class Ticket(TicketShape):
    """A ticket: its shape (app/inbox/schemas.py) and the user it is assigned to."""

    @strawberry.field(description="The organization user the ticket is assigned to")
    async def assigned_user(self, info: Info[Context, None]) -> User | None:
        if self.assigned_user_id is None:
            return None
        return await user_loader(info.context).load(self.assigned_user_id)


TicketConnection = Connection[Ticket]


@strawberry.input
class TicketCreateInput:
    contact_id: strawberry.ID
    chat_phone_number_id: strawberry.ID | None = strawberry.field(
        default=None,
        description="The messaging channel replies go through; the ticket takes its mode",
    )


as_ticket = TICKET.serving(Ticket)


def open_ticket_loader(context: Context) -> DataLoader[str, Ticket | None]:
    """Contact id → its open ticket; every `openTicket` of a request in one query."""

    async def load(contact_ids: list[str]) -> list[Ticket | None]:
        subject = context.require_subject()
        async with context.db() as session:
            found = await service.open_tickets_by_contact(session, subject, contact_ids)
        return [_optional_ticket(found.get(contact_id)) for contact_id in contact_ids]

    loader: Any = context.loaders.get("open_ticket")
    if loader is None:
        loader = context.loaders["open_ticket"] = DataLoader(load_fn=load)
    return cast(DataLoader[str, Ticket | None], loader)


def _optional_ticket(row: Any | None) -> Ticket | None:
    return None if row is None else as_ticket(row)


@extends(Contact)
class ContactOpenTicket(Contact):
    @strawberry.field(description="The contact's open inbox ticket; batched per response.")
    async def open_ticket(self, info: Info[Context, None]) -> Ticket | None:
        return await open_ticket_loader(info.context).load(self.id)


TICKETS = DomainMutations(
    "Ticket",
    scope=Scope.FULL_ACCESS,
    errors=(InvalidInput, NotFound, InvalidState, service.ChannelNotFound, LiveModeForbidden),
    node=Ticket,
    as_node=as_ticket,
)
CreateTicketPayload = TICKETS.payload_type(
    "CreateTicketPayload",
    {
        "ticket": Ticket,
        "created": Described(
            bool, "False when the contact's open ticket already existed and is returned"
        ),
    },
)


@strawberry.type
class Query:
    @strawberry.field(extensions=requires(Scope.FULL_ACCESS))
    @plannable
    async def tickets(
        self,
        info: Info[Context, None],
        first: int | None = None,
        after: str | None = None,
        last: int | None = None,
        before: str | None = None,
        status: TicketStatus | None = None,  # type: ignore[valid-type]
    ) -> TicketConnection | None:
        return await connection(
            info.context,
            (first, after, last, before),
            lambda session, subject, params: service.list_tickets(
                session,
                subject,
                params,
                status=None if status is None else TicketStatusValue(status).value,
            ),
            as_ticket,
        )

    ticket = node_field(Scope.FULL_ACCESS, service.get_ticket, as_ticket, Ticket)


@strawberry.type
class Mutation:
    @TICKETS.mutation(
        payload=CreateTicketPayload,
        description="A new open ticket for the contact, or the contact's open ticket if it "
        "has one (then `created` is false).",
    )
    async def create_ticket(self, info: Info[Context, None], input: TicketCreateInput) -> Payload:
        return await TICKETS.save(
            info,
            TicketCreate,
            input,
            service.create_ticket,
            answer=lambda result: {"ticket": as_ticket(result.ticket), "created": result.created},
            payload=CreateTicketPayload,
        )

    @TICKETS.mutation(description="open → closed (ticket.resolved)")
    async def close_ticket(self, info: Info[Context, None], id: strawberry.ID) -> Payload:
        return await TICKETS.perform(
            info,
            lambda session, subject: service.close_ticket(session, subject, id),
            TICKETS.node_answer,
        )

    @TICKETS.mutation(
        description="Assign an open ticket to a user of the organization (ticket.assigned)."
    )
    async def assign_ticket(
        self, info: Info[Context, None], id: strawberry.ID, user_id: strawberry.ID
    ) -> Payload:
        return await TICKETS.save(
            info,
            TicketAssign,
            {"user_id": user_id},
            lambda session, subject, data: service.assign_ticket(session, subject, id, data),
        )
