"""Campaign operations: the resolvers REST and GraphQL both call, the dispatch run, and the
platform's status callbacks for campaign messages.

Lifecycle (the seed's table plus CONTRACT §3): a create stores a `draft`; a launch resolves
the audience into the recipient ledger (`campaign_recipients`) and moves to `scheduled` (a
dispatch job due at `scheduled_at`) or `sending` (a dispatch job due now). Pause and cancel
stop dispatch within a send slice; resume re-schedules. The counters move by deltas in the
transaction of the ledger rows they count, and a `sending` campaign whose every recipient is
sent or failed is `completed`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.auth.subject import Subject
from app.campaigns import meta_limits
from app.campaigns import repository as ledger
from app.campaigns.models import (
    AudienceType,
    Campaign,
    CampaignStatus,
    RecipientStatus,
)
from app.campaigns.repository import CampaignRepository
from app.campaigns.schemas import (
    CONTACT_REFERENCE,
    CampaignCreate,
    CampaignUpdate,
    StatusFilter,
    campaign_to_public,
)
from app.channels import service as channels
from app.channels.models import Channel
from app.channels.repository import ChannelRepository
from app.events.service import emit, emit_many
from app.integrations.whatsapp.types import TemplateMessage
from app.integrations.whatsapp.validator import _variables as template_variables
from app.kit import outbox
from app.kit.clock import utcnow
from app.kit.errors import InvalidInput, InvalidState, NotFound
from app.kit.pagination import NumberedPage, PageParams
from app.templates.models import MessageTemplate, TemplateStatus
from app.templates.repository import TemplateRepository

CAMPAIGN = "Campaign"
DISPATCH_ACTOR = "campaigns.dispatch"
DISPATCH_QUEUE = "default"
STARTED = "campaign.started"
COMPLETED = "campaign.completed"
MESSAGE_DELIVERED = "campaign.message.delivered"
MESSAGE_FAILED = "campaign.message.failed"
# Every campaign message is also an outbound message: handed to the platform, or not.
OUTBOUND_SENT = "message.sent"
OUTBOUND_FAILED = "message.failed"
# The reason of a recipient whose send was interrupted (reconciled after a crash). Every such
# recipient in the fault runs (SIGKILL, FLUSHDB, killed connections) had in fact been
# delivered: the text says so, so nobody re-sends them blindly from the ledger or its CSV.
UNCONFIRMED_SEND = (
    "The send was interrupted before the platform's answer was recorded: the message was most "
    "likely delivered, so it is not resent. Do not send it again without checking with the "
    "recipient"
)

# Moves of the seed's table: the states each trigger is accepted from.
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


def _due(campaign: Campaign) -> bool:
    return campaign.scheduled_at is None or campaign.scheduled_at <= utcnow()


async def _start_or_schedule(session: AsyncSession, campaign: Campaign) -> None:
    """→ scheduled with a dispatch job due at `scheduled_at`, or → sending with one due now.
    The job row is the schedule: it lives in the database, so a broker flush loses nothing."""
    if not _due(campaign):
        campaign.status = CampaignStatus.SCHEDULED.value
        outbox.schedule(
            session, DISPATCH_ACTOR, campaign.id, queue=DISPATCH_QUEUE, at=campaign.scheduled_at
        )
        return
    await _enter_sending(session, campaign)
    outbox.schedule(session, DISPATCH_ACTOR, campaign.id, queue=DISPATCH_QUEUE)


async def _enter_sending(session: AsyncSession, campaign: Campaign) -> None:
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


# --- dispatch ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Plan:
    """What a dispatch run sends, read once per run: the campaign's owner (for its events),
    its channel and template, and the channel's pace."""

    campaign_id: str
    organization_id: str
    livemode: bool
    channel_id: str
    phone_number_id: str
    business_account_id: str
    display_phone_number: str
    access_token: str = field(repr=False)
    template: TemplateMessage
    variable_count: int
    parameters: dict[str, str]
    messages_per_second: int
    # Meta's rating of the channel: the campaign's rate steps down at YELLOW (meta_limits.py).
    quality_rating: str | None = None


@dataclass(frozen=True, slots=True)
class Unsendable:
    """The campaign's channel or template was deleted under it: every recipient left fails
    with `reason`."""

    campaign_id: str
    organization_id: str
    livemode: bool
    reason: str


class MissingValue(Exception):
    """A recipient lacks a value its template parameters need."""


def _contact_value(reference: str, recipient: Any) -> str:
    if reference == "contact.name":
        value: Any = recipient.name
    elif reference == "contact.phone_number":
        value = recipient.phone_number
    else:
        key = reference.removeprefix("contact.custom_fields.")
        value = (recipient.custom_fields or {}).get(key)
        if value is None or value == "":
            raise MissingValue(f"Contact has no custom field {key!r}")
        return str(value)
    if not value:
        raise MissingValue(f"Contact has no {reference.removeprefix('contact.')}")
    return str(value)


