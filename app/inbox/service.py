"""Ticket operations: the resolvers REST and GraphQL both call.

At most one open ticket per contact. The service looks for one first; two creates racing for
the same contact can both find none, so a partial unique index decides, and the create that
loses answers with the winner's ticket instead of failing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from app.access.subject import Subject
from app.channels import service as channels
from app.channels.models import Channel
from app.events.service import emit
from app.inbox.models import Ticket, TicketStatus
from app.inbox.repository import TicketRepository, joined_row
from app.inbox.schemas import TicketAssign, TicketCreate, ticket_to_public
from app.kit.errors import InvalidInput, InvalidState, NotFound
from app.kit.pagination import CursorPage, CursorParams
from app.organizations import repository as organizations

TICKET = "Ticket"
CONTACT = "Contact"
USER = "User"
# A lost race is answered by the winner's ticket; that ticket could be closed before we read
# it, so the create tries again, a few times at most.
CREATE_ATTEMPTS = 3


@dataclass(frozen=True, slots=True)
class CreatedTicket:
    ticket: Any  # a row of the ticket's shape (app/inbox/schemas.py), its contact's brief joined
    # False when the contact's open ticket already existed and is returned instead.
    created: bool


class ChannelNotFound(InvalidInput):
    code = "channel_not_found"

    def __init__(self) -> None:
        super().__init__("Channel/phone number not found", field="chat_phone_number_id")


async def create_ticket(
    session: AsyncSession, subject: Subject, data: TicketCreate, channel: Channel | None = None
) -> CreatedTicket:
    """The contact's open conversation in the mode of `chat_phone_number_id`'s channel (or,
    without one, of the credential), created when there is none. An existing open ticket
    without a channel takes the one named. `channel`: already resolved by the caller (the
    platform's inbound messages)."""
    repository = TicketRepository(session, subject)
    contact_id = str(data.contact_id)
    contact = await repository.contact_brief(contact_id)
    if contact is None:
        raise NotFound(CONTACT)
    if channel is None and data.chat_phone_number_id is not None:
        try:
            channel = await channels.get_channel_for_use(
                session, subject, str(data.chat_phone_number_id)
            )
        except NotFound as exc:
            raise ChannelNotFound() from exc
    livemode = subject.livemode if channel is None else channel.livemode
    for _attempt in range(CREATE_ATTEMPTS):
        existing = await repository.find_open(contact_id, livemode)
        if existing is not None:
            if channel is None or existing.chat_phone_number_id is not None:
                return CreatedTicket(existing, created=False)
            ticket, brief = await _locked(session, subject, existing.id)
            if ticket.chat_phone_number_id is None:
                ticket.chat_phone_number_id = channel.id
                await session.flush()
            return CreatedTicket(joined_row(ticket, brief), created=False)
        ticket = Ticket(
            organization_id=subject.organization_id,
            contact_id=contact_id,
            chat_phone_number_id=None if channel is None else channel.id,
            livemode=livemode,
            status=TicketStatus.OPEN.value,
        )
        try:
            # A savepoint: a failed insert leaves the request's transaction usable.
            async with session.begin_nested():
                repository.add(ticket)
                await session.flush()
        except IntegrityError:
            # Another create committed an open ticket first (or the contact was just
            # deleted): look again.
            continue
        row = joined_row(ticket, contact)
        public = ticket_to_public(row)
        await emit(session, ticket, "ticket.created", public)
        await emit(session, ticket, "conversation.started", public)
        return CreatedTicket(row, created=True)
    if await repository.contact_brief(contact_id) is None:
        raise NotFound(CONTACT)
    raise RuntimeError(f"no open ticket could be created or found for contact {contact_id}")


async def get_ticket(session: AsyncSession, subject: Subject, ticket_id: str) -> Any:
    """The ticket's row, its contact's brief joined."""
    return await TicketRepository(session, subject).get_row_or_404(ticket_id)


async def list_tickets(
    session: AsyncSession, subject: Subject, params: CursorParams, *, status: str | None = None
) -> CursorPage[Any]:
    """Newest first; `status` keeps only `open` or only `closed` tickets."""
    repository = TicketRepository(session, subject)
    return await repository.cursor_page(params, *repository.filters(status=status))


async def open_tickets_by_contact(
    session: AsyncSession, subject: Subject, contact_ids: Sequence[str]
) -> dict[str, Any]:
    """The open ticket of each of these contacts that has one, in one query."""
    rows = await TicketRepository(session, subject).open_for_contacts(contact_ids)
    return {row.contact_id: row for row in rows}


async def close_ticket(session: AsyncSession, subject: Subject, ticket_id: str) -> Any:
    """`open` → `closed`. Closing a closed ticket is refused (400 naming the state), as the
    spec refuses campaign moves from a state that does not allow them."""
    ticket, brief = await _locked(session, subject, ticket_id)
    if ticket.status != TicketStatus.OPEN.value:
        raise InvalidState(f"cannot close ticket in {ticket.status} state")
    ticket.status = TicketStatus.CLOSED.value
    await session.flush()
    row = joined_row(ticket, brief)
    public = ticket_to_public(row)
    await emit(session, ticket, "ticket.resolved", public)
    await emit(session, ticket, "conversation.closed", public)
    return row


async def assign_ticket(
    session: AsyncSession, subject: Subject, ticket_id: str, data: TicketAssign
) -> Any:
    """Hands an open ticket to a user of the organization. Assigning it to the user who
    already has it changes nothing and emits nothing."""
    ticket, brief = await _locked(session, subject, ticket_id)
    user_id = str(data.user_id)
    if not await organizations.users_by_ids(session, subject.organization_id, [user_id]):
        raise NotFound(USER)
    if ticket.status != TicketStatus.OPEN.value:
        raise InvalidState(f"cannot assign ticket in {ticket.status} state")
    if ticket.assigned_user_id == user_id:
        return joined_row(ticket, brief)
    ticket.assigned_user_id = user_id
    await session.flush()
    row = joined_row(ticket, brief)
    await emit(session, ticket, "ticket.assigned", ticket_to_public(row))
    return row


async def _locked(session: AsyncSession, subject: Subject, ticket_id: str) -> tuple[Ticket, Any]:
    """The ticket entity, its row locked, and its contact's brief columns."""
    found = await TicketRepository(session, subject).get_for_update(ticket_id)
    if found is None:
        raise NotFound(TICKET)
    return found.Ticket, found
