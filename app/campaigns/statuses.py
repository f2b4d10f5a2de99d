"""The platform's status callbacks about campaign messages: the ledger moves forward only,
the counters by the same delta in the same transaction, and the campaign's events follow.
Called by the conversations domain's status handling (app/conversations/statuses.py), which
asks here first for every `statuses[]` entry of a channel."""

from __future__ import annotations

from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from app.campaigns import meta_limits
from app.campaigns import repository as ledger
from app.campaigns.models import RecipientStatus
from app.campaigns.schemas import campaign_message_to_public, recipient_to_public
from app.campaigns.service import MESSAGE_DELIVERED, MESSAGE_FAILED, OUTBOUND_FAILED
from app.core.clock import utcnow
from app.events.service import emit

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
