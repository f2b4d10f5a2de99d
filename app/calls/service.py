"""Call log operations: the resolvers REST and GraphQL both call, and the recording entry point
the telephony side (and tests, until calls can be placed) writes logs through."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC
from typing import Any, Protocol

from sqlalchemy.ext.asyncio import AsyncSession

from app.access.subject import Subject
from app.calls.models import CallLog
from app.calls.repository import CallLogRepository
from app.calls.schemas import CallLogListQuery, CallLogRecord
from app.contacts.repository import ContactRepository
from app.core.clock import utcnow
from app.core.ids import normalize_id
from app.kit.errors import InvalidInput, NotFound
from app.kit.pagination import NumberedPage, PageParams
from app.kit.phone import to_e164

MAX_RECENT_CALLS = 20


class CallLogOwner(Protocol):
    """Whose call it is: a Subject, or whatever else names an organization and a mode (a
    worker handling a carrier callback has no Subject)."""

    @property
    def organization_id(self) -> str: ...

    @property
    def livemode(self) -> bool: ...


def _uuid_or_none(value: str | None, field: str) -> str | None:
    if value is None:
        return None
    canonical = normalize_id(value)
    if canonical is None:
        raise InvalidInput(f"{field} must be a UUID", field=field)
    return canonical


async def record_call_log(
    session: AsyncSession, owner: CallLogOwner, data: CallLogRecord
) -> CallLog:
    """Store the log of one call of `owner`'s organization, in its mode (live or test)."""
    contact_id = _uuid_or_none(data.contact_id, "contact_id")
    if contact_id is not None:
        contact = await ContactRepository(session, owner.organization_id).get_row(contact_id)
        if contact is None:
            raise NotFound("Contact")
    call_log = CallLog(
        organization_id=owner.organization_id,
        livemode=owner.livemode,
        call_id=data.call_id,
        agent_id=_uuid_or_none(data.agent_id, "agent_id"),
        chat_phone_number_id=_uuid_or_none(data.chat_phone_number_id, "chat_phone_number_id"),
        phone_number_id=data.phone_number_id,
        contact_id=contact_id,
        from_number=to_e164(data.from_number, "from_number"),
        to_number=to_e164(data.to_number, "to_number"),
        direction=data.direction,
        status=data.status,
        duration_seconds=data.duration_seconds,
        started_at=data.started_at.astimezone(UTC) if data.started_at else utcnow(),
        ended_at=data.ended_at.astimezone(UTC) if data.ended_at else None,
        recording_url=data.recording_url,
        transcript=[segment.model_dump() for segment in data.transcript],
        summary=data.summary,
        cost=data.cost,
    )
    if call_log.ended_at is not None and call_log.ended_at < call_log.started_at:
        raise InvalidInput("ended_at cannot be before started_at", field="ended_at")
    CallLogRepository(session, owner.organization_id).add(call_log)
    await session.flush()
    return call_log


async def get_call_log(session: AsyncSession, subject: Subject, call_log_id: str) -> Any:
    return await CallLogRepository(session, subject).get_row_or_404(call_log_id)


async def list_call_logs(
    session: AsyncSession, subject: Subject, query: CallLogListQuery
) -> NumberedPage[Any]:
    """Newest call first (by started_at), envelope B paging, optional filters."""
    repository = CallLogRepository(session, subject)
    filters = repository.filters(
        direction=query.direction, status=query.status, search=query.search
    )
    return await repository.numbered_page(PageParams(query.page, query.page_size), *filters)


def check_recent_calls_limit(limit: int) -> None:
    if not 1 <= limit <= MAX_RECENT_CALLS:
        raise InvalidInput(f"limit must be between 1 and {MAX_RECENT_CALLS}", field="limit")


async def recent_calls_by_contact(
    session: AsyncSession, subject: Subject, contact_ids: Sequence[str], limit: int
) -> dict[str, list[Any]]:
    """The `limit` newest calls of each contact (of the caller's organization), by contact id."""
    check_recent_calls_limit(limit)
    unique_ids = list(dict.fromkeys(contact_ids))
    rows = await CallLogRepository(session, subject).recent_for_contacts(unique_ids, limit)
    by_contact: dict[str, list[Any]] = {contact_id: [] for contact_id in unique_ids}
    for row in rows:
        by_contact[row.contact_id].append(row)
    return by_contact
