"""Meta's limits on a campaign (docs/api.md "Meta's limits and ratings").

- Per-user marketing limit (error 131049, reported as a `failed` status): the recipient is
  deferred, not failed: `deferred`, tried again `DeferralPolicy.delay_seconds` later (pending
  again, sent by the next dispatch run), at most `max_retries` times, then failed with Meta's
  reason. The campaign counts its deferred recipients in `deferred_count` (not in `sent_count`
  nor `failed_count`) and is not `completed` while any is waiting: a deferral after completion
  moves it back to `sending` until the retry settles.
- Rating: when the channel's rating falls to RED, its scheduled and sending campaigns pause
  with `paused_reason`; at YELLOW a campaign sends at `yellow_rate_factor` of the channel's
  budget (app/channels/ratings.py `campaign_rate`).
- Pricing: each status's `pricing` (category, billable) is kept on the ledger row.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

import structlog
from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from app.campaigns import repository as ledger
from app.campaigns.models import Campaign, CampaignRecipient, CampaignStatus, RecipientStatus
from app.channels.ratings import RED, RatingChange, campaign_rate
from app.config import Settings
from app.core.clock import utcnow
from app.kit import outbox
from app.kit.outbox_models import OutboxJob
from app.resources import Resources

logger = structlog.get_logger("switchboard.campaigns.meta_limits")

MARKETING_LIMIT_CODE = 131049
RETRY_ACTOR = "campaigns.deferred_retry"
RETRY_QUEUE = "default"
RED_REASON = "The channel's quality rating fell to RED"
MAX_PRICING_WORD = 32
# A message Meta delivered was not held back by the limit: a late 131049 about it is no news.
_REACHED = (RecipientStatus.DELIVERED.value, RecipientStatus.READ.value)
_JOB_NAMESPACE = uuid.UUID("5d2b8f0e-2f43-4a8e-9d3c-1b7e4c1a9f25")


@dataclass(frozen=True, slots=True)
class DeferralPolicy:
    delay_seconds: float = 24 * 3600.0
    max_retries: int = 3

    @classmethod
    def of(cls, settings: Settings | None) -> DeferralPolicy:
        if settings is None:
            return cls()
        return cls(settings.campaign_deferral_seconds, settings.campaign_deferral_max_retries)


def retry_job_id(campaign_id: str) -> str:
    """One deferred-retry job per campaign: it wakes for each due batch in turn."""
    return str(uuid.uuid5(_JOB_NAMESPACE, f"deferred-retry:{campaign_id}"))


# --- statuses ----------------------------------------------------------------------------


def pricing_of(entry: dict[str, Any]) -> dict[str, Any] | None:
    """A `statuses[]` entry's `pricing` reduced to what is stored: category (lower case, as
    Meta sends it) and billable."""
    pricing = entry.get("pricing")
    if not isinstance(pricing, dict):
        return None
    category = pricing.get("category")
    billable = pricing.get("billable")
    usable = isinstance(category, str) and 0 < len(category) <= MAX_PRICING_WORD
    return {
        "category": category.strip().lower() if usable and isinstance(category, str) else None,
        "billable": billable if isinstance(billable, bool) else None,
    }


def error_code_of(errors: Any) -> int | None:
    if not isinstance(errors, list) or not errors or not isinstance(errors[0], dict):
        return None
    code = errors[0].get("code")
    if isinstance(code, int) and not isinstance(code, bool):
        return code
    return int(code) if isinstance(code, str) and code.isdigit() else None


def record_pricing(target: Any, status: dict[str, Any]) -> None:
    """Meta's pricing of a message (a ledger row or a conversation message), once it says."""
    pricing = status.get("pricing")
    if not isinstance(pricing, dict):
        return
    if pricing.get("category") is not None:
        target.pricing_category = pricing["category"]
    if pricing.get("billable") is not None:
        target.billable = pricing["billable"]


async def defer_if_limited(
    session: AsyncSession,
    recipient: CampaignRecipient,
    status: dict[str, Any],
    policy: DeferralPolicy | None,
) -> bool:
    """True when the status is taken here: a 131049 failure that defers the recipient, or
    any status about the attempt a recipient is already deferred for (a redelivery, or one
    that arrives late). False: the caller applies it as usual (a 131049 beyond the retries
    fails the recipient then)."""
    if recipient.status == RecipientStatus.DEFERRED:
        return True
    if status.get("status") != RecipientStatus.FAILED or (
        status.get("error_code") != MARKETING_LIMIT_CODE
    ):
        return False
    policy = policy or DeferralPolicy()
    if recipient.deferrals >= policy.max_retries or recipient.status in _REACHED:
        return False
    now = utcnow()
    before = recipient.status
    recipient.status = RecipientStatus.DEFERRED.value
    recipient.deferrals += 1
    recipient.deferred_until = now + timedelta(seconds=policy.delay_seconds)
    recipient.error = (
        f"{status.get('error') or 'Meta per-user marketing limit'}: deferred "
        f"({recipient.deferrals} of {policy.max_retries}), tried again at "
        f"{recipient.deferred_until.isoformat()}"
    )
    await session.flush()
    await ledger.add_to_counters(
        session, recipient.campaign_id, ledger.counter_delta(before, recipient.status)
    )
    await session.execute(
        update(Campaign)
        .where(Campaign.id == recipient.campaign_id)
        .values(deferred_count=Campaign.deferred_count + 1)
        .execution_options(synchronize_session=False)
    )
    # Completed only while nothing waits: a deferral after completion takes it back.
    await session.execute(
        update(Campaign)
        .where(
            Campaign.id == recipient.campaign_id,
            Campaign.status == CampaignStatus.COMPLETED.value,
        )
        .values(status=CampaignStatus.SENDING.value, completed_at=None)
        .execution_options(synchronize_session=False)
    )
    await _schedule_retry(session, recipient.campaign_id, recipient.deferred_until)
    return True


