"""A contact's marketing consent, changed in time order (docs/api.md, "Consent").

Keywords and platform webhooks may arrive twice and out of order. Each change carries the time
it happened (the message's or the platform's timestamp, or now for the API); a change older
than the latest one applied to the contact changes nothing, so the contact ends in the state
of the latest event whatever order they came in. A repeat of the current state changes
nothing either (an opt-out keeps its first time and source).
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncSession

from app.contacts.models import Contact
from app.contacts.schemas import OptOutSource, contact_to_public
from app.events.service import EventOwner, emit


def _is_stale(contact: Contact, at: datetime) -> bool:
    return contact.consent_changed_at is not None and at < contact.consent_changed_at


def _advance(contact: Contact, at: datetime) -> None:
    if contact.consent_changed_at is None or at > contact.consent_changed_at:
        contact.consent_changed_at = at


def set_marketing_opt_out(
    contact: Contact,
    opted_out: bool,
    source: OptOutSource,
    at: datetime,
    *,
    stop_calls: bool = False,
) -> bool:
    """Apply one opt-out (or opt-in) that happened at `at`; True when the contact changed.
    `stop_calls`: an opt-out that also sets `do_not_call` (a STOP keyword). The caller
    flushes and emits."""
    if _is_stale(contact, at):
        return False
    _advance(contact, at)
    calls_changed = False
    if opted_out and stop_calls and not contact.do_not_call:
        contact.do_not_call = calls_changed = True
    if opted_out == (contact.marketing_opt_out_at is not None):
        return calls_changed
    if opted_out:
        contact.marketing_opt_out_at = at
        contact.marketing_opt_out_source = source.value
    else:
        contact.marketing_opt_out_at = None
        contact.marketing_opt_out_source = None
    return True


async def record_marketing_consent(
    session: AsyncSession,
    owner: EventOwner,
    contacts: list[Contact],
    *,
    opted_out: bool,
    source: OptOutSource,
    at: datetime,
    stop_calls: bool = False,
) -> list[Contact]:
    """`set_marketing_opt_out` for each contact, `lead.updated` for each that changed;
    answers those."""
    changed = [
        contact
        for contact in contacts
        if set_marketing_opt_out(contact, opted_out, source, at, stop_calls=stop_calls)
    ]
    await session.flush()
    for contact in changed:
        await emit(session, owner, "lead.updated", contact_to_public(contact))
    return changed
