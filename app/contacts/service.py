"""Contact operations: the resolvers REST and GraphQL both call."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.access.subject import Subject
from app.contacts.consent import set_marketing_opt_out
from app.contacts.models import Contact
from app.contacts.repository import ContactRepository
from app.contacts.schemas import ContactCreate, ContactUpdate, OptOutSource, contact_to_public
from app.core.clock import utcnow
from app.core.jsonutil import dumps
from app.events.service import emit
from app.kit.csvcells import csv_safe, csv_timestamp, encode_rows
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
    opt_out = changes.pop("marketing_opt_out", None)
    if opt_out is not None:
        # The API's word is the latest: now, whatever came before.
        set_marketing_opt_out(contact, opt_out, OptOutSource.API, max_time(contact, utcnow()))
    for name, value in changes.items():
        setattr(contact, name, value)
    await session.flush()
    if changes or opt_out is not None:  # an empty update changes nothing, so nothing happened
        await emit(session, subject, "lead.updated", contact_to_public(contact))
    return contact


async def delete_contact(session: AsyncSession, subject: Subject, contact_id: str) -> None:
    repository = ContactRepository(session, subject)
    contact = await repository.get_or_404(contact_id)
    await repository.delete(contact)
    await session.flush()


def max_time(contact: Contact, now: datetime) -> datetime:
    """`now`, or the contact's latest consent change when a platform clock ran ahead of ours."""
    latest = contact.consent_changed_at
    return now if latest is None or latest <= now else latest


EXPORT_BATCH = 1000
EXPORT_COLUMNS = (
    "id",
    "name",
    "phone_number",
    "tags",
    "notes",
    "custom_fields",
    "marketing_opt_out",
    "marketing_opt_out_source",
    "do_not_call",
    "created_at",
    "updated_at",
)
# Tags in one cell; the import splits on it too (docs/api.md, "Contacts in and out").
TAG_SEPARATOR = "|"
OpenSession = Callable[[], AbstractAsyncContextManager[AsyncSession]]


def _export_row(row: Any) -> list[str]:
    return [
        row.id,
        csv_safe(row.name),
        csv_safe(row.phone_number),
        csv_safe(TAG_SEPARATOR.join(row.tags or [])),
        csv_safe(row.notes),
        csv_safe(dumps(row.custom_fields).decode() if row.custom_fields else ""),
        csv_timestamp(row.marketing_opt_out_at),
        row.marketing_opt_out_source or "",
        "true" if row.do_not_call else "false",
        csv_timestamp(row.created_at),
        csv_timestamp(row.updated_at),
    ]


async def export_contacts(
    open_session: OpenSession,
    subject: Subject,
    *,
    tag: str | None = None,
    search: str | None = None,
    batch: int = EXPORT_BATCH,
) -> AsyncIterator[bytes]:
    """Every contact the list would show with these filters, as CSV: the header, then one
    chunk per `batch` contacts, newest first. Each batch is a short read in a session of its
    own (no transaction stays open while the client reads; memory holds one batch)."""
    yield encode_rows([list(EXPORT_COLUMNS)])
    after: tuple[Any, str] | None = None
    while True:
        async with open_session() as session:
            repository = ContactRepository(session, subject)
            filters = repository.filters(tag=tag, search=search)
            rows = await repository.export_batch(filters, after, batch)
        if not rows:
            return
        yield encode_rows([_export_row(row) for row in rows])
        if len(rows) < batch:
            return
        after = (rows[-1].created_at, rows[-1].id)
