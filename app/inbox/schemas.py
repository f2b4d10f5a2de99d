"""Ticket inputs shared by REST and GraphQL, the records services return, the REST shape."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field

from app.kit.serialize import public_shape


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


@dataclass(frozen=True, slots=True)
class ContactBrief:
    """The contact as a ticket embeds it (spec: ContactBrief)."""

    id: str
    name: str
    phone_number: str
    tags: list[str]
    notes: str | None
    custom_fields: dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class TicketRecord:
    """A ticket with its contact: what every ticket operation returns, to either surface."""

    id: str
    organization_id: str
    contact_id: str
    chat_phone_number_id: str | None
    status: str
    assigned_user_id: str | None
    livemode: bool
    created_at: datetime
    updated_at: datetime
    contact: ContactBrief


def brief_from_row(row: Any) -> ContactBrief:
    """The brief of a contact read with the `contact_` columns of app/inbox/repository.py."""
    return ContactBrief(
        id=row.contact_id,
        name=row.contact_name,
        phone_number=row.contact_phone_number,
        tags=row.contact_tags or [],
        notes=row.contact_notes,
        custom_fields=row.contact_custom_fields,
    )


def ticket_record(ticket: Any, contact: ContactBrief) -> TicketRecord:
    """`ticket` is a Ticket entity or a row with its columns."""
    return TicketRecord(
        id=ticket.id,
        organization_id=ticket.organization_id,
        contact_id=ticket.contact_id,
        chat_phone_number_id=ticket.chat_phone_number_id,
        status=ticket.status,
        assigned_user_id=ticket.assigned_user_id,
        livemode=ticket.livemode,
        created_at=ticket.created_at,
        updated_at=ticket.updated_at,
        contact=contact,
    )


def record_from_row(row: Any) -> TicketRecord:
    """A joined ticket + contact row (app/inbox/repository.py) as a record."""
    return ticket_record(row, brief_from_row(row))


class ContactBriefResponse(BaseModel):
    id: str
    name: str
    phone_number: str
    tags: list[str]
    notes: str | None
    custom_fields: dict[str, Any] | None


class TicketResponse(BaseModel):
    """The REST shape; documents the OpenAPI schema. Runtime uses `ticket_to_public`."""

    id: str
    organization_id: str
    contact_id: str
    chat_phone_number_id: str | None
    status: Literal["open", "closed"]
    assigned_user_id: str | None
    livemode: bool
    created_at: str
    updated_at: str
    contact: ContactBriefResponse


# The REST/event shape of a ticket, its contact embedded.
ticket_to_public = public_shape(TicketResponse, contact=public_shape(ContactBriefResponse))
