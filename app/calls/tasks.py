"""The calls domain's jobs: place a call with its carrier, play a test-mode call out on the
simulator, and collect a live call's price and recording once it ended.

Carrier requests are made outside any transaction; each job writes in one short transaction
at the end and settles itself there. A placement that fails for a reason that may pass
(timeout, the carrier's 5xx) raises and is retried by the job engine; a refusal (4xx) ends
the call `failed`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import structlog

from app.agents.models import Agent
from app.calls import analysis, conversation, placement, telephony
from app.calls.models import CallLog
from app.calls.repository import call_log_for_carrier
from app.config import Settings
from app.core.clock import utcnow
from app.engine.engine import ConversationEngine, EngineClients
from app.engine.types import AgentProfile
from app.integrations.telephony.base import CallPlacement, Carrier, CarrierError
from app.integrations.telephony.simulator import ANSWERED, SimulatedCarrier, simulated_outcome
from app.integrations.telephony.twilio import TwilioCarrier
from app.jobs import JobContext, Task
from app.kit import outbox
from app.kit.errors import NotFound

logger = structlog.get_logger("switchboard.calls")

SIMULATED_CARRIER = SimulatedCarrier()


class LiveCarrier:
    """The process's real carrier client, or None while the carrier is not configured."""

    def __init__(self, settings: Settings) -> None:
        self.client: TwilioCarrier | None = None
        if settings.telephony_account_sid and settings.telephony_auth_token:
            self.client = TwilioCarrier(
                settings.telephony_api_url,
                settings.telephony_account_sid,
                settings.telephony_auth_token,
                timeout=settings.telephony_timeout_seconds,
            )

    async def aclose(self) -> None:
        if self.client is not None:
            await self.client.aclose()


async def _load(job: JobContext, call_log_id: str) -> tuple[CallLog, Agent | None] | None:
    async with job.runtime.resources.session(writes=False) as session:
        call_log = await session.get(CallLog, call_log_id)
        if call_log is None:
            return None
        agent = await session.get(Agent, call_log.agent_id) if call_log.agent_id else None
        if agent is not None and agent.organization_id != call_log.organization_id:
            agent = None
        return call_log, agent


async def _finish_with(job: JobContext, update: telephony.StatusUpdate, livemode: bool) -> None:
    async with job.runtime.resources.session(writes=True) as session:
        try:
            await telephony.apply_status(session, update, livemode=livemode)
        except NotFound:  # deleted meanwhile (its organization went): nothing left to do
            logger.info("call log gone before its status", call_log_id=update.call_log_id)
        await job.settle(session, None)
        await session.commit()


async def place_call(job: JobContext) -> datetime | None:
    """Hand the call to its carrier, at most once toward the callee (app/calls/placement.py)."""
    call_log_id, script = job.args
    loaded = await _load(job, call_log_id)
    if loaded is None:
        return None
    call_log, _agent = loaded
    if telephony.is_placed(call_log) or call_log.status != telephony.IN_PROGRESS:
        return None  # a second run after the first recorded the placement
    settings = job.runtime.settings
    carrier: Carrier = SIMULATED_CARRIER
    if call_log.livemode:
        live = job.runtime.shared(LiveCarrier).client
        if live is None or not settings.telephony_public_url:
            logger.warning("live call with no carrier configured", call_log_id=call_log_id)
            await _finish_with(
                job, telephony.StatusUpdate(call_log_id, call_log.call_id, "failed"), True
            )
            return None
        if call_log.placement_attempted_at is not None:
            # An earlier run asked the carrier and never learnt the answer.
            sid = await _earlier_placement(job, live, call_log, settings.telephony_timeout_seconds)
            if sid is not None:
                await _record_sid(job, call_log, sid, script)
                return None
            logger.info("carrier holds no call of the lost request", call_log_id=call_log_id)
        carrier = live
    public_url = settings.telephony_public_url or ""
    twiml = ""
    if placement.deadline_passed(call_log, settings):
        # Too late to ring anyone (the job waited, or the carrier was away that long).
        async with job.runtime.resources.session(writes=True) as session:
            entity = await call_log_for_carrier(session, call_log_id)
            if entity is not None and _unplaced(entity):
                await placement.end_unplaced(session, entity, placement.PLACEMENT_STALLED)
            await job.settle(session, None)
            await session.commit()
        return None
    if call_log.livemode:
        async with job.runtime.resources.session(writes=True) as session:
            entity = await call_log_for_carrier(session, call_log_id)
            if entity is None or not _unplaced(entity):
                return None
            # The answer connects the agent's media stream, on a token stored before placing;
            # the attempt is committed with it, before the request leaves.
            twiml = telephony.media_stream_answer(
                entity, public_url, settings.voice_stream_token_seconds
            )
            await placement.mark_attempt(session, entity)
            await session.commit()
    placement_request = CallPlacement(
        to_number=call_log.to_number,
        from_number=call_log.from_number,
        status_callback_url=telephony.status_callback_url(public_url, call_log_id),
        twiml=twiml,
        machine_detection_url=telephony.machine_detection_url(public_url, call_log_id)
        if call_log.livemode
        else None,
    )
    try:
        placed = await carrier.create_call(placement_request)
    except CarrierError as exc:
        if exc.retryable:
            raise
        logger.warning("carrier refused a call", call_log_id=call_log_id, reason=exc.message)
        await _finish_with(
            job,
            telephony.StatusUpdate(call_log_id, call_log.call_id, "failed"),
            call_log.livemode,
        )
        return None
    await _record_sid(job, call_log, placed.sid, script)
    return None


