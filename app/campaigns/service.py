"""Campaign operations: the resolvers REST and GraphQL both call. Sending is dispatch.py's
(the plan, the run, its end), the platform's status callbacks statuses.py's.

Lifecycle (the transition table of docs/api.md): a create stores a `draft`; a launch resolves
the audience into the recipient ledger (`campaign_recipients`) and moves to `scheduled` (a
dispatch job due at `scheduled_at`) or `sending` (a dispatch job due now). Pause and cancel
stop dispatch within a send slice; resume re-schedules. The counters move by deltas in the
transaction of the ledger rows they count, and a `sending` campaign whose every recipient is
sent or failed is `completed`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.access.subject import Subject
from app.campaigns import repository as ledger
from app.campaigns.models import (
    AudienceType,
    Campaign,
    CampaignStatus,
)
from app.campaigns.repository import CampaignRepository
from app.campaigns.schemas import (
    CampaignCreate,
    CampaignUpdate,
    RecipientTagging,
    StatusFilter,
    campaign_to_public,
)
from app.channels import service as channels
from app.channels.models import Channel
from app.contacts.repository import ContactRepository
from app.contacts.schemas import MAX_TAGS, contact_to_public
from app.core.clock import utcnow
from app.events.service import emit, emit_many
from app.kit import outbox
from app.kit.errors import InvalidInput, InvalidState, NotFound
from app.kit.pagination import NumberedPage, PageParams
from app.templates.models import MessageTemplate, TemplateStatus
from app.templates.repository import TemplateRepository

CAMPAIGN = "Campaign"
DISPATCH_ACTOR = "campaigns.dispatch"
DISPATCH_QUEUE = "default"
# lead.updated events of a retargeting written per INSERT.
EVENT_BATCH = 1000
STARTED = "campaign.started"
COMPLETED = "campaign.completed"
MESSAGE_DELIVERED = "campaign.message.delivered"
MESSAGE_FAILED = "campaign.message.failed"
# Every campaign message is also an outbound message: handed to the platform, or not.
OUTBOUND_SENT = "message.sent"
OUTBOUND_FAILED = "message.failed"
# Moves of the transition table (docs/api.md): the states each trigger is accepted from.
_PAUSABLE = (CampaignStatus.SENDING, CampaignStatus.SCHEDULED)
_CANCELLABLE = (CampaignStatus.SCHEDULED, CampaignStatus.SENDING, CampaignStatus.PAUSED)
_DELETABLE = (CampaignStatus.DRAFT, CampaignStatus.COMPLETED, CampaignStatus.CANCELLED)


class ChannelNotFound(InvalidInput):
    code = "channel_not_found"

    def __init__(self) -> None:
        super().__init__("Channel/phone number not found", field="chat_phone_number_id")


class TemplateNotFound(InvalidInput):
    code = "template_not_found"

    def __init__(self) -> None:
        super().__init__("Message template not found", field="message_template_id")


def _refuse(action: str, campaign: Campaign, hint: str = "") -> InvalidState:
    return InvalidState(f"Cannot {action} campaign in {campaign.status} state{hint}")


# --- reads ------------------------------------------------------------------------------


async def get_campaign(session: AsyncSession, subject: Subject, campaign_id: str) -> Campaign:
    return await CampaignRepository(session, subject).get_or_404(campaign_id)


async def list_campaigns(
    session: AsyncSession, subject: Subject, params: PageParams, status: StatusFilter
) -> NumberedPage[Any]:
    """Newest first; a test-mode credential sees the test-mode campaigns only."""
    return await CampaignRepository(session, subject).numbered_page(
        params,
        status=None if status is StatusFilter.ALL else status.value,
    )


# --- writes -----------------------------------------------------------------------------


async def _channel(session: AsyncSession, subject: Subject, channel_id: str) -> Channel:
    try:
        return await channels.get_channel_for_use(session, subject, channel_id)
    except NotFound as exc:
        raise ChannelNotFound() from exc


async def _template(session: AsyncSession, subject: Subject, template_id: str) -> MessageTemplate:
    found = await TemplateRepository(session, subject).get(template_id)
    if found is None:
        raise TemplateNotFound()
    return found


async def _check_audience(
    session: AsyncSession, subject: Subject, campaign: Campaign, *, contacts: bool = True
) -> None:
    """`audience_tags` / `audience_contact_ids` belong to their audience type only, and manual
    ids must all be contacts of the caller's organization (checked on writes; at launch a
    contact deleted since is simply not in the audience)."""
    kind = campaign.audience_type
    if kind != AudienceType.TAGS and campaign.audience_tags is not None:
        raise InvalidInput(
            "audience_tags is only accepted with audience_type tags", field="audience_tags"
        )
    if kind != AudienceType.MANUAL and campaign.audience_contact_ids is not None:
        raise InvalidInput(
            "audience_contact_ids is only accepted with audience_type manual",
            field="audience_contact_ids",
        )
    if kind == AudienceType.TAGS and not campaign.audience_tags:
        raise InvalidInput(
            "audience_type tags needs at least one audience tag", field="audience_tags"
        )
    if kind == AudienceType.MANUAL:
        if not campaign.audience_contact_ids:
            raise InvalidInput(
                "audience_type manual needs at least one contact id", field="audience_contact_ids"
            )
        if not contacts:
            return
        unknown = await CampaignRepository(session, subject).contacts_outside(
            campaign.audience_contact_ids
        )
        if unknown:
            raise InvalidInput(
                f"Contacts not found in the organization: {', '.join(unknown[:10])}",
                field="audience_contact_ids",
            )


def _ids(values: list[Any] | None) -> list[str] | None:
    return None if values is None else list(dict.fromkeys(str(value) for value in values))


async def create_campaign(
    session: AsyncSession, subject: Subject, data: CampaignCreate
) -> Campaign:
    channel = await _channel(session, subject, str(data.chat_phone_number_id))
    template = await _template(session, subject, str(data.message_template_id))
    campaign = Campaign(
        organization_id=subject.organization_id,
        name=data.name,
        chat_phone_number_id=channel.id,
        message_template_id=template.id,
        audience_type=data.audience_type.value,
        audience_tags=list(dict.fromkeys(data.audience_tags))
        if data.audience_tags
        else data.audience_tags,
        audience_contact_ids=_ids(data.audience_contact_ids),
        template_parameters=data.template_parameters,
        scheduled_at=data.scheduled_at,
        status=CampaignStatus.DRAFT.value,
        total_contacts_count=0,
        sent_count=0,
        delivered_count=0,
        read_count=0,
        failed_count=0,
        livemode=channel.livemode,
    )
    await _check_audience(session, subject, campaign)
    session.add(campaign)
    await session.flush()
    return campaign


async def update_campaign(
    session: AsyncSession, subject: Subject, campaign_id: str, data: CampaignUpdate
) -> Campaign:
    campaign = await get_campaign(session, subject, campaign_id)
    if campaign.status != CampaignStatus.DRAFT:
        raise _refuse("update", campaign)
    sent = data.model_fields_set
    if "name" in sent and data.name is not None:
        campaign.name = data.name
    if "chat_phone_number_id" in sent and data.chat_phone_number_id is not None:
        channel = await _channel(session, subject, str(data.chat_phone_number_id))
        campaign.chat_phone_number_id = channel.id
        campaign.livemode = channel.livemode
    if "message_template_id" in sent and data.message_template_id is not None:
        campaign.message_template_id = (
            await _template(session, subject, str(data.message_template_id))
        ).id
    if "audience_type" in sent and data.audience_type is not None:
        campaign.audience_type = data.audience_type.value
        # A new audience type drops the other types' lists unless they are sent too.
        if data.audience_type != AudienceType.TAGS and "audience_tags" not in sent:
            campaign.audience_tags = None
        if data.audience_type != AudienceType.MANUAL and "audience_contact_ids" not in sent:
            campaign.audience_contact_ids = None
    if "audience_tags" in sent:
        campaign.audience_tags = (
            list(dict.fromkeys(data.audience_tags)) if data.audience_tags else data.audience_tags
        )
    if "audience_contact_ids" in sent:
        campaign.audience_contact_ids = _ids(data.audience_contact_ids)
    if "scheduled_at" in sent:
        campaign.scheduled_at = data.scheduled_at
    if "template_parameters" in sent:
        campaign.template_parameters = data.template_parameters
    await _check_audience(session, subject, campaign)
    await session.flush()
    return campaign


async def delete_campaign(session: AsyncSession, subject: Subject, campaign_id: str) -> None:
    campaign = await get_campaign(session, subject, campaign_id)
    if campaign.status not in _DELETABLE:
        raise _refuse("delete", campaign, "; cancel it first")
    await session.delete(campaign)
    await session.flush()


@channels.guard_deletion
async def refuse_channel_deletion_in_use(
    session: AsyncSession, subject: Subject, channel_id: str
) -> None:
    """A channel whose campaign is scheduled, sending or paused cannot be deleted (its
    recipients would be lost mid-send); drafts and finished campaigns go with it."""
    repository = CampaignRepository(session, subject.organization_id)
    active = await repository.first_on_channel(channel_id, [s.value for s in _CANCELLABLE])
    if active is not None:
        raise InvalidState(
            f"Cannot delete channel: campaign {active.name!r} is in {active.status} state; "
            "cancel it first"
        )


# --- moves ------------------------------------------------------------------------------


def is_due(campaign: Campaign) -> bool:
    return campaign.scheduled_at is None or campaign.scheduled_at <= utcnow()


async def _start_or_schedule(session: AsyncSession, campaign: Campaign) -> None:
    """→ scheduled with a dispatch job due at `scheduled_at`, or → sending with one due now.
    The job row is the schedule: it lives in the database, so a broker flush loses nothing."""
    if not is_due(campaign):
        campaign.status = CampaignStatus.SCHEDULED.value
        outbox.schedule(
            session, DISPATCH_ACTOR, campaign.id, queue=DISPATCH_QUEUE, at=campaign.scheduled_at
        )
        return
    await enter_sending(session, campaign)
    outbox.schedule(session, DISPATCH_ACTOR, campaign.id, queue=DISPATCH_QUEUE)


async def enter_sending(session: AsyncSession, campaign: Campaign) -> None:
    campaign.status = CampaignStatus.SENDING.value
    first = campaign.started_at is None
    if first:
        campaign.started_at = utcnow()
    await session.flush()
    if first:
        await emit(session, campaign, STARTED, campaign_to_public(campaign))


async def launch_campaign(session: AsyncSession, subject: Subject, campaign_id: str) -> Campaign:
    campaign = await get_campaign(session, subject, campaign_id)
    if campaign.status != CampaignStatus.DRAFT:
        raise _refuse("launch", campaign)
    if campaign.message_template_id is None:
        raise TemplateNotFound()
    template = await _template(session, subject, campaign.message_template_id)
    if template.status != TemplateStatus.APPROVED:
        raise InvalidInput(
            f"The message template is {template.status}; only an APPROVED template can be sent",
            field="message_template_id",
        )
    channel = await _channel(session, subject, campaign.chat_phone_number_id)
    if template.business_account_id != channel.business_account_id:
        raise InvalidInput(
            "The message template belongs to another business account than the channel",
            field="message_template_id",
        )
    await _check_audience(session, subject, campaign, contacts=False)
    total = await CampaignRepository(session, subject).resolve_audience(campaign)
    campaign.total_contacts_count = total
    await _start_or_schedule(session, campaign)
    await session.flush()
    return campaign


async def pause_campaign(session: AsyncSession, subject: Subject, campaign_id: str) -> Campaign:
    campaign = await get_campaign(session, subject, campaign_id)
    if campaign.status not in _PAUSABLE:
        raise _refuse("pause", campaign)
    # The pending dispatch job finds the campaign paused and ends: the schedule is gone.
    campaign.status = CampaignStatus.PAUSED.value
    await session.flush()
    return campaign


async def resume_campaign(session: AsyncSession, subject: Subject, campaign_id: str) -> Campaign:
    campaign = await get_campaign(session, subject, campaign_id)
    if campaign.status != CampaignStatus.PAUSED:
        raise _refuse("resume", campaign)
    campaign.paused_reason = None
    await _start_or_schedule(session, campaign)
    await session.flush()
    return campaign


async def cancel_campaign(session: AsyncSession, subject: Subject, campaign_id: str) -> Campaign:
    campaign = await get_campaign(session, subject, campaign_id)
    if campaign.status not in _CANCELLABLE:
        raise _refuse("cancel", campaign)
    campaign.status = CampaignStatus.CANCELLED.value
    await session.flush()
    return campaign


@dataclass(frozen=True)
class TaggingResult:
    campaign_id: str
    tag: str
    statuses: list[str]
    matched_count: int
    tagged_count: int
    skipped_count: int


async def tag_recipients(
    session: AsyncSession, subject: Subject, campaign_id: str, data: RecipientTagging
) -> TaggingResult:
    """Retargeting: add `data.tag` to the contacts whose recipient status in the campaign's
    ledger is one of `data.statuses` (in one UPDATE), `lead.updated` for each contact that
    changed. Contacts that already have the tag are matched but not changed."""
    campaign = await CampaignRepository(session, subject).get_or_404(campaign_id)
    statuses = list(dict.fromkeys(status.value for status in data.statuses))
    matching = ledger.recipients_with_status(campaign.id, statuses)
    matched = await ledger.count_recipients_with_status(session, campaign.id, statuses)
    contacts = ContactRepository(session, subject)
    changed = await contacts.add_tag(data.tag, matching, max_tags=MAX_TAGS)
    already = await contacts.count_with_tag_among(data.tag, matching)
    for start in range(0, len(changed), EVENT_BATCH):
        await emit_many(
            session,
            subject,
            [
                ("lead.updated", contact_to_public(row))
                for row in changed[start : start + EVENT_BATCH]
            ],
        )
    return TaggingResult(
        campaign_id=campaign.id,
        tag=data.tag,
        statuses=statuses,
        matched_count=matched,
        tagged_count=len(changed),
        skipped_count=max(matched - already, 0),
    )
