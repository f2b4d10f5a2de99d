"""Delivery statuses (`statuses[]` of a webhook), applied to the channel that holds the number.

A status moves the campaign recipient or the conversation message with its platform id that
was sent through *this* channel, never another channel's. Each is checked before anything is
written (`usable_status`: an id of at most 128 printable characters, one of the four statuses,
an error line without NUL): one that cannot be stored is skipped with a log line, the others
are applied.

A status can overtake the send it is about (the platform's id is stored when the send
settles: a campaign's ledger within ~100 ms, a reply when its request commits). One whose id
no message of the channel holds yet is parked, at most `MAX_PARKED_PER_CHANNEL` per channel
(beyond that dropped, with a log line), and the channel's one retry job tries the parked ones
again every `RETRY_INTERVAL` until `RETRY_WINDOW` after they arrived, then drops them with a
log line. The job runs on its own low-priority queue, so a storm of unknown statuses costs one
job per number, never one per status, and never holds up other queues' jobs.

One job per channel: its outbox id is derived from the channel's. Parking and the job's last
step both lock the channel's row first, so a status parked while the job decides it is done is
never left without a job.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import structlog
from sqlalchemy import delete, func, insert, select
from sqlalchemy.ext.asyncio import AsyncSession

from app.campaigns import meta_limits
from app.campaigns import repository as ledger
from app.campaigns import statuses as campaigns
from app.channels.models import Channel
from app.channels.repository import lock_channel
from app.conversations import service
from app.conversations.models import ParkedStatus
from app.conversations.repository import known_message_ids
from app.core.clock import utcnow
from app.db import lists
from app.kit import outbox
from app.kit.outbox_models import OutboxJob

logger = structlog.get_logger("switchboard.whatsapp.statuses")

STATUS_RETRY_ACTOR = "whatsapp.status_retry"
STATUS_RETRY_QUEUE = "status_retries"
# Behind every other job a worker holds (Dramatiq: lower runs first).
STATUS_RETRY_PRIORITY = 100
RETRY_INTERVAL = timedelta(seconds=2)
RETRY_WINDOW = timedelta(seconds=60)
MAX_PARKED_PER_CHANNEL = 1000
STATUS_VALUES = frozenset({"sent", "delivered", "read", "failed"})
# Up to this many statuses in a change are looked up one by one as they are applied.
FEW_STATUSES = 8
MAX_ERROR_LENGTH = 1000
_JOB_NAMESPACE = uuid.UUID("0b8f2a52-8d2e-4d6c-9a53-6f1f1c3a7e10")


def retry_job_id(channel_id: str) -> str:
    """The outbox id of the channel's retry job: one such job per channel."""
    return str(uuid.uuid5(_JOB_NAMESPACE, f"status-retry:{channel_id}"))


def usable_status(entry: Any) -> dict[str, Any] | None:
    """A `statuses[]` entry reduced to what applying it reads (its errors as one line), or
    None when it cannot name one of our messages or says nothing we record."""
    if not isinstance(entry, dict) or entry.get("status") not in STATUS_VALUES:
        return None
    message_id = service.usable_platform_id(entry.get("id"))
    if message_id is None:
        return None
    timestamp = entry.get("timestamp")
    error = service.error_text(entry.get("errors"))
    return {
        "id": message_id,
        "status": entry["status"],
        "timestamp": timestamp if isinstance(timestamp, str | int) else None,
        # Text of the platform's (and of the recipient's side): PostgreSQL refuses NUL in it.
        "error": error.replace("\x00", "")[:MAX_ERROR_LENGTH] if error else None,
        "error_code": meta_limits.error_code_of(entry.get("errors")),
        "pricing": meta_limits.pricing_of(entry),
    }


async def apply_statuses(
    session: AsyncSession,
    channel: Channel,
    entries: Sequence[Any],
    deferral: meta_limits.DeferralPolicy | None = None,
) -> None:
    """The statuses of one webhook change, for the channel holding its number (`deferral`:
    how a campaign recipient refused for Meta's marketing limit is tried again)."""
    usable = [status for status in map(usable_status, entries) if status is not None]
    if len(usable) < len(entries):
        logger.info(
            "statuses without a usable id or status skipped",
            channel_id=channel.id,
            skipped=len(entries) - len(usable),
        )
    if not usable:
        return
    # A big batch: which ids name a message at all, in two statements, instead of a lookup
    # per status (what a storm of unknown ids would cost).
    known = None
    if len(usable) > FEW_STATUSES:
        known = await _known(session, channel.id, [status["id"] for status in usable])
    unknown = []
    for status in usable:
        held = known is None or status["id"] in known
        if not (held and await _apply(session, channel, status, deferral)):
            unknown.append(status)
    if unknown:
        await _park(session, channel.id, unknown)