async def defer_refused_sends(
    session: AsyncSession,
    campaign_id: str,
    outcomes: Sequence[Any],
    policy: DeferralPolicy | None,
) -> list[Any]:
    """Sends the platform refused with 131049 in its answer to the send call itself: each
    claimed recipient is deferred exactly as a `failed` status with that code defers it
    (`defer_if_limited`). Answers the outcomes left to settle as usual (the others, and a
    131049 beyond the retries allowed, which fails with Meta's reason)."""
    limited = {
        outcome.contact_id: outcome
        for outcome in outcomes
        if outcome.error_code == MARKETING_LIMIT_CODE and outcome.platform_message_id is None
    }
    if not limited:
        return list(outcomes)
    claimed = await session.scalars(
        select(CampaignRecipient)
        .where(
            CampaignRecipient.campaign_id == campaign_id,
            CampaignRecipient.contact_id.in_(list(limited)),
            CampaignRecipient.status == RecipientStatus.CLAIMED.value,
        )
        .order_by(CampaignRecipient.contact_id)
        .with_for_update()
    )
    deferred: set[str] = set()
    for recipient in list(claimed):
        outcome = limited[recipient.contact_id]
        status = {
            "status": RecipientStatus.FAILED.value,
            "error_code": MARKETING_LIMIT_CODE,
            "error": outcome.error,
        }
        if await defer_if_limited(session, recipient, status, policy):
            recipient.claimed_at = None
            deferred.add(recipient.contact_id)
    if deferred:
        await session.flush()
        logger.info("sends deferred for 131049", campaign_id=campaign_id, count=len(deferred))
    return [outcome for outcome in outcomes if outcome.contact_id not in deferred]


async def _schedule_retry(session: AsyncSession, campaign_id: str, at: datetime) -> None:
    job_id = retry_job_id(campaign_id)
    if await session.scalar(select(OutboxJob.id).where(OutboxJob.id == job_id)) is None:
        outbox.schedule(session, RETRY_ACTOR, campaign_id, queue=RETRY_QUEUE, at=at, job_id=job_id)


async def release_due(session: AsyncSession, campaign_id: str) -> datetime | None:
    """The retry job's run: deferred recipients whose time has come are pending again (the
    attempt's message id and error dropped) and a dispatch run is scheduled while the
    campaign sends (a paused one sends them when resumed). Answers when the next deferred
    recipient is due, or None. The caller commits."""
    from app.campaigns.service import DISPATCH_ACTOR, DISPATCH_QUEUE

    campaign = await ledger.campaign_by_id(session, campaign_id)
    if campaign is None or campaign.status == CampaignStatus.CANCELLED:
        return None
    now = utcnow()
    released = await session.execute(
        update(CampaignRecipient)
        .where(
            CampaignRecipient.campaign_id == campaign_id,
            CampaignRecipient.status == RecipientStatus.DEFERRED.value,
            CampaignRecipient.deferred_until <= now,
        )
        .values(
            status=RecipientStatus.PENDING.value,
            platform_message_id=None,
            claimed_at=None,
            error=None,
            deferred_until=None,
        )
        .execution_options(synchronize_session=False)
    )
    count = int(getattr(released, "rowcount", 0) or 0)
    if count:
        await session.execute(
            update(Campaign)
            .where(Campaign.id == campaign_id)
            .values(deferred_count=Campaign.deferred_count - count)
            .execution_options(synchronize_session=False)
        )
        if campaign.status == CampaignStatus.SENDING:
            outbox.schedule(session, DISPATCH_ACTOR, campaign_id, queue=DISPATCH_QUEUE)
        logger.info("deferred recipients released", campaign_id=campaign_id, count=count)
    following: datetime | None = await session.scalar(
        select(func.min(CampaignRecipient.deferred_until)).where(
            CampaignRecipient.campaign_id == campaign_id,
            CampaignRecipient.status == RecipientStatus.DEFERRED.value,
        )
    )
    return following


# --- ratings -----------------------------------------------------------------------------


async def pause_for_rating(session: AsyncSession, changes: Sequence[RatingChange]) -> int:
    """Campaigns of channels whose rating fell to RED pause, saying why; answers how many."""
    fallen = [change.channel_id for change in changes if change.after == RED]
    if not fallen:
        return 0
    result = await session.execute(
        update(Campaign)
        .where(
            Campaign.chat_phone_number_id.in_(fallen),
            Campaign.status.in_([CampaignStatus.SENDING.value, CampaignStatus.SCHEDULED.value]),
        )
        .values(status=CampaignStatus.PAUSED.value, paused_reason=RED_REASON)
        .execution_options(synchronize_session=False)
    )
    paused = int(getattr(result, "rowcount", 0) or 0)
    if paused:
        logger.warning("campaigns paused: channel rated RED", channels=fallen, campaigns=paused)
    return paused


def paced(plan: Any, settings: Settings) -> Any:
    """The dispatch plan at the rate the channel's rating allows (stepped down at YELLOW)."""
    rate = campaign_rate(plan.messages_per_second, plan.quality_rating, settings.yellow_rate_factor)
    return plan if rate == plan.messages_per_second else replace(plan, messages_per_second=rate)


async def retry_deferred(resources: Resources, campaign_id: str) -> datetime | None:
    """The body of the campaign's deferred-retry job (see `release_due`)."""
    async with resources.session(writes=True) as session:
        again = await release_due(session, str(campaign_id))
        await session.commit()
    return again