def body_parameters(count: int, parameters: dict[str, str], recipient: Any) -> list[str]:
    """The template's `{{1}}..{{count}}` for one recipient, or MissingValue naming the gap."""
    values = []
    for position in range(1, count + 1):
        text = parameters.get(str(position))
        if text is None:
            raise MissingValue(f"Template variable {{{{{position}}}}} has no value")
        filled = (
            CONTACT_REFERENCE.sub(
                lambda match: _contact_value(match.group(1).strip(), recipient), text
            )
            if "{{" in text
            else text  # a literal: the same for every recipient
        )
        if not filled.strip():
            raise MissingValue(f"Template variable {{{{{position}}}}} is empty for this contact")
        values.append(filled)
    return values


def message_for(plan: Plan, recipient: Any) -> TemplateMessage:
    """The template message one recipient receives (MissingValue: it cannot be filled)."""
    return TemplateMessage(
        plan.template.name,
        plan.template.language,
        body_parameters(plan.variable_count, plan.parameters, recipient),
    )


def _body_variable_count(components: list[Any]) -> int:
    for component in components:
        if isinstance(component, dict) and component.get("type") == "BODY":
            return len(set(template_variables(str(component.get("text") or ""))))
    return 0


async def plan_dispatch(
    session: AsyncSession, campaign_id: str, secret_key: str
) -> Plan | Unsendable | datetime | None:
    """The start of a dispatch run: a scheduled campaign that is due enters `sending`.
    Answers what to send; the time to look again while a scheduled campaign is not due;
    or None when there is nothing to do (paused, cancelled, completed)."""
    campaign = await ledger.campaign_by_id(session, campaign_id)
    if campaign is None:
        return None
    if campaign.status == CampaignStatus.SCHEDULED:
        if not _due(campaign):
            return campaign.scheduled_at
        await _enter_sending(session, campaign)
    if campaign.status != CampaignStatus.SENDING:
        return None
    channel = await ChannelRepository(session, campaign.organization_id).get(
        campaign.chat_phone_number_id
    )
    template = (
        await TemplateRepository(session, campaign.organization_id).get(
            campaign.message_template_id
        )
        if campaign.message_template_id
        else None
    )
    if channel is None or template is None:
        return Unsendable(
            campaign.id,
            campaign.organization_id,
            campaign.livemode,
            "The campaign's channel or template was deleted",
        )
    return Plan(
        campaign_id=campaign.id,
        organization_id=campaign.organization_id,
        livemode=campaign.livemode,
        channel_id=channel.id,
        phone_number_id=channel.phone_number_id,
        business_account_id=channel.business_account_id,
        display_phone_number=channel.display_phone_number,
        access_token=channels.access_token_of(channel, channels.access_token_box(secret_key)),
        template=TemplateMessage(template.name, template.language),
        variable_count=_body_variable_count(template.components),
        parameters=dict(campaign.template_parameters or {}),
        messages_per_second=channel.messages_per_second,
        quality_rating=channel.quality_rating,
    )


def campaign_message_to_public(recipient: Any, channel_id: str) -> dict[str, Any]:
    """A campaign message as `message.sent` / `message.failed` carry it."""
    return {
        **recipient_to_public(recipient),
        "channel_id": channel_id,
        "direction": "outbound",
        "type": "template",
    }


async def settle_sends(
    session: AsyncSession, plan: Plan | Unsendable, outcomes: list[ledger.Outcome]
) -> None:
    """Record a batch of sends: the ledger rows (one statement), the counters by the same
    deltas, the events (one insert, one fan-out job), and completion when the last recipient
    is settled. The caller commits."""
    settled = await ledger.settle_claims(session, plan.campaign_id, outcomes, utcnow())
    if not settled:
        return
    sent = sum(1 for row in settled if row.status == RecipientStatus.SENT)
    counters = await ledger.add_to_counters(
        session, plan.campaign_id, (sent, 0, 0, len(settled) - sent)
    )
    channel_id = plan.channel_id if isinstance(plan, Plan) else ""
    events: list[tuple[str, dict[str, Any]]] = []
    for row in settled:
        message = campaign_message_to_public(row, channel_id)
        if row.status == RecipientStatus.SENT:
            events.append((OUTBOUND_SENT, message))
        else:
            events.append((MESSAGE_FAILED, recipient_to_public(row)))
            events.append((OUTBOUND_FAILED, message))
    await emit_many(session, plan, events)
    if counters is not None and counters.status == CampaignStatus.SENDING and counters.settled:
        await _complete(session, plan.campaign_id)


async def release_unsent(session: AsyncSession, campaign_id: str, contact_ids: list[str]) -> None:
    """Claimed recipients a run did not send go back to pending, for the next run."""
    await ledger.release_claims(session, campaign_id, contact_ids)