async def _known(session: AsyncSession, channel_id: str, message_ids: list[str]) -> set[str]:
    in_campaigns = await ledger.known_message_ids(session, channel_id, message_ids)
    return in_campaigns | await known_message_ids(session, channel_id, message_ids)


async def _apply(
    session: AsyncSession,
    channel: Channel,
    status: dict[str, Any],
    deferral: meta_limits.DeferralPolicy | None = None,
) -> bool:
    """False when no message of the channel has the status's id. Validated before (see
    `usable_status`), a status is written without a savepoint of its own: the hot path of a
    campaign's callbacks pays no extra round trips."""
    if await campaigns.apply_status(session, channel.id, status, status["error"], deferral):
        return True
    return await service.apply_status(session, channel, status, status["error"]) is not None


async def _park(session: AsyncSession, channel_id: str, statuses: list[dict[str, Any]]) -> None:
    await lock_channel(session, channel_id)
    parked = await session.scalar(
        select(func.count()).select_from(ParkedStatus).where(ParkedStatus.channel_id == channel_id)
    )
    room = MAX_PARKED_PER_CHANNEL - int(parked or 0)
    fresh = await _not_parked_yet(session, channel_id, statuses) if room > 0 else statuses
    kept = fresh[: max(room, 0)]
    if len(fresh) > len(kept):
        logger.warning(
            "statuses about unknown messages dropped: the channel has as many waiting as it may",
            channel_id=channel_id,
            dropped=len(fresh) - len(kept),
            limit=MAX_PARKED_PER_CHANNEL,
        )
    if not kept:
        return
    now = utcnow()
    await session.execute(
        insert(ParkedStatus),
        [
            {
                "channel_id": channel_id,
                "platform_message_id": status["id"],
                "status": status,
                "expires_at": now + RETRY_WINDOW,
                "created_at": now,
            }
            for status in kept
        ],
    )
    job_id = retry_job_id(channel_id)
    if await session.scalar(select(OutboxJob.id).where(OutboxJob.id == job_id)) is None:
        outbox.schedule(
            session,
            STATUS_RETRY_ACTOR,
            channel_id,
            queue=STATUS_RETRY_QUEUE,
            at=now + RETRY_INTERVAL,
            job_id=job_id,
        )


async def _not_parked_yet(
    session: AsyncSession, channel_id: str, statuses: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """`statuses` without those already waiting (a status repeated by the platform, or twice
    in one batch, waits once)."""
    seen: set[tuple[str, str]] = set()
    message_ids = [status["id"] for status in statuses]
    for chunk in lists.chunks(session, message_ids):
        rows = await session.execute(
            select(ParkedStatus.platform_message_id, ParkedStatus.status).where(
                ParkedStatus.channel_id == channel_id,
                lists.one_of(session, ParkedStatus.platform_message_id, chunk),
            )
        )
        seen.update((message_id, str(status.get("status"))) for message_id, status in rows)
    fresh = []
    for status in statuses:
        if (status["id"], status["status"]) not in seen:
            seen.add((status["id"], status["status"]))
            fresh.append(status)
    return fresh


async def retry_parked(
    session: AsyncSession, channel_id: str, deferral: meta_limits.DeferralPolicy | None = None
) -> datetime | None:
    """One run of the channel's retry job: drop the expired, apply those whose message is
    now known; when to run again, or None when none is left (the caller settles the job in
    this same transaction)."""
    channel = await session.get(Channel, channel_id)
    if channel is None:
        return None  # deleted since: its parked statuses went with it
    now = utcnow()
    expired = await session.execute(
        delete(ParkedStatus).where(
            ParkedStatus.channel_id == channel_id, ParkedStatus.expires_at <= now
        )
    )
    if dropped := getattr(expired, "rowcount", 0):
        logger.info("expired statuses dropped", channel_id=channel_id, dropped=dropped)
    rows = list(
        await session.scalars(
            select(ParkedStatus)
            .where(ParkedStatus.channel_id == channel_id)
            .order_by(ParkedStatus.expires_at, ParkedStatus.id)
            .limit(MAX_PARKED_PER_CHANNEL)
        )
    )
    known = await _known(session, channel_id, [row.platform_message_id for row in rows])
    done = [row for row in rows if row.platform_message_id in known]
    for row in done:
        await _apply(session, channel, row.status, deferral)
    if done:
        await session.execute(
            delete(ParkedStatus).where(ParkedStatus.id.in_([row.id for row in done]))
        )
    await lock_channel(session, channel_id)
    left = await session.scalar(
        select(ParkedStatus.id).where(ParkedStatus.channel_id == channel_id).limit(1)
    )
    return None if left is None else now + RETRY_INTERVAL
