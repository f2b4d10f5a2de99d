"""The platform's webhooks, verified and dispatched: one entry point for Meta's POSTs and
for the simulator's callbacks alike.

Unknown phone number ids and unknown fields are acknowledged and logged, never refused: the
platform retries anything but a 2xx for days, and a number deleted here would never stop.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import orjson
import structlog
from sqlalchemy.ext.asyncio import AsyncSession

from app.campaigns import service as campaigns
from app.channels.models import Channel
from app.conversations import service
from app.conversations.repository import channels_for_phone_number_id
from app.integrations.whatsapp.factory import CALLBACK_QUEUE
from app.integrations.whatsapp.payloads import signature_valid
from app.kit import outbox
from app.kit.clock import utcnow
from app.resources import Resources
from app.templates import service as templates

logger = structlog.get_logger("switchboard.whatsapp.inbound")


class SignatureInvalid(Exception):
    """The body is not signed with the app secret: refused, nothing stored."""


class PayloadInvalid(Exception):
    """Signed, but not JSON."""


async def process_payload(session: AsyncSession, payload: Any) -> None:
    """Apply every change of a webhook body. The caller commits."""
    if not isinstance(payload, dict):
        return
    for entry in payload.get("entry") or []:
        if not isinstance(entry, dict):
            continue
        account = str(entry.get("id", ""))
        for change in entry.get("changes") or []:
            if not isinstance(change, dict) or not isinstance(change.get("value"), dict):
                continue
            await _apply_change(session, account, str(change.get("field", "")), change["value"])


async def _apply_change(
    session: AsyncSession, account: str, field: str, value: dict[str, Any]
) -> None:
    if field == "message_template_status_update":
        if not await templates.apply_status_update(session, account, value):
            logger.info("status update for an unknown template", account=account)
        return
    if field == "message_template_quality_update":
        await templates.apply_quality_update(session, account, value)
        return
    if field != "messages":
        logger.info("webhook field not handled", field=field)
        return
    metadata = value.get("metadata") or {}
    phone_number_id = str(metadata.get("phone_number_id", ""))
    channels = await channels_for_phone_number_id(session, phone_number_id)
    if not channels:
        logger.warning("webhook for an unknown phone number id", phone_number_id=phone_number_id)
        return
    names = {
        str(contact.get("wa_id")): (contact.get("profile") or {}).get("name")
        for contact in value.get("contacts") or []
        if isinstance(contact, dict)
    }
    for status in value.get("statuses") or []:
        if isinstance(status, dict):
            await apply_status(session, channels, status)
    for channel in channels:
        for message in value.get("messages") or []:
            if isinstance(message, dict):
                await service.receive_message(
                    session, channel, message, names.get(str(message.get("from")))
                )


# A status can overtake the send it is about: the message id is stored when the send settles
# (a campaign's ledger every 100 ms, a reply when its request commits). A status about an id
# nobody holds yet is tried again after each of these delays, then dropped with a log line.
STATUS_RETRY_ACTOR = "whatsapp.status_retry"
STATUS_RETRY_DELAYS = (timedelta(seconds=2), timedelta(seconds=10), timedelta(seconds=60))


async def apply_status(
    session: AsyncSession, channels: list[Channel], status: dict[str, Any], attempt: int = 0
) -> None:
    """One `statuses[]` entry about a message sent from the channels of one phone number id:
    a campaign's message, else a conversation's (on whichever channel holds it), else later."""
    error = service.error_text(status.get("errors"))
    if await campaigns.apply_status(session, status, error):
        return
    held = [await service.apply_status(session, channel, status) for channel in channels]
    if any(outcome is not None for outcome in held):
        return
    if attempt < len(STATUS_RETRY_DELAYS):
        at = utcnow() + STATUS_RETRY_DELAYS[attempt]
        args = (channels[0].id, status, attempt + 1)
        outbox.schedule(session, STATUS_RETRY_ACTOR, *args, queue=CALLBACK_QUEUE, at=at)
        return
    logger.info("status for an unknown message", platform_message_id=status.get("id"))


async def retry_status(
    resources: Resources, channel_id: str, status: dict[str, Any], attempt: int
) -> None:
    """The job of a status that matched no message when it arrived (on any channel of the
    phone number id of `channel_id`)."""
    async with resources.session(writes=True) as session:
        channel = await session.get(Channel, channel_id)
        if channel is None:  # a channel deleted since: its messages went with it
            return
        channels = await channels_for_phone_number_id(session, channel.phone_number_id)
        await apply_status(session, channels, status, attempt)
        await session.commit()


async def handle_signed(resources: Resources, body: bytes, signature: str | None) -> None:
    """Verify `X-Hub-Signature-256` over the raw body, then apply it in one transaction."""
    if not signature_valid(resources.settings.whatsapp_app_secret_value(), body, signature):
        raise SignatureInvalid()
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise PayloadInvalid() from exc
    async with resources.session(writes=True) as session:
        await process_payload(session, payload)
        await session.commit()
