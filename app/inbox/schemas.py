"""Ticket inputs shared by REST and GraphQL, and the public shapes of a ticket and of the
contact brief it embeds (GraphQL type, REST model, serializer and list columns:
app/kit/shape.py)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal
from uuid import UUID

import strawberry
from pydantic import BaseModel, ConfigDict, Field
from strawberry.scalars import JSON

from app.contacts.models import Contact
from app.inbox import models
from app.kit.shape import Rest, Shape, column, computed


class TicketCreate(BaseModel):
    model_config = ConfigDict(extra="ignore")

    contact_id: UUID
    chat_phone_number_id: UUID | None = Field(
        default=None,
        description="The messaging channel replies go through (a channel of the organization); "
        "the ticket takes its mode (live or test)",
    )


class TicketAssign(BaseModel):
    model_config = ConfigDict(extra="ignore")

    user_id: UUID


# The status as GraphQL's enum (the model's enum, registered with Strawberry in place).
TicketStatus = strawberry.enum(models.TicketStatus, name="TicketStatus")


@strawberry.type(description="The contact as a ticket embeds it.")
class ContactBrief:
    """The public shape of the contact a ticket embeds (spec: ContactBrief)."""

    id: strawberry.ID = column(Contact.id, as_type=strawberry.ID)
    name: str = column(Contact.name)
    phone_number: str = column(Contact.phone_number)
    tags: list[str] = column(Contact.tags)
    notes: str | None = column(Contact.notes)
    custom_fields: JSON | None = column(
        Contact.custom_fields, as_type=JSON, rest=Rest(annotation=dict[str, Any] | None)
    )


CONTACT_BRIEF = Shape(ContactBrief, rest_name="ContactBriefResponse")
ContactBriefResponse = CONTACT_BRIEF.rest_model

# The brief's columns on a ticket row (every ticket read joins its contact): labelled, so
# they do not collide with the ticket's; the brief's id is the ticket's `contact_id`.
BRIEF_COLUMNS = (
    Contact.name.label("contact_name"),
    Contact.phone_number.label("contact_phone_number"),
    Contact.tags.label("contact_tags"),
    Contact.notes.label("contact_notes"),
    Contact.custom_fields.label("contact_custom_fields"),
)


def brief_of(row: Any) -> ContactBrief:
    """The contact brief of a ticket row (or of a brief row read alone, its `contact_id`
    labelled), from its `contact_` columns."""
    return ContactBrief(
        id=row.contact_id,
        name=row.contact_name,
        phone_number=row.contact_phone_number,
        tags=row.contact_tags or [],
        notes=row.contact_notes,
        custom_fields=row.contact_custom_fields,
    )


def _contact(root: strawberry.Parent[Any]) -> ContactBrief:
    return brief_of(root)


def _public_brief(row: Any) -> dict[str, Any]:
    return CONTACT_BRIEF.to_public(brief_of(row))


@strawberry.type
class TicketShape:
    """The public shape of a ticket, declared once (app/kit/shape.py); the GraphQL type
    `Ticket` (app/inbox/graphql.py) adds its assigned user."""

    id: strawberry.ID = column(models.Ticket.id, as_type=strawberry.ID)
    organization_id: str = column(models.Ticket.organization_id)
    contact_id: str = column(models.Ticket.contact_id)
    chat_phone_number_id: str | None = column(models.Ticket.chat_phone_number_id)
    status: models.TicketStatus = column(
        models.Ticket.status,
        as_type=models.TicketStatus,
        rest=Rest(annotation=Literal["open", "closed"]),
    )
    assigned_user_id: str | None = column(models.Ticket.assigned_user_id)
    livemode: bool = column(
        models.Ticket.livemode,
        description="The mode of its channel, or without one of the credential that created it",
    )
    created_at: datetime = column(models.Ticket.created_at)
    updated_at: datetime = column(models.Ticket.updated_at)
    contact: ContactBrief = computed(
        _contact,
        sources=(models.Ticket.contact_id, *BRIEF_COLUMNS),
        rest=Rest(annotation=ContactBriefResponse, value=_public_brief),
    )


TICKET = Shape(
    TicketShape,
    rest_name="TicketResponse",
    rest_doc="The REST shape; documents the OpenAPI schema. Runtime uses `ticket_to_public`.",
)
TicketResponse = TICKET.rest_model  # documents OpenAPI (Operation.response_model)
# The REST/event shape of a ticket, its contact embedded.
ticket_to_public = TICKET.to_public
