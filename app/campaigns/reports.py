"""What dashboards read about a campaign: its recipient ledger page by page, its stats, its
progress as it happens, and the ledger as CSV.

Counters come from the campaign row (the dispatch path keeps them equal to the ledger) and
recipient statuses from the ledger; nothing here counts the ledger to make a counter. Reads
only: every write belongs to app/campaigns/service.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import structlog
from sqlalchemy.ext.asyncio import AsyncSession

from app.access.subject import Subject
from app.campaigns import ledger_reads, service
from app.campaigns.models import CampaignStatus, RecipientStatus
from app.campaigns.repository import CampaignRepository
from app.contacts.repository import ContactRepository
from app.core.ids import normalize_id
from app.kit.csvcells import csv_safe, csv_timestamp, encode_rows
from app.kit.errors import InvalidInput
from app.kit.event_stream import PendingRead
from app.kit.pagination import MAX_LIMIT, CursorPage

logger = structlog.get_logger("switchboard.campaigns")

OpenSession = Callable[[], AbstractAsyncContextManager[AsyncSession]]

DEFAULT_FIRST = 20
# Rows per read of a CSV export: each batch is one short read of its own.
EXPORT_BATCH = 1000
# A campaign in these states can still change; completed and cancelled ones cannot.
FINISHED = frozenset({CampaignStatus.COMPLETED.value, CampaignStatus.CANCELLED.value})
# States in which dispatch or status callbacks move the counters: the row is re-read often.
MOVING = frozenset(
    {CampaignStatus.SCHEDULED.value, CampaignStatus.SENDING.value, CampaignStatus.PAUSED.value}
)
# A draft changes only when launched (scheduled campaigns emit nothing then): re-read slowly.
DRAFT_RECHECK_SECONDS = 5.0
# After an event, the row is re-read at most this often: a campaign at 1,000 messages/s
# emits as many events, and one read answers them all.
EVENT_READ_GAP_SECONDS = 0.1
# The events of a campaign on the organization's stream (app/kit/event_stream.py).
CAMPAIGN_EVENTS = frozenset({service.STARTED, service.COMPLETED})
RECIPIENT_EVENTS = frozenset({service.MESSAGE_DELIVERED, service.MESSAGE_FAILED})


# --- the recipient ledger, page by page ----------------------------------------------------


@dataclass(frozen=True, slots=True)
class RecipientQuery:
    """One `recipients(status, first, after)` selection: statuses (None: every one), page
    size and the contact id after which the page starts."""

    statuses: tuple[str, ...] | None
    first: int
    after: str | None


def _no_such_cursor(after: str) -> InvalidInput:
    return InvalidInput(f"after: no such object: '{after}'", field="after")


def recipient_query(
    statuses: Sequence[str] | None, first: int | None, after: str | None
) -> RecipientQuery:
    """The arguments checked: `first` within 1..100, `after` a contact id, `statuses` not an
    empty list (leave it out for every recipient)."""
    size = DEFAULT_FIRST if first is None else first
    if not 1 <= size <= MAX_LIMIT:
        raise InvalidInput(f"first must be between 1 and {MAX_LIMIT}", field="first")
    cursor = None
    if after is not None:
        cursor = normalize_id(after)
        if cursor is None:
            raise _no_such_cursor(after)
    wanted = None
    if statuses is not None:
        if not statuses:
            raise InvalidInput(
                "status must name at least one status; leave it out for every recipient",
                field="status",
            )
        wanted = tuple(dict.fromkeys(RecipientStatus(status).value for status in statuses))
    return RecipientQuery(wanted, size, cursor)


async def recipient_pages(
    session: AsyncSession, campaign_ids: Sequence[str], query: RecipientQuery
) -> dict[str, CursorPage[Any] | InvalidInput]:
    """One page of each campaign's ledger, in contact id order (a stable keyset: a recipient
    whose status changes keeps its place). A cursor that is not a recipient of the campaign
    is that campaign's error. The campaigns must have been read for the caller already."""
    ids = list(dict.fromkeys(campaign_ids))
    answers: dict[str, CursorPage[Any] | InvalidInput] = {}
    earlier: dict[str, bool] = {}
    if query.after is not None:
        checks = await ledger_reads.cursor_checks(session, ids, query.statuses, query.after)
        for campaign_id, (named, before) in checks.items():
            if not named:
                answers[campaign_id] = _no_such_cursor(query.after)
            earlier[campaign_id] = before
        ids = [campaign_id for campaign_id in ids if campaign_id not in answers]
    rows = await ledger_reads.recipient_rows(
        session, ids, query.statuses, query.after, query.first + 1
    )
    totals = await ledger_reads.recipient_counts(session, ids, query.statuses)
    for campaign_id in ids:
        found = rows[campaign_id]
        answers[campaign_id] = CursorPage(
            items=found[: query.first],
            has_more=len(found) > query.first,
            total_count=totals[campaign_id],
            has_previous=earlier.get(campaign_id, False),
        )
    return answers


