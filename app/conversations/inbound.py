"""The platform's webhooks, verified and dispatched: one entry point for Meta's POSTs and
for the simulator's callbacks alike.

Unknown phone number ids and unknown fields are acknowledged and logged, never refused: the
platform retries anything but a 2xx for days, and a number deleted here would never stop.
"""

from __future__ import annotations

from typing import Any

import orjson
import structlog
from sqlalchemy.ext.asyncio import AsyncSession

from app.campaigns import service as campaigns
from app.conversations import service
from app.conversations.repository import channels_for_phone_number_id
from app.integrations.whatsapp.payloads import signature_valid
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
    for channel in channels:
        for status in value.get("statuses") or []:
            if isinstance(status, dict):
                error = service.error_text(status.get("errors"))
                if not await campaigns.apply_status(session, status, error):
                    await service.apply_status(session, channel, status)
        for message in value.get("messages") or []:
            if isinstance(message, dict):
                await service.receive_message(
                    session, channel, message, names.get(str(message.get("from")))
                )


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