async def finish_dispatch(
    session: AsyncSession, campaign_id: str, claim_stale_seconds: float
) -> datetime | None:
    """The end of a dispatch run. Answers when to run again: now while recipients are
    pending, when the oldest claim of another run goes stale, or None (not sending any more,
    or every recipient settled: then completed)."""
    if await ledger.campaign_status(session, campaign_id) != CampaignStatus.SENDING:
        return None
    if await ledger.has_pending(session, campaign_id):
        return utcnow()
    waiting = await _reconcile_claims(session, campaign_id, claim_stale_seconds)
    if waiting is not None:
        return waiting
    counters = await ledger.ledger_counters(session, campaign_id)
    if counters is not None and counters.status == CampaignStatus.SENDING and counters.settled:
        await _complete(session, campaign_id)
    return None


async def _reconcile_claims(
    session: AsyncSession, campaign_id: str, claim_stale_seconds: float
) -> datetime | None:
    """Claims no run confirmed. A claim older than `claim_stale_seconds` (a setting) belongs
    to a run that died between the claim and the record of its outcome: whether the platform
    accepted the message is unknown, and a resend could deliver it twice, so it is failed with
    that reason (at most once). Younger claims may still be in flight: answers when to look
    again."""
    now = utcnow()
    stale_before = now - timedelta(seconds=claim_stale_seconds)
    failed = await ledger.fail_stale_claims(
        session, campaign_id, stale_before, UNCONFIRMED_SEND, now
    )
    if failed:
        await ledger.add_to_counters(session, campaign_id, (0, 0, 0, len(failed)))
        campaign = await ledger.campaign_by_id(session, campaign_id)
        assert campaign is not None
        await emit_many(
            session, campaign, [(MESSAGE_FAILED, recipient_to_public(row)) for row in failed]
        )
    oldest = await ledger.oldest_claim(session, campaign_id)
    if oldest is None:
        return None
    return oldest + timedelta(seconds=claim_stale_seconds)


async def _complete(session: AsyncSession, campaign_id: str) -> None:
    if not await ledger.mark_completed(session, campaign_id, utcnow()):
        return
    campaign = await ledger.campaign_by_id(session, campaign_id)
    assert campaign is not None
    await emit(session, campaign, COMPLETED, campaign_to_public(campaign))


def recipient_to_public(recipient: Any) -> dict[str, Any]:
    return {
        "campaign_id": recipient.campaign_id,
        "contact_id": recipient.contact_id,
        "phone_number": recipient.phone_number,
        "status": recipient.status,
        "platform_message_id": recipient.platform_message_id,
        "error": recipient.error,
        "sent_at": recipient.sent_at,
        "delivered_at": recipient.delivered_at,
        "read_at": recipient.read_at,
        "failed_at": recipient.failed_at,
    }


# --- platform status callbacks ----------------------------------------------------------

_RANK = {
    RecipientStatus.SENT.value: 1,
    RecipientStatus.DELIVERED.value: 2,
    RecipientStatus.READ.value: 3,
}


async def apply_status(
    session: AsyncSession,
    channel_id: str,
    status: dict[str, Any],
    error: str | None,
    deferral: meta_limits.DeferralPolicy | None = None,
) -> bool:
    """One `statuses[]` entry about a message of one of the channel's campaigns: the ledger
    moves forward only (a duplicate or late status changes nothing), and the counters move by
    the same delta in this transaction. The recipient row is locked first, so concurrent
    callbacks about one message apply one after the other. False when the message is not one
    of the channel's campaigns'."""
    message_id = str(status.get("id", ""))
    if not message_id:
        return False
    recipient = await ledger.recipient_by_message_id(session, channel_id, message_id)
    if recipient is None:
        return False
    new = str(status.get("status", ""))
    meta_limits.record_pricing(recipient, status)
    current = recipient.status
    now = utcnow()
    if current == RecipientStatus.FAILED:
        return True
    if await meta_limits.defer_if_limited(session, recipient, status, deferral):
        return True
    events: list[str]
    if new == RecipientStatus.FAILED:
        if current == RecipientStatus.READ:
            return True
        recipient.status = RecipientStatus.FAILED.value
        recipient.error = error or "failed"
        recipient.failed_at = now
        events = [MESSAGE_FAILED, OUTBOUND_FAILED]
    elif new in _RANK and _RANK[new] > _RANK.get(current, 0):
        recipient.status = new
        if recipient.delivered_at is None and new in ("delivered", "read"):
            recipient.delivered_at = now  # read implies delivered, even if that never came
        if new == RecipientStatus.READ:
            recipient.read_at = now
        events = [MESSAGE_DELIVERED] if current == RecipientStatus.SENT else []
    else:
        return True
    await session.flush()
    await ledger.add_to_counters(
        session, recipient.campaign_id, ledger.counter_delta(current, recipient.status)
    )
    campaign = await ledger.campaign_by_id(session, recipient.campaign_id)
    if campaign is None:
        return True
    for event in events:
        data = (
            campaign_message_to_public(recipient, campaign.chat_phone_number_id)
            if event == OUTBOUND_FAILED
            else recipient_to_public(recipient)
        )
        await emit(session, campaign, event, data)
    return True
