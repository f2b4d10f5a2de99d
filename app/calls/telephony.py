"""Calls placed and followed through the carrier: dispatch, the status handler both carriers
report through, and the steps the calls jobs (app/calls/tasks.py) take.

A dispatched call is logged `in-progress` at once under a gateway id (`sb_…`); the place job
hands it to the carrier (the simulator for test mode, the real client for live mode) and
records the carrier's call SID. From then on only `apply_status` moves the call, forward
only: once a call has ended, no callback moves it again.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any
from urllib.parse import urlencode

from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncSession

from app.access.subject import Subject
from app.agents.repository import AgentRepository
from app.agents.schemas import ACTIVE
from app.agents.service import INVALID_ID_MESSAGE
from app.calls.analysis import analyze_after_call
from app.calls.models import CallLog
from app.calls.repository import (
    CallLogRepository,
    PhoneNumberRepository,
    assignment_for_number,
    call_log_by_call_id,
    call_log_for_carrier,
    live_calls_under_way,
)
from app.calls.schemas import CallDispatch, call_log_to_public
from app.calls.stream_tokens import new_stream_token
from app.contacts.repository import ContactRepository
from app.core.clock import utcnow
from app.core.ids import normalize_id
from app.engine.limits import ConversationLimitReached, ConversationLimits
from app.events.service import emit
from app.integrations.telephony.base import CARRIER_STATUS_TO_CALL_STATUS, END_STATUSES
from app.kit import outbox
from app.kit.errors import InvalidInput, NotFound, RateLimited
from app.kit.phone import to_e164

CALLS_QUEUE = "calls"
PLACE_ACTOR = "calls.place"
SIMULATE_ACTOR = "calls.simulate"
FETCH_DETAILS_ACTOR = "calls.fetch_details"
CALL_STARTED = "call.started"
CALL_COMPLETED = "call.completed"
GATEWAY_ID_PREFIX = "sb_"
IN_PROGRESS = "in-progress"
# The caller id of a test-mode call when none is given (the carrier's valid test number).
TEST_FROM_NUMBER = "+15005550006"
STATUS_PATH = "/webhooks/telephony/status"
INCOMING_PATH = "/webhooks/telephony/incoming"
# The asynchronous answering-machine verdict of an outbound live call.
MACHINE_DETECTION_PATH = "/webhooks/telephony/machine-detection"
# Where the carrier's media streams of live calls connect (websocket; app/voice/).
MEDIA_STREAM_PATH = "/voice/twilio"
# How long a 429 for too many live calls asks to wait: calls last minutes.
LIVE_CALLS_RETRY_AFTER = 30.0
# How long after a live call ended its price and recording are still asked for.
DETAILS_WINDOW = timedelta(hours=1)
DETAILS_RETRY = timedelta(minutes=1)


def is_placed(call_log: CallLog) -> bool:
    return not call_log.call_id.startswith(GATEWAY_ID_PREFIX)


class ContactRefusesCalls(InvalidInput):
    """The number is a contact's who asked not to be called (docs/api.md, "Consent")."""

    code = "do_not_call"

    def __init__(self) -> None:
        super().__init__("The contact asked not to be called", field="to_number")


class LiveCallLimitReached(RateLimited):
    """The organization already has its maximum of live calls under way."""

    def __init__(self) -> None:
        super().__init__(LIVE_CALLS_RETRY_AFTER)
        self.message = "Too many live calls under way for this organization; retry later."


async def has_room_for_live_call(session: AsyncSession, organization_id: str, limit: int) -> bool:
    return await live_calls_under_way(session, organization_id) < limit


