"""Contact types and fields; each field calls one contacts service operation."""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

import strawberry
from strawberry.scalars import JSON
from strawberry.types import Info

from app.auth.scopes import Scope
from app.contacts import service
from app.contacts.schemas import ContactCreate, ContactUpdate
from app.graphql.calls import CallLog, load_recent_calls
from app.graphql.context import Context
from app.graphql.errors import UserError, user_errors
from app.graphql.inbox import Ticket, open_ticket_loader
from app.graphql.inputs import provided
from app.graphql.pagination import Connection, connection
from app.graphql.permissions import requires
from app.graphql.planned import plannable
from app.kit.errors import DomainError, NotFound
from app.kit.validation import parse_model


@strawberry.type
class Contact:
    id: strawberry.ID
    organization_id: str
    phone_number: str
    name: str
    tags: list[str]
    notes: str | None
    custom_fields: JSON | None
    created_at: datetime
    updated_at: datetime

    @strawberry.field(
        extensions=requires(Scope.CALLS_READ),
        description="The contact's newest calls first (limit 1 to 20); batched per response.",
    )
    async def recent_calls(self, info: Info[Context, None], limit: int = 5) -> list[CallLog]:
        return await load_recent_calls(info.context, self.id, limit)

    @strawberry.field(description="The contact's open inbox ticket; batched per response.")
    async def open_ticket(self, info: Info[Context, None]) -> Ticket | None:
        return await open_ticket_loader(info.context).load(self.id)


ContactConnection = Connection[Contact]


@strawberry.type
class ContactPayload:
    contact: Contact | None = None
    errors: list[UserError] = strawberry.field(default_factory=list)


@strawberry.type
class DeletePayload:
    deleted_id: strawberry.ID | None = None
    errors: list[UserError] = strawberry.field(default_factory=list)


@strawberry.input
class ContactCreateInput:
    phone_number: str
    name: str
    tags: list[str] | None = strawberry.UNSET
    notes: str | None = strawberry.UNSET
    custom_fields: JSON | None = strawberry.UNSET


@strawberry.input(description="Only the fields given change; tags replace the stored ones.")
class ContactUpdateInput:
    phone_number: str | None = strawberry.UNSET
    name: str | None = strawberry.UNSET
    tags: list[str] | None = strawberry.UNSET
    notes: str | None = strawberry.UNSET
    custom_fields: JSON | None = strawberry.UNSET


def as_contact(value: Any) -> Contact:
    # Rows and entities carry the same attributes as the type; no copy is needed.
    return cast(Contact, value)


@strawberry.type
class ContactQuery:
    @strawberry.field(extensions=requires(Scope.FULL_ACCESS))
    @plannable
    async def contacts(
        self,
        info: Info[Context, None],
        first: int | None = None,
        after: str | None = None,
        last: int | None = None,
        before: str | None = None,
        tag: str | None = None,
        search: str | None = None,
    ) -> ContactConnection:
        return await connection(
            info.context,
            (first, after, last, before),
            lambda session, subject, params: service.list_contacts(
                session, subject, params, tag=tag, search=search
            ),
            as_contact,
        )

    @strawberry.field(extensions=requires(Scope.FULL_ACCESS))
    @plannable
    async def contact(self, info: Info[Context, None], id: strawberry.ID) -> Contact | None:
        context = info.context
        try:
            async with context.db() as session:
                return as_contact(await service.get_contact(session, context.require_subject(), id))
        except NotFound:
            return None


@strawberry.type
class ContactMutation:
    @strawberry.mutation(extensions=requires(Scope.FULL_ACCESS))
    async def create_contact(
        self, info: Info[Context, None], input: ContactCreateInput
    ) -> ContactPayload:
        context = info.context
        try:
            data = parse_model(ContactCreate, provided(input), "input")
            async with context.unit_of_work() as session:
                contact = await service.create_contact(session, context.require_subject(), data)
        except DomainError as exc:
            return ContactPayload(errors=user_errors(exc))
        return ContactPayload(contact=as_contact(contact))

    @strawberry.mutation(extensions=requires(Scope.FULL_ACCESS))
    async def update_contact(
        self, info: Info[Context, None], id: strawberry.ID, input: ContactUpdateInput
    ) -> ContactPayload:
        context = info.context
        try:
            data = parse_model(ContactUpdate, provided(input), "input")
            async with context.unit_of_work() as session:
                contact = await service.update_contact(session, context.require_subject(), id, data)
        except DomainError as exc:
            return ContactPayload(errors=user_errors(exc))
        return ContactPayload(contact=as_contact(contact))

    @strawberry.mutation(extensions=requires(Scope.FULL_ACCESS))
    async def delete_contact(self, info: Info[Context, None], id: strawberry.ID) -> DeletePayload:
        context = info.context
        try:
            async with context.unit_of_work() as session:
                await service.delete_contact(session, context.require_subject(), id)
        except DomainError as exc:
            return DeletePayload(errors=user_errors(exc))
        return DeletePayload(deleted_id=id)
