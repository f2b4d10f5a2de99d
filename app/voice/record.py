"""What a live call leaves in its call log, written while it runs and when it ends.

Progress (`record_progress`): the transcript so far, the engine's events of the turns since
the last write, and the media heartbeat, in one short transaction every few segments and at
every heartbeat; a process that dies leaves the transcript up to its last write, and the
sweep (`fail_stale_streams`) ends the call `failed` with `process_lost` once its heartbeat is
older than `voice_stale_after_seconds` (a browser session never opened: `not_connected`,
its heartbeat being its token's expiry). The end (`finish_call`): status, duration, summary,
usage and cost, `end_reason`, `call.completed`, and for a completed live call the job that
adds the carrier's price and recording later (app/calls/tasks.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import structlog
from sqlalchemy.ext.asyncio import AsyncSession

from app.calls.analysis import analyze_after_call
from app.calls.repository import call_log_for_carrier, stale_streams
from app.calls.schemas import call_log_to_public
from app.calls.telephony import CALL_COMPLETED, CALLS_QUEUE, FETCH_DETAILS_ACTOR, IN_PROGRESS
from app.core.clock import utcnow
from app.events.service import emit
from app.kit import outbox
from app.resources import Resources

logger = structlog.get_logger("switchboard.voice")

PROCESS_LOST = "process_lost"
NOT_CONNECTED = "not_connected"
SWEEP_BATCH = 100


@dataclass
class CallOutcome:
    status: str  # completed or failed
    end_reason: str
    duration_seconds: int
    transcript: list[dict[str, Any]]
    summary: str
    usage_cost: float
    tokens: tuple[int, int]
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


async def record_progress(
    session: AsyncSession,
    call_log_id: str,
    transcript: list[dict[str, Any]],
    events: list[tuple[str, dict[str, Any]]],
) -> bool:
    """Store the transcript so far and emit `events`; False once the call has ended (its
    log no longer takes progress)."""
    call_log = await call_log_for_carrier(session, call_log_id)
    if call_log is None or call_log.status != IN_PROGRESS:
        return False
    call_log.transcript = list(transcript)
    call_log.media_heartbeat_at = utcnow()
    await session.flush()
    for event_type, data in events:
        await emit(session, call_log, event_type, data)
    return True


async def finish_call(session: AsyncSession, call_log_id: str, outcome: CallOutcome) -> bool:
    """End the call with everything it left; False when it had ended already (the sweep
    was first): then only the transcript and summary are kept, if it had none."""
    call_log = await call_log_for_carrier(session, call_log_id)
    if call_log is None:
        return False
    call_log.media_heartbeat_at = None
    call_log.stream_token_hash = None
    if call_log.status != IN_PROGRESS:
        if not call_log.transcript:
            call_log.transcript = outcome.transcript
        call_log.summary = call_log.summary or outcome.summary
        await session.flush()
        return False
    call_log.status = outcome.status
    call_log.end_reason = outcome.end_reason
    call_log.duration_seconds = outcome.duration_seconds
    call_log.ended_at = max(utcnow(), call_log.started_at)
    call_log.transcript = outcome.transcript
    call_log.summary = outcome.summary
    call_log.usage_cost = round(outcome.usage_cost, 8)
    call_log.cost = call_log.usage_cost
    call_log.input_tokens, call_log.output_tokens = outcome.tokens
    await session.flush()
    for event_type, data in outcome.events:
        await emit(session, call_log, event_type, data)
    await analyze_after_call(session, call_log)
    await emit(session, call_log, CALL_COMPLETED, call_log_to_public(call_log))
    if call_log.livemode and call_log.call_id.startswith("CA") and outcome.status == "completed":
        outbox.schedule(session, FETCH_DETAILS_ACTOR, call_log.id, queue=CALLS_QUEUE)
    return True


async def fail_stale_streams(resources: Resources, stale_after_seconds: float) -> int:
    """End `failed` (`process_lost`) every call whose media process stopped beating; the
    transcript it wrote so far stays. Returns how many calls it ended."""
    ended = 0
    cutoff = utcnow() - timedelta(seconds=stale_after_seconds)
    async with resources.session(writes=True) as session:
        call_log_ids = await stale_streams(session, cutoff, SWEEP_BATCH)
        for call_log_id in call_log_ids:
            call_log = await call_log_for_carrier(session, call_log_id)
            if call_log is None or call_log.status != IN_PROGRESS:
                continue
            heartbeat = call_log.media_heartbeat_at
            if heartbeat is None or heartbeat >= cutoff:
                continue  # beat again meanwhile
            call_log.status = "failed"
            # A token still stored: a browser session that was never opened (app/calls/web.py).
            opened = call_log.stream_token_hash is None
            call_log.end_reason = PROCESS_LOST if opened else NOT_CONNECTED
            call_log.media_heartbeat_at = None
            call_log.stream_token_hash = None
            call_log.ended_at = max(utcnow(), call_log.started_at)
            elapsed = (heartbeat - call_log.started_at).total_seconds()
            call_log.duration_seconds = max(0, round(elapsed)) if opened else 0
            await session.flush()
            await analyze_after_call(session, call_log)
            await emit(session, call_log, CALL_COMPLETED, call_log_to_public(call_log))
            ended += 1
        await session.commit()
    if ended:
        logger.warning("calls of a lost voice process ended", count=ended)
    return ended
