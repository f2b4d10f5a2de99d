"""The conversations domain's jobs."""

from __future__ import annotations

from datetime import datetime

import structlog

from app.campaigns.meta_limits import DeferralPolicy
from app.channels.models import Channel
from app.conversations import statuses
from app.conversations.inbound import SignatureInvalid, handle_signed
from app.integrations.whatsapp.factory import CALLBACK_ACTOR, CALLBACK_QUEUE
from app.kit.jobs import JobContext, Task, with_resources
from app.resources import Resources

logger = structlog.get_logger("switchboard.whatsapp.inbound")


async def deliver_callback(resources: Resources, body: str, signature: str) -> datetime | None:
    """A simulator callback, through the handler the platform's POSTs reach (signature
    checked the same way); its traffic goes to test-mode channels only."""
    try:
        await handle_signed(resources, body.encode(), signature, simulated=True)
    except SignatureInvalid:
        # Signed with an app secret that has since changed: it can never verify.
        logger.warning("simulated callback with a stale signature dropped")
    return None


async def retry_statuses(job: JobContext) -> datetime | None:
    """A channel's parked statuses tried again (app/conversations/statuses.py); settled in
    the run's own transaction, under the lock parking takes."""
    channel_id, *earlier = job.args
    deferral = DeferralPolicy.of(job.runtime.resources.settings)
    async with job.runtime.resources.session(writes=True) as session:
        if earlier:
            # A job of the one-per-status retries that came before: (status, attempt).
            channel = await session.get(Channel, channel_id)
            if channel is not None:
                await statuses.apply_statuses(session, channel, [earlier[0]], deferral)
            again = None
        else:
            again = await statuses.retry_parked(session, channel_id, deferral)
        await job.settle(session, again)
        await session.commit()
    return again


TASKS = (
    Task(CALLBACK_ACTOR, CALLBACK_QUEUE, with_resources(deliver_callback)),
    Task(
        statuses.STATUS_RETRY_ACTOR,
        statuses.STATUS_RETRY_QUEUE,
        retry_statuses,
        priority=statuses.STATUS_RETRY_PRIORITY,
    ),
)
