"""Contact operations: the resolvers REST and GraphQL both call."""

from __future__ import annotations

from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.auth.subject import Subject
from app.contacts.models import Contact
from app.contacts.repository import ContactRepository
from app.contacts.schemas import ContactCreate, ContactUpdate, contact_to_public
from app.events.service import emit
from app.kit.pagination import CursorPage, CursorParams
from app.kit.phone import to_e164


async def create_contact(session: AsyncSession, subject: Subject, data: ContactCreate) -> Contact:
    contact = Contact(
        organization_id=subject.organization_id,
        phone_number=to_e164(data.phone_number),
        name=data.name,
        tags=data.tags,
        notes=data.notes,
        custom_fields=data.custom_fields,
    )
    ContactRepository(session, subject).add(contact)
    await session.flush()
    await emit(session, subject, "lead.created", contact_to_public(contact))
    return contact


async def create_platform_user(
    session: AsyncSession, subject: Subject, user_id: str, name: str
) -> Contact:
    """A contact WhatsApp names by its business-scoped user id only (the user hides their
    number): no phone number, replies go to the id."""
    contact = Contact(
        organization_id=subject.organization_id,
        phone_number="",
        name=name,
        tags=[],
        platform_user_id=user_id,
    )
    ContactRepository(session, subject).add(contact)
    await session.flush()
    await emit(session, subject, "lead.created", contact_to_public(contact))
    return contact


async def get_contact(session: AsyncSession, subject: Subject, contact_id: str) -> Any:
    return await ContactRepository(session, subject).get_row_or_404(contact_id)


async def list_contacts(
    session: AsyncSession,
    subject: Subject,
    params: CursorParams,
    *,
    tag: str | None = None,
    search: str | None = None,
) -> CursorPage[Any]:
    repository = ContactRepository(session, subject)
    return await repository.cursor_page(params, *repository.filters(tag=tag, search=search))


async def update_contact(
    session: AsyncSession, subject: Subject, contact_id: str, data: ContactUpdate
) -> Contact:
    repository = ContactRepository(session, subject)
    contact = await repository.get_or_404(contact_id)
    changes = data.changes()
    if "phone_number" in changes:
        changes["phone_number"] = to_e164(changes["phone_number"])
    for name, value in changes.items():
        setattr(contact, name, value)
    await session.flush()
    if changes:  # an empty update changes nothing, so nothing happened
        await emit(session, subject, "lead.updated", contact_to_public(contact))
    return contact


async def delete_contact(session: AsyncSession, subject: Subject, contact_id: str) -> None:
    repository = ContactRepository(session, subject)
    contact = await repository.get_or_404(contact_id)
    await repository.delete(contact)
    await session.flush()
