"""Placing an outbound call at most once toward the callee.

The place job (app/calls/tasks.py) stores `placement_attempted_at` in a committed
transaction before it asks the carrier for a live call. When the answer is lost (a timeout,
a dropped connection, a worker that died) the job engine runs the job again; that run finds
the mark and, before anything else, finds out whether the first request created a call:
- a status callback may already have named it (it carries the call log's id, and the status
  handler records the carrier's SID): the call is placed, nothing more to do;
- otherwise the carrier's call list (`Calls.json?To=&From=&StartTime>=`, and its queued
  calls) is read: a call created from the time of the request on, whose SID no other call
  log holds, is the one, and its SID is recorded;
- only a list read whole that shows no such call lets the run ask again;
- a list that cannot be read raises, and the job engine retries later. No second request
  is ever sent while the first one's fate is unknown.

No request is sent once `telephony_placement_deadline_seconds` have passed since dispatch
(the call ends `failed`, `placement_stalled`). The sweep (`end_unplaced_calls`, run with the
voice sweep) ends every outbound call still without a carrier SID after the deadline plus two
request timeouts: `placement_unconfirmed` when a request was sent but its call never
confirmed (the carrier was down for the lookups), `placement_stalled` when none was (the
place job was parked or lost). The stream token is cleared with it, so a call the carrier
did create after all connects to no agent and ends.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

import structlog
from sqlalchemy import select, text
from sqlalchemy.ext.asyncio import AsyncSession

from app.calls.models import UNPLACED_PREDICATE, CallLog
from app.calls.repository import call_log_for_carrier
from app.calls.schemas import call_log_to_public
from app.calls.telephony import CALL_COMPLETED, GATEWAY_ID_PREFIX, IN_PROGRESS
from app.config import Settings
from app.core.clock import utcnow
from app.events.service import emit
from app.integrations.telephony.base import ListedCall
from app.resources import Resources

logger = structlog.get_logger("switchboard.calls")

PLACEMENT_UNCONFIRMED = "placement_unconfirmed"
PLACEMENT_STALLED = "placement_stalled"
# The carrier's clock and ours may differ by this much.
CLOCK_SKEW = timedelta(seconds=60)
SWEEP_BATCH = 100


def deadline_passed(call_log: CallLog, settings: Settings) -> bool:
    """Too late to send a placement request (the sweep may end the call meanwhile)."""
    deadline = timedelta(seconds=settings.telephony_placement_deadline_seconds)
    return utcnow() >= call_log.started_at + deadline


def sweep_cutoff(settings: Settings) -> datetime:
    """Calls dispatched before this have had every request they will get, and its answer."""
    grace = settings.telephony_placement_deadline_seconds + 2 * settings.telephony_timeout_seconds
    return utcnow() - timedelta(seconds=grace)


async def mark_attempt(session: AsyncSession, call_log: CallLog) -> None:
    call_log.placement_attempted_at = utcnow()
    await session.flush()


async def sids_held(session: AsyncSession, sids: Sequence[str]) -> set[str]:
    """Which of `sids` are already some call log's carrier SID."""
    if not sids:
        return set()
    rows = await session.scalars(select(CallLog.call_id).where(CallLog.call_id.in_(list(sids))))
    return set(rows.all())


def earlier_placement(
    listed: Sequence[ListedCall],
    call_log: CallLog,
    held: set[str],
    request_timeout_seconds: float,
) -> ListedCall | None:
    """The call the lost request created: to and from the call's numbers, created between
    the request and its timeout (with clock skew), held by no other call log; the first."""
    attempted = call_log.placement_attempted_at
    if attempted is None:
        return None
    earliest = attempted - CLOCK_SKEW
    latest = attempted + timedelta(seconds=request_timeout_seconds) + CLOCK_SKEW
    for call in listed:
        if call.sid in held or call.created_at is None:
            continue
        if call.to_number != call_log.to_number or call.from_number != call_log.from_number:
            continue
        if earliest <= call.created_at <= latest:
            return call
    return None


async def end_unplaced(session: AsyncSession, call_log: CallLog, reason: str) -> None:
    """End an outbound call the carrier never confirmed: `failed` with `reason`."""
    call_log.status = "failed"
    call_log.end_reason = reason
    call_log.stream_token_hash = None
    call_log.ended_at = max(utcnow(), call_log.started_at)
    call_log.duration_seconds = 0
    await session.flush()
    await emit(session, call_log, CALL_COMPLETED, call_log_to_public(call_log))


async def unplaced_before(session: AsyncSession, cutoff: datetime, limit: int) -> list[str]:
    """Outbound calls still without a carrier SID, dispatched before `cutoff` (the partial
    index ix_call_logs_unplaced_started_at serves it: the predicate is the index's)."""
    statement = (
        select(CallLog.id)
        .where(text(UNPLACED_PREDICATE), CallLog.started_at < cutoff)
        .order_by(CallLog.started_at)
        .limit(limit)
    )
    return list((await session.scalars(statement)).all())


async def end_unplaced_calls(session: AsyncSession, settings: Settings) -> int:
    """End every call the carrier did not confirm in time; the caller commits. Returns how
    many calls it ended."""
    ended = 0
    for call_log_id in await unplaced_before(session, sweep_cutoff(settings), SWEEP_BATCH):
        call_log = await call_log_for_carrier(session, call_log_id)
        if (
            call_log is None
            or call_log.status != IN_PROGRESS
            or not call_log.call_id.startswith(GATEWAY_ID_PREFIX)
            or call_log.direction != "outbound"
        ):
            continue  # placed or ended meanwhile
        attempted = call_log.placement_attempted_at is not None
        reason = PLACEMENT_UNCONFIRMED if attempted else PLACEMENT_STALLED
        await end_unplaced(session, call_log, reason)
        logger.warning(
            "outbound call never confirmed by the carrier; ended",
            call_log_id=call_log_id,
            reason=reason,
        )
        ended += 1
    return ended


async def sweep(resources: Resources) -> int:
    """The placement sweep in its own transaction (run by the voice sweep's loop)."""
    async with resources.session(writes=True) as session:
        ended = await end_unplaced_calls(session, resources.settings)
        await session.commit()
    return ended
