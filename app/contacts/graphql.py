"""Contact types and fields; each field calls one contacts service operation."""

from __future__ import annotations

import strawberry
from strawberry.scalars import JSON
from strawberry.types import Info

from app.access.scopes import Scope
from app.contacts import service
from app.contacts.schemas import CONTACT, ContactCreate, ContactShape, ContactUpdate
from app.graphql.context import Context
from app.graphql.pagination import Connection, connection
from app.graphql.permissions import requires
from app.graphql.planned import plannable
from app.graphql.resource import DomainMutations, node_field
from app.kit.errors import InvalidInput, NotFound


@strawberry.type
class Contact(ContactShape):
    """The contact's GraphQL type. Domains that read contacts add their links to it with
    `@extends(Contact)` (app/graphql/links.py): `recentCalls` (app/calls/graphql.py) and
    `openTicket` (app/inbox/graphql.py)."""


ContactConnection = Connection[Contact]


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
    marketing_opt_out: bool | None = strawberry.field(
        default=strawberry.UNSET,
        description="true: opted out now (source api), unless already; false: cleared",
    )
    do_not_call: bool | None = strawberry.UNSET


as_contact = CONTACT.serving(Contact)


CONTACTS = DomainMutations(
    "Contact",
    scope=Scope.FULL_ACCESS,
    errors=(InvalidInput, NotFound),
    node=Contact,
    as_node=as_contact,
)


@strawberry.type
class Query:
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
    ) -> ContactConnection | None:
        return await connection(
            info.context,
            (first, after, last, before),
            lambda session, subject, params: service.list_contacts(
                session, subject, params, tag=tag, search=search
            ),
            as_contact,
        )

    contact = node_field(Scope.FULL_ACCESS, service.get_contact, as_contact, Contact)


@strawberry.type
class Mutation:
    create_contact = CONTACTS.create_field(
        ContactCreateInput, ContactCreate, service.create_contact
    )
    update_contact = CONTACTS.update_field(
        ContactUpdateInput, ContactUpdate, service.update_contact
    )
    delete_contact = CONTACTS.delete_field(service.delete_contact)