async def dispatch_call(
    session: AsyncSession,
    subject: Subject,
    data: CallDispatch,
    *,
    max_live_calls: int,
    limits: ConversationLimits,
) -> CallLog:
    """Log an outbound call of one of the organization's active agents and queue its
    placement; `call.started` is emitted in the same transaction. A live call over the
    organization's `max_live_calls` under way is refused (429), and so is any call while the
    organization holds all its concurrent AI conversations (the agent could not talk)."""
    agent_id = normalize_id(data.agent_id.strip())
    if agent_id is None:
        raise InvalidInput(INVALID_ID_MESSAGE, field="agent_id")
    agent = await AgentRepository(session, subject).get_row(agent_id)
    if agent is None:
        raise NotFound("Agent")
    if agent.status != ACTIVE:
        raise InvalidInput(f"Agent is not active (status: {agent.status})", field="agent_id")
    to_number = to_e164(data.to_number, "to_number")
    if await ContactRepository(session, subject).refuses_calls(to_number):
        raise ContactRefusesCalls()
    if data.from_number is not None:
        from_number = to_e164(data.from_number, "from_number")
    elif not subject.livemode:
        from_number = TEST_FROM_NUMBER
    else:
        raise InvalidInput("from_number is required for live calls", field="from_number")
    if subject.livemode and not await has_room_for_live_call(
        session, subject.organization_id, max_live_calls
    ):
        raise LiveCallLimitReached()
    if not await limits.available(subject.organization_id):
        raise ConversationLimitReached()
    now = utcnow()
    contact = await ContactRepository(session, subject).by_phone_number(to_number)
    number = await PhoneNumberRepository(session, subject).by_number(from_number)
    call_log = CallLog(
        organization_id=subject.organization_id,
        livemode=subject.livemode,
        call_id=GATEWAY_ID_PREFIX + secrets.token_hex(16),
        agent_id=agent.id,
        contact_id=None if contact is None else contact.id,
        phone_number_id=None if number is None else number.id,
        from_number=from_number,
        to_number=to_number,
        direction="outbound",
        status=IN_PROGRESS,
        duration_seconds=0,
        started_at=now,
        transcript=[],
        cost=0.0,
    )
    CallLogRepository(session, subject).add(call_log)
    await session.flush()
    await emit(session, call_log, CALL_STARTED, call_log_to_public(call_log))
    outbox.schedule(session, PLACE_ACTOR, call_log.id, data.script(), queue=CALLS_QUEUE)
    return call_log


def status_callback_url(public_url: str, call_log_id: str) -> str:
    """Where the carrier reports the call's progress; the id makes the lookup independent
    of when the carrier's SID is recorded (a callback may come first)."""
    return f"{public_url.rstrip('/')}{STATUS_PATH}?{urlencode({'call_log_id': call_log_id})}"


@dataclass(frozen=True, slots=True)
class StatusUpdate:
    """One progress report about a call, from the carrier's callback or the simulator."""

    call_log_id: str
    call_sid: str
    carrier_status: str
    duration_seconds: int | None = None
    recording_url: str | None = None
    cost: float | None = None
    # Only the simulator knows what was said.
    transcript: list[dict[str, Any]] | None = None
    summary: str | None = None
    # (input, output) model tokens of the agent's replies.
    tokens: tuple[int, int] | None = None
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class StatusOutcome:
    call_log: CallLog
    ended: bool  # this update ended the call
    # The carrier ended a call whose media stream a voice process holds: that process ends
    # it (transcript, summary, cost) once told (app/calls/control.py), or the sweep does.
    hand_to_stream: bool = False


async def apply_status(
    session: AsyncSession, update_: StatusUpdate, *, livemode: bool
) -> StatusOutcome:
    """Move the call forward by one report. Reports about a call that already ended change
    nothing (callbacks arrive out of order and more than once); `livemode` must match the
    call's, so the real carrier's callbacks never touch a test-mode call and back."""
    status = CARRIER_STATUS_TO_CALL_STATUS.get(update_.carrier_status)
    if status is None:
        raise InvalidInput(
            f"Unknown call status: {update_.carrier_status[:64]}", field="CallStatus"
        )
    if update_.call_log_id:
        call_log = await call_log_for_carrier(session, update_.call_log_id)
    else:
        # The carrier's SID alone names an inbound call only: an outbound call's callbacks
        # go to the URL it was placed with, which names its log.
        call_log = (
            await call_log_by_call_id(session, update_.call_sid) if update_.call_sid else None
        )
        if call_log is not None and call_log.direction != "inbound":
            call_log = None
    if call_log is None or call_log.livemode != livemode:
        raise NotFound("Call log")
    if is_placed(call_log) and call_log.call_id != update_.call_sid:
        raise NotFound("Call log")
    if not is_placed(call_log):
        call_log.call_id = update_.call_sid
    if call_log.status in END_STATUSES or status not in END_STATUSES:
        await session.flush()
        return StatusOutcome(call_log, ended=False)
    if call_log.media_heartbeat_at is not None and update_.transcript is None:
        await session.flush()
        return StatusOutcome(call_log, ended=False, hand_to_stream=True)
    call_log.status = status
    call_log.duration_seconds = update_.duration_seconds or 0
    # A call lasts at least its duration: ended_at - started_at >= duration_seconds (the
    # carrier's figure excludes ringing). The simulator plays a call out faster than its
    # clock: its call ends duration_seconds after it started, as a real one would.
    call_log.ended_at = max(
        utcnow(), call_log.started_at + timedelta(seconds=call_log.duration_seconds)
    )
    if update_.recording_url:
        call_log.recording_url = update_.recording_url
    if update_.cost is not None:
        call_log.cost = update_.cost
    if update_.transcript is not None:
        call_log.transcript = update_.transcript
    if update_.summary is not None:
        call_log.summary = update_.summary
    if update_.tokens is not None:
        call_log.input_tokens, call_log.output_tokens = update_.tokens
    await session.flush()
    for event_type, data in update_.events:
        await emit(session, call_log, event_type, data)
    await analyze_after_call(session, call_log)
    await emit(session, call_log, CALL_COMPLETED, call_log_to_public(call_log))
    if call_log.livemode and status == "completed":
        outbox.schedule(session, FETCH_DETAILS_ACTOR, call_log.id, queue=CALLS_QUEUE)
    return StatusOutcome(call_log, ended=True)


