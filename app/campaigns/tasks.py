"""The campaigns domain's jobs. `campaigns.dispatch` is both the schedule (a job row due at
`scheduled_at`) and the sender: it streams the ledger in batches, claiming each batch in the
database before anything is sent, and re-reads the campaign between batches so a pause or a
cancel stops it at the next batch."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from app.campaigns import service
from app.campaigns.models import Campaign
from app.campaigns.service import DISPATCH_ACTOR, DISPATCH_QUEUE, Batch, MissingValue
from app.channels import service as channels
from app.channels.models import Channel
from app.integrations.whatsapp.errors import WhatsAppError
from app.integrations.whatsapp.factory import platform_for
from app.integrations.whatsapp.types import TemplateMessage, WhatsAppPlatform
from app.kit.clock import utcnow
from app.kit.jobs import Task, with_resources
from app.resources import Resources

BATCH_SIZE = 100
# Batches per job run; the run then yields and is rescheduled at once, so one run never
# outlives its lease and other jobs get the worker in between.
BATCHES_PER_RUN = 20


async def dispatch_campaign(resources: Resources, campaign_id: str) -> datetime | None:
    for _ in range(BATCHES_PER_RUN):
        async with resources.session(writes=True) as session:
            step = await service.next_batch(session, campaign_id, BATCH_SIZE)
            if isinstance(step, datetime):
                await session.commit()
                return step
            if not isinstance(step, Batch):
                scheduled = await session.scalar(
                    select(Campaign.scheduled_at).where(Campaign.id == campaign_id)
                )
                await session.commit()
                return scheduled if step == "later" else None
            if not step.livemode:
                # The simulator answers in-process and records in this session: the claim,
                # the sends and their outcomes commit together.
                channel = await session.get(Channel, step.channel_id)
                assert channel is not None
                async with platform_for(
                    livemode=False,
                    access_token="",
                    business_account_id=channel.business_account_id,
                    display_phone_number=channel.display_phone_number,
                    settings=resources.settings,
                    session=session,
                ) as platform:
                    await _send_batch(session, platform, channel.phone_number_id, step)
                await service.finish_batch(session, campaign_id)
                await session.commit()
                continue
            # Live: the claim commits before any network call, so a rerun never resends.
            channel = await session.get(Channel, step.channel_id)
            assert channel is not None
            token = channels.access_token_of(
                channel, channels.access_token_box(resources.secret_key)
            )
            phone_number_id = channel.phone_number_id
            business_account_id = channel.business_account_id
            display = channel.display_phone_number
            await session.commit()
        async with platform_for(
            livemode=True,
            access_token=token,
            business_account_id=business_account_id,
            display_phone_number=display,
            settings=resources.settings,
            session=None,
        ) as platform:
            outcomes = await _send_all(platform, phone_number_id, step)
        async with resources.session(writes=True) as session:
            for contact_id, message_id, error in outcomes:
                await service.record_outcome(session, campaign_id, contact_id, message_id, error)
            await service.finish_batch(session, campaign_id)
            await session.commit()
    return utcnow()


async def _send_all(
    platform: WhatsAppPlatform, phone_number_id: str, batch: Batch
) -> list[tuple[str, str | None, str | None]]:
    outcomes: list[tuple[str, str | None, str | None]] = []
    for recipient in batch.recipients:
        try:
            parameters = service.body_parameters(batch.variable_count, batch.parameters, recipient)
        except MissingValue as exc:
            outcomes.append((recipient.contact_id, None, str(exc)))
            continue
        message = TemplateMessage(batch.template.name, batch.template.language, parameters)
        try:
            sent = await platform.send_template(phone_number_id, recipient.phone_number, message)
        except WhatsAppError as exc:
            outcomes.append((recipient.contact_id, None, exc.describe()))
            continue
        outcomes.append((recipient.contact_id, sent.message_id, None))
    return outcomes


async def _send_batch(
    session: AsyncSession, platform: WhatsAppPlatform, phone_number_id: str, batch: Batch
) -> None:
    for contact_id, message_id, error in await _send_all(platform, phone_number_id, batch):
        await service.record_outcome(session, batch.campaign_id, contact_id, message_id, error)


TASKS = (Task(DISPATCH_ACTOR, DISPATCH_QUEUE, with_resources(dispatch_campaign)),)