def _unplaced(call_log: CallLog) -> bool:
    return not telephony.is_placed(call_log) and call_log.status == telephony.IN_PROGRESS


async def _earlier_placement(
    job: JobContext, carrier: TwilioCarrier, call_log: CallLog, timeout_seconds: float
) -> str | None:
    """The SID of the call a lost request created, or None once the carrier's list shows
    none; a list that cannot be read raises (CarrierError), so nothing is placed again."""
    attempted = call_log.placement_attempted_at
    assert attempted is not None
    since = (attempted - placement.CLOCK_SKEW).date()
    listed = await carrier.calls_between(call_log.to_number, call_log.from_number, since)
    async with job.runtime.resources.session(writes=False) as session:
        held = await placement.sids_held(session, [call.sid for call in listed])
    found = placement.earlier_placement(listed, call_log, held, timeout_seconds)
    return None if found is None else found.sid


async def _record_sid(job: JobContext, call_log: CallLog, sid: str, script: Any) -> None:
    async with job.runtime.resources.session(writes=True) as session:
        await telephony.record_carrier_sid(session, call_log.id, sid)
        if not call_log.livemode:
            outbox.schedule(
                session,
                telephony.SIMULATE_ACTOR,
                call_log.id,
                sid,
                script,
                queue=telephony.CALLS_QUEUE,
            )
        await job.settle(session, None)
        await session.commit()


async def simulate_call(job: JobContext) -> datetime | None:
    call_log_id, sid, script = job.args
    loaded = await _load(job, call_log_id)
    if loaded is None:
        return None
    call_log, agent = loaded
    outcome = simulated_outcome(call_log.to_number)
    if outcome != ANSWERED:
        await _finish_with(job, telephony.StatusUpdate(call_log_id, sid, outcome), False)
        return None
    profile = (
        AgentProfile.of(agent, livemode=False)
        if agent is not None
        else AgentProfile(
            agent_id=call_log.agent_id or "",
            organization_id=call_log.organization_id,
            livemode=False,
            name="The agent",
            timezone="UTC",
            config={},
            version="",
        )
    )
    engine = ConversationEngine(job.runtime.resources, job.runtime.shared(EngineClients))
    async with engine.conversation(profile, f"call:{call_log_id}"):
        played = await conversation.simulate(
            engine,
            profile,
            script,
            {"call_log_id": call_log_id, "call_id": sid, "agent_id": call_log.agent_id},
        )
    update = telephony.StatusUpdate(
        call_log_id,
        sid,
        "completed",
        duration_seconds=played.duration_seconds,
        cost=round(played.cost, 6),
        transcript=played.transcript,
        summary=conversation.summarize(profile.name, played),
        tokens=(played.usage.input_tokens, played.usage.output_tokens),
        events=played.events,
    )
    await _finish_with(job, update, False)
    return None


async def fetch_details(job: JobContext) -> datetime | None:
    (call_log_id,) = job.args
    loaded = await _load(job, call_log_id)
    if loaded is None:
        return None
    call_log, _agent = loaded
    carrier = job.runtime.shared(LiveCarrier).client
    if carrier is None or not call_log.livemode:
        return None
    details = await carrier.fetch_call(call_log.call_id)
    async with job.runtime.resources.session(writes=True) as session:
        entity = await session.get(CallLog, call_log_id)
        if entity is not None:
            await telephony.record_details(
                session,
                entity,
                cost=details.cost,
                recording_url=details.recording_url,
                duration_seconds=details.duration_seconds,
            )
        again = None
        ended_at = call_log.ended_at or utcnow()
        if details.cost is None and utcnow() < ended_at + telephony.DETAILS_WINDOW:
            again = utcnow() + telephony.DETAILS_RETRY  # the carrier prices calls a bit later
        await job.settle(session, again)
        await session.commit()
    return None


async def analyze_call(job: JobContext) -> datetime | None:
    """The analysis a request marked pending (app/calls/analysis.py); the result, failures
    included, is written only while that request is still the latest."""
    call_log_id, requested_at = job.args
    loaded = await _load(job, call_log_id)
    if loaded is None:
        return None
    call_log, agent = loaded
    if (call_log.analysis or {}).get("requested_at") != requested_at:
        return None  # a later request took over
    if agent is None:
        gone = "The call's agent no longer exists"
        stored = analysis.failed_analysis("agent_gone", gone, requested_at)
    else:
        config = agent.config or {}
        schema, criteria = config.get("analysis_schema"), config.get("success_criteria")
        engine = ConversationEngine(job.runtime.resources, job.runtime.shared(EngineClients))
        result = await engine.analyze(
            AgentProfile.of(agent, livemode=call_log.livemode),
            call_log.transcript or [],
            schema,
            criteria,
        )
        stored = analysis.analysis_of(result, criteria, requested_at)
        if result.error is not None:
            logger.info("call analysis failed", call_log_id=call_log_id, code=result.error.code)
    async with job.runtime.resources.session(writes=True) as session:
        entity = await session.get(CallLog, call_log_id)
        if entity is not None and (entity.analysis or {}).get("requested_at") == requested_at:
            entity.analysis = stored
        await job.settle(session, None)
        await session.commit()
    return None


TASKS = (
    Task(telephony.PLACE_ACTOR, telephony.CALLS_QUEUE, place_call),
    Task(telephony.SIMULATE_ACTOR, telephony.CALLS_QUEUE, simulate_call),
    Task(telephony.FETCH_DETAILS_ACTOR, telephony.CALLS_QUEUE, fetch_details),
    Task(analysis.ANALYZE_ACTOR, telephony.CALLS_QUEUE, analyze_call),
)