async def record_carrier_sid(session: AsyncSession, call_log_id: str, sid: str) -> bool:
    """The carrier accepted the call as `sid`; false when a callback already recorded it."""
    result = await session.execute(
        update(CallLog)
        .where(CallLog.id == call_log_id, CallLog.call_id.startswith(GATEWAY_ID_PREFIX))
        .values(call_id=sid, updated_at=utcnow())
    )
    return bool(getattr(result, "rowcount", 0))


async def record_details(
    session: AsyncSession,
    call_log: CallLog,
    *,
    cost: float | None,
    recording_url: str | None,
    duration_seconds: int | None,
) -> None:
    """Figures the carrier publishes after a call ended (price, recording); the call's cost
    is the carrier's price plus what its speech and model cost (`usage_cost`)."""
    if cost is not None:
        call_log.cost = round(call_log.usage_cost + cost, 8)
    if recording_url and not call_log.recording_url:
        call_log.recording_url = recording_url
    if duration_seconds and not call_log.duration_seconds:
        call_log.duration_seconds = duration_seconds
    await session.flush()


@dataclass(frozen=True, slots=True)
class IncomingCall:
    call_sid: str
    from_number: str
    to_number: str


async def receive_call(
    session: AsyncSession, incoming: IncomingCall, *, max_live_calls: int
) -> CallLog | None:
    """Log an incoming live call for the agent assigned to the number called; None when no
    active agent answers that number. The carrier may send the same call twice: the second
    time the first log is returned. Over the organization's `max_live_calls` under way the
    call is refused (LiveCallLimitReached: the carrier plays busy)."""
    to_number = to_e164(incoming.to_number, "To")
    assignment = await assignment_for_number(session, to_number, livemode=True)
    if assignment is None:
        return None
    agent = await AgentRepository(session, assignment.organization_id).get(assignment.agent_id)
    if agent is None or agent.status != ACTIVE:
        return None
    existing = await call_log_by_call_id(session, incoming.call_sid)
    if existing is not None:
        return existing
    if not await has_room_for_live_call(session, assignment.organization_id, max_live_calls):
        raise LiveCallLimitReached()
    from_number = to_e164(incoming.from_number, "From")
    contact = await ContactRepository(session, assignment.organization_id).by_phone_number(
        from_number
    )
    call_log = CallLog(
        organization_id=assignment.organization_id,
        livemode=True,
        call_id=incoming.call_sid,
        agent_id=agent.id,
        contact_id=None if contact is None else contact.id,
        phone_number_id=assignment.id,
        from_number=from_number,
        to_number=to_number,
        direction="inbound",
        status=IN_PROGRESS,
        duration_seconds=0,
        started_at=utcnow(),
        transcript=[],
        cost=0.0,
    )
    CallLogRepository(session, assignment.organization_id).add(call_log)
    await session.flush()
    await emit(session, call_log, CALL_STARTED, call_log_to_public(call_log))
    return call_log


async def record_answered_by(
    session: AsyncSession, call_log_id: str, call_sid: str, answered_by: str
) -> CallLog | None:
    """The carrier's answering-machine verdict on an outbound live call it placed."""
    call_log = await call_log_for_carrier(session, call_log_id)
    if call_log is None or not call_log.livemode or call_log.call_id != call_sid:
        return None
    call_log.answered_by = answered_by
    await session.flush()
    return call_log


def machine_detection_url(public_url: str, call_log_id: str) -> str:
    return (
        f"{public_url.rstrip('/')}{MACHINE_DETECTION_PATH}?"
        f"{urlencode({'call_log_id': call_log_id})}"
    )


def media_stream_answer(call_log: CallLog, public_url: str, token_seconds: float) -> str:
    """The TwiML that connects `call_log`'s answered call to its agent, with a fresh stream
    token (its hash is stored on the call; the caller commits)."""
    from app.integrations.telephony.twilio import stream_twiml, stream_url

    token = new_stream_token(call_log, token_seconds)
    return stream_twiml(stream_url(public_url, MEDIA_STREAM_PATH), token)
