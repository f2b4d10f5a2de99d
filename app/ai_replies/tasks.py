"""The reply job: one conversation's pending messages answered by its channel's agent.

The job claims the conversation (app/ai_replies/service.py `claim_turn`) with prepared
statements that need no transaction (`JobRuntime.statements`), lets the conversation engine
answer with no transaction open (the model may take seconds), then sends and records the
reply in a second one, which also settles the job. It runs again while messages keep
arriving, and waits while the burst window is open.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

from app.agent_tests.service import ENGINE_QUEUE
from app.ai_replies import service
from app.ai_replies.service import REPLY_ACTOR, Silent, Turn, Wait
from app.config import Settings
from app.core.clock import utcnow
from app.engine.engine import ConversationEngine, EngineClients
from app.engine.limits import ConversationLimitReached, ReplyLimitReached
from app.engine.types import TurnResult
from app.jobs import JobContext, Task
from app.kit.quota import WaitingQuota
from app.webhooks import tasks as webhook_jobs

# A conversation that finds every AI slot of its organization taken tries again this later.
BUSY_RETRY = timedelta(seconds=5)


def open_delivery_slots(settings: Settings) -> WaitingQuota:
    """Replies sending and recording at once in this process, by organization. A reply is
    detached (its model call holds no worker thread), but its delivery holds a connection of
    the shared database pool, through a paced send of up to `send_max_wait_seconds`: a
    thread's worth of them at once, as when replies ran on the threads, so one tenant's
    throttled channel never takes the pool every other job needs; and all but one of them
    for any one organization, so it never takes every delivery either."""
    total = settings.worker_threads
    return WaitingQuota(per_key=max(1, total - 1), total=total)


async def reply(job: JobContext) -> datetime | None:
    (ticket_id,) = job.args
    resources = job.runtime.resources
    token = uuid.uuid4().hex
    # Prepared statements only, each committing on its own: on PostgreSQL a driver
    # connection, no session.
    async with job.runtime.statements(transaction=False) as runner:
        claimed = await service.claim_turn(runner, ticket_id, token, resources.settings)
        if isinstance(claimed, Wait | None):
            again = claimed.until if isinstance(claimed, Wait) else None
            await job.settle(runner, again)
            return again
    if isinstance(claimed, Silent):
        async with job.runtime.statements() as runner:
            await service.stay_silent(runner, claimed)
            await job.settle(runner, None)
        return None
    try:
        result = await _answer(job, claimed)
    except (ConversationLimitReached, ReplyLimitReached) as exc:
        return await _give_back(job, claimed, utcnow() + max(BUSY_RETRY, _seconds(exc)))
    except Exception:
        await _give_back(job, claimed, None)
        raise
    async with (
        job.runtime.shared(open_delivery_slots).held(claimed.agent.organization_id),
        resources.session(writes=True) as session,
    ):
        delivered = await service.deliver(
            session, resources, claimed, result, job_id=job.job_id, job_token=job.token
        )
        job.settled = True
        await session.commit()
    await webhook_jobs.announce(job.runtime, delivered.fanned)
    return delivered.again


async def _answer(job: JobContext, turn: Turn) -> TurnResult:
    engine = ConversationEngine(job.runtime.resources, job.runtime.shared(EngineClients))
    async with engine.conversation(turn.agent, f"whatsapp:{turn.ticket_id}"):
        return await engine.respond(turn.agent, turn.history)


async def _give_back(job: JobContext, turn: Turn, again: datetime | None) -> datetime | None:
    """Release the claim unanswered; with `again`, settle the job to run then (without it the
    worker's error handling reschedules the job)."""
    async with job.runtime.statements() as runner:
        await service.release(runner, turn.ticket_id, turn.token)
        if again is not None:
            await job.settle(runner, again)
    return again


def _seconds(exc: ConversationLimitReached | ReplyLimitReached) -> timedelta:
    return timedelta(seconds=float(exc.retry_after))


# Detached: the model call may take seconds; the reply holds no worker thread meanwhile.
TASKS = (Task(REPLY_ACTOR, ENGINE_QUEUE, reply, detached=True),)