async def recipient_contacts(
    session: AsyncSession, subject: Subject, contact_ids: Sequence[str]
) -> dict[str, Any]:
    """The caller's organization's contacts among `contact_ids`, by id (deleted ones absent)."""
    return await ContactRepository(session, subject.organization_id).rows_by_ids(contact_ids)


# --- stats and progress ----------------------------------------------------------------------


def _ratio(part: int, whole: int) -> float | None:
    return None if whole <= 0 else round(part / whole, 4)


@dataclass(frozen=True, slots=True)
class CampaignStats:
    """The campaign row's counters and the rates derived from them (no ledger read)."""

    total: int
    pending: int
    sent: int
    delivered: int
    read: int
    failed: int
    delivery_rate: float | None
    read_rate: float | None
    failure_rate: float | None
    progress: float | None


def campaign_stats(row: Any) -> CampaignStats:
    """`row`: anything with the campaign's counters (an entity or a plain row). `sent`
    counts every recipient handed to the platform (delivered and read ones too), `delivered`
    the read ones too; `pending` is what is neither sent nor failed yet."""
    total, sent, failed = row.total_contacts_count, row.sent_count, row.failed_count
    delivered, read = row.delivered_count, row.read_count
    return CampaignStats(
        total=total,
        pending=max(total - sent - failed, 0),
        sent=sent,
        delivered=delivered,
        read=read,
        failed=failed,
        delivery_rate=_ratio(delivered, sent),
        read_rate=_ratio(read, delivered),
        failure_rate=_ratio(failed, sent + failed),
        progress=_ratio(sent + failed, total),
    )


@dataclass(frozen=True, slots=True)
class ProgressSnapshot:
    campaign_id: str
    status: str
    stats: CampaignStats
    started_at: datetime | None
    completed_at: datetime | None

    @property
    def finished(self) -> bool:
        return self.status in FINISHED


def _snapshot(row: Any) -> ProgressSnapshot:
    return ProgressSnapshot(
        campaign_id=row.id,
        status=row.status,
        stats=campaign_stats(row),
        started_at=row.started_at,
        completed_at=row.completed_at,
    )


async def progress_snapshot(
    session: AsyncSession, subject: Subject, campaign_id: str
) -> ProgressSnapshot:
    """The campaign's status and counters now; NotFound as `get_campaign` (unknown, another
    organization's, or a live campaign for a test key)."""
    return _snapshot(await service.get_campaign(session, subject, campaign_id))


async def reread_progress(
    open_session: OpenSession, organization_id: str, campaign_id: str
) -> ProgressSnapshot | None:
    """One primary-key read of the campaign row, in a short session of its own."""
    async with open_session() as session:
        row = await CampaignRepository(session, organization_id).progress_row(campaign_id)
    return None if row is None else _snapshot(row)


