"""The conversations domain's jobs, among them the consent domain's keyword confirmation
reply (it is sent through this domain's send path)."""

from __future__ import annotations

from datetime import datetime

import structlog

from app.access.scopes import Scope
from app.access.subject import PrincipalType, Subject
from app.campaigns.meta_limits import DeferralPolicy
from app.channels.models import Channel
from app.consent.service import CONFIRM_ACTOR, CONFIRM_QUEUE
from app.conversations import service, statuses
from app.conversations.inbound import SignatureInvalid, process_payload, verified_payload
from app.conversations.schemas import MessageSend
from app.events.service import fan_out_here
from app.integrations.whatsapp.factory import CALLBACK_ACTOR, CALLBACK_QUEUE
from app.jobs import JobContext, Task, with_resources
from app.kit.errors import DomainError
from app.resources import Resources
from app.webhooks import tasks as webhook_jobs

logger = structlog.get_logger("switchboard.whatsapp.inbound")


async def deliver_callback(
    resources: Resources, body: str, signature: str, job: JobContext | None = None
) -> datetime | None:
    """A simulator callback, through the checks the platform's POSTs pass (signature verified
    the same way); its traffic goes to test-mode channels only. A `job` is settled in the
    callback's own transaction (one commit and one statement less per callback; three per
    simulated send). One callback a run: two runs applying several statuses each would lock
    the same messages in different orders."""
    try:
        payload = verified_payload(resources, body.encode(), signature)
    except SignatureInvalid:
        # Signed with an app secret that has since changed: it can never verify.
        logger.warning("simulated callback with a stale signature dropped")
        return None
    async with resources.session(writes=True) as session:
        fan_out_here(session)
        await process_payload(session, payload, resources.settings, simulated=True)
        fanned = await webhook_jobs.fan_out_collected(session)
        if job is not None:
            await job.settle(session, None)
        await session.commit()
    if job is not None:
        await webhook_jobs.announce(job.runtime, fanned)
    else:
        await webhook_jobs.announce_relayed(resources, fanned)
    return None


async def run_callback(job: JobContext) -> datetime | None:
    body, signature = job.args
    return await deliver_callback(job.runtime.resources, body, signature, job)


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


async def send_confirmation(
    resources: Resources, organization_id: str, livemode: bool, ticket_id: str, text: str
) -> datetime | None:
    """The confirmation reply to an opt-out or opt-in keyword (app/consent/service.py
    `apply_keyword`), through the conversation's send path (its channel, its send budget):
    a platform refusal is stored as a failed message there; a conversation gone since is
    logged."""
    subject = Subject(
        organization_id=organization_id,
        principal_id=service.PLATFORM_PRINCIPAL,
        principal_type=PrincipalType.API_KEY,
        scopes=frozenset({Scope.FULL_ACCESS}),
        livemode=livemode,
    )
    async with resources.session(writes=True) as session:
        try:
            await service.send_message(
                session, subject, resources, ticket_id, MessageSend(text=text)
            )
        except DomainError as exc:
            logger.warning("consent confirmation not sent", ticket_id=ticket_id, reason=exc.message)
            return None
        await session.commit()
    return None


TASKS = (
    Task(CONFIRM_ACTOR, CONFIRM_QUEUE, with_resources(send_confirmation)),
    Task(CALLBACK_ACTOR, CALLBACK_QUEUE, run_callback),
    Task(
        statuses.STATUS_RETRY_ACTOR,
        statuses.STATUS_RETRY_QUEUE,
        retry_statuses,
        priority=statuses.STATUS_RETRY_PRIORITY,
    ),
)