def concerns(body: dict[str, Any], campaign_id: str, livemode: bool) -> bool:
    """Whether an event of the organization's stream is about this campaign."""
    if body.get("livemode") is not livemode:
        return False
    data = body.get("data") or {}
    kind = body.get("type")
    if kind in CAMPAIGN_EVENTS:
        return bool(data.get("id") == campaign_id)
    if kind in RECIPIENT_EVENTS:
        return bool(data.get("campaign_id") == campaign_id)
    return False


class CampaignGone(Exception):
    """The campaign was deleted while watched (a draft)."""


async def watch_progress(
    first: ProgressSnapshot,
    *,
    open_session: OpenSession,
    events: AsyncIterator[dict[str, Any]],
    organization_id: str,
    livemode: bool,
    poll_seconds: float,
    before_yield: Callable[[], Awaitable[None]],
) -> AsyncIterator[ProgressSnapshot]:
    """`first`, then every change of the campaign's status or counters, until it is
    completed or cancelled. The campaign's events on `events` trigger a re-read of its row at
    once (not every counter change has an event), and while it is scheduled, sending or
    paused the row is re-read every `poll_seconds` anyway: the row is the truth, the stream
    only makes changes arrive sooner. Should the stream fail, polling carries on alone.
    `before_yield` runs before each change is handed out (the credential re-check)."""
    yield first
    if first.finished:
        return
    loop = asyncio.get_running_loop()
    current = first
    last_read = loop.time()
    dirty = False
    reads = PendingRead(events)
    stream_alive = True
    try:
        while True:
            wait = poll_seconds if current.status in MOVING else DRAFT_RECHECK_SECONDS
            due = last_read + (EVENT_READ_GAP_SECONDS if dirty else wait)
            timeout = due - loop.time()
            # Once a read is due it happens, however many events are still queued.
            if timeout > 0 and stream_alive:
                try:
                    body = await reads.next(timeout)
                except Exception:
                    logger.warning("event stream failed; progress by polling only")
                    stream_alive = False
                    continue
                if body is not None:
                    dirty = dirty or concerns(body, current.campaign_id, livemode)
                    continue
            elif timeout > 0:
                await asyncio.sleep(timeout)
            last_read, dirty = loop.time(), False
            latest = await reread_progress(open_session, organization_id, current.campaign_id)
            if latest is None:
                raise CampaignGone()
            if latest != current:
                await before_yield()
                current = latest
                yield latest
            if latest.finished:
                return
    finally:
        await reads.close()
        close = getattr(events, "aclose", None)
        if close is not None:
            await close()


# --- CSV export --------------------------------------------------------------------------------

CSV_COLUMNS = (
    "contact_id",
    "phone_number",
    "name",
    "status",
    "platform_message_id",
    "error",
    "sent_at",
    "delivered_at",
    "read_at",
    "failed_at",
)


def _csv_row(row: Any) -> list[str]:
    return [
        row.contact_id,
        csv_safe(row.phone_number),
        csv_safe(row.name),
        row.status,
        csv_safe(row.platform_message_id),
        csv_safe(row.error),
        csv_timestamp(row.sent_at),
        csv_timestamp(row.delivered_at),
        csv_timestamp(row.read_at),
        csv_timestamp(row.failed_at),
    ]


async def recipients_csv(
    open_session: OpenSession, campaign_id: str, batch: int = EXPORT_BATCH
) -> AsyncIterator[bytes]:
    """The campaign's ledger as CSV (RFC 4180, CRLF lines): the header, then one chunk per
    `batch` recipients in contact id order. Each batch is a short read in a session of its
    own, so no transaction stays open while the client reads, and memory holds one batch
    whatever the campaign's size. Every recipient appears once, as it was when its batch
    was read."""
    yield encode_rows([list(CSV_COLUMNS)])
    after: str | None = None
    while True:
        async with open_session() as session:
            rows = await ledger_reads.export_batch(session, campaign_id, after, batch)
        if not rows:
            return
        yield encode_rows([_csv_row(row) for row in rows])
        if len(rows) < batch:
            return
        after = rows[-1].contact_id


def csv_file_name(campaign_id: str) -> str:
    return f"campaign-{campaign_id}-recipients.csv"
