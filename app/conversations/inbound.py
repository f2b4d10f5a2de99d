"""The platform's webhooks, verified and dispatched: one entry point for Meta's POSTs and
for the simulator's callbacks alike.

A phone number id's traffic reaches the one channel that holds it (app/channels/service.py):
the platform's goes to the live holder, or to the test-mode holder while no live channel holds
the number; the simulator's goes to the test-mode holder only. Each message and status is
taken or skipped on its own (a message in a savepoint of its own, a status checked before it
is written): one that cannot be stored is logged and skipped, the others are stored, and the
platform gets its 200.

Unknown phone number ids and unknown fields are acknowledged and logged, never refused: the
platform retries anything but a 2xx for days, and a number deleted here would never stop.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import orjson
import structlog
from sqlalchemy.exc import DataError, IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from app.campaigns import meta_limits
from app.campaigns.meta_limits import DeferralPolicy
from app.channels import ratings
from app.channels.models import Channel
from app.channels.repository import holder_of
from app.channels.schemas import is_upstream_id
from app.config import Settings
from app.consent import service as consent
from app.conversations import service, statuses
from app.conversations.models import Message
from app.events.service import fan_out_here
from app.integrations.whatsapp.payloads import signature_valid
from app.kit.errors import DomainError
from app.kit.platform_times import event_time
from app.resources import Resources
from app.templates import service as templates
from app.webhooks import tasks as webhook_jobs

logger = structlog.get_logger("switchboard.whatsapp.inbound")
# What a message that cannot be stored raises; anything else (a lost connection) fails the
# whole webhook, which the platform then sends again.
UNSTORABLE = (DataError, IntegrityError, DomainError, ValueError)


# What another domain does with each new inbound message, in the webhook's transaction (the
# AI replies domain schedules the channel's agent's answer). Registered by that domain
# (`on_inbound_message`), so this one imports none of its dependents.
InboundListener = Callable[[AsyncSession, Channel, Message, Settings], Awaitable[None]]
_inbound_listeners: list[InboundListener] = []


def on_inbound_message(listener: InboundListener) -> InboundListener:
    """Registers `listener(session, channel, message, settings)`, run for every new inbound
    message stored (not for a repeat of one already stored)."""
    if listener not in _inbound_listeners:
        _inbound_listeners.append(listener)
    return listener


class SignatureInvalid(Exception):
    """The body is not signed with the app secret: refused, nothing stored."""


class PayloadInvalid(Exception):
    """Signed, but not JSON."""


@dataclass(frozen=True, slots=True)
class Delivery:
    """One entry of a webhook body: its business account, Meta's time of it, its origin,
    and the settings its handling reads."""

    account: str
    at: int
    simulated: bool
    deferral: DeferralPolicy
    settings: Settings


async def process_payload(
    session: AsyncSession, payload: Any, settings: Settings, *, simulated: bool = False
) -> None:
    """Apply every change of a webhook body (`simulated`: posted by the simulator, for
    test-mode channels). The caller commits."""
    if not isinstance(payload, dict):
        return
    deferral = DeferralPolicy.of(settings)
    for entry in payload.get("entry") or []:
        if not isinstance(entry, dict):
            continue
        delivery = Delivery(
            str(entry.get("id", "")), event_time(entry), simulated, deferral, settings
        )
        for change in entry.get("changes") or []:
            if not isinstance(change, dict) or not isinstance(change.get("value"), dict):
                continue
            field = str(change.get("field", ""))
            await _apply_change(session, delivery, field, change["value"])


async def channel_for_traffic(
    session: AsyncSession, phone_number_id: str, *, simulated: bool
) -> Channel | None:
    """The one channel that receives traffic for the number (see the module's docstring)."""
    if not simulated:
        live = await holder_of(session, phone_number_id, livemode=True)
        if live is not None:
            return live
    return await holder_of(session, phone_number_id, livemode=False)


async def _apply_change(
    session: AsyncSession, delivery: Delivery, field: str, value: dict[str, Any]
) -> None:
    account, at, simulated = delivery.account, delivery.at, delivery.simulated
    if field == "message_template_status_update":
        if not await templates.apply_status_update(session, account, value, at):
            logger.info("status update for an unknown template", account=account)
        return
    if field == "message_template_quality_update":
        await templates.apply_quality_update(session, account, value, at)
        return
    if field == "template_category_update":
        await templates.apply_category_update(session, account, value, at)
        return
    if field == "phone_number_quality_update":
        changes = await ratings.apply_quality_update(
            session, account, value, at, simulated=simulated
        )
        await meta_limits.pause_for_rating(session, changes)
        return
    if field == "account_update":
        await ratings.apply_account_update(session, account, value, at, simulated=simulated)
        return
    if field not in ("messages", "user_preferences"):
        logger.info("webhook field not handled", field=field)
        return
    metadata = value.get("metadata")
    phone_number_id = str(metadata.get("phone_number_id", "")) if isinstance(metadata, dict) else ""
    channel = None
    if is_upstream_id(phone_number_id):  # else no channel can have it
        channel = await channel_for_traffic(session, phone_number_id, simulated=simulated)
    if channel is None:
        logger.warning(
            "webhook for an unknown phone number id", phone_number_id=phone_number_id[:64]
        )
        return
    if field == "user_preferences":
        await consent.apply_user_preferences(session, channel, value)
        return
    entries = value.get("statuses")
    entries = entries if isinstance(entries, list) else []
    await statuses.apply_statuses(session, channel, entries, delivery.deferral)
    await consent.apply_status_opt_outs(session, channel, entries)
    listed = value.get("contacts")
    contacts = [
        contact
        for contact in (listed if isinstance(listed, list) else [])
        if isinstance(contact, dict) and isinstance(contact.get("profile") or {}, dict)
    ]
    # A sender by phone number (`wa_id`) or by business-scoped user id (`user_id`).
    names = {
        str(contact.get(key)): (contact.get("profile") or {}).get("name")
        for contact in contacts
        for key in ("wa_id", "user_id")
        if contact.get(key)
    }
    user_ids = {str(c["wa_id"]): c.get("user_id") for c in contacts if c.get("wa_id")}
    only_user_id = contacts[0].get("user_id") if len(contacts) == 1 else None
    messages = value.get("messages")
    for message in messages if isinstance(messages, list) else []:
        if isinstance(message, dict):
            sender = str(message.get("from") or message.get("from_user_id") or "")
            user_id = user_ids.get(sender) or message.get("from_user_id") or only_user_id
            await _receive(session, channel, message, names.get(sender), user_id, delivery.settings)


async def _receive(
    session: AsyncSession,
    channel: Channel,
    message: dict[str, Any],
    profile_name: Any,
    user_id: Any,
    settings: Settings,
) -> None:
    """Store one message; a new one also goes to the registered listeners (an agent's reply)."""
    try:
        async with session.begin_nested():
            stored = await service.receive_message(session, channel, message, profile_name, user_id)
            if stored is not None:
                for listener in _inbound_listeners:
                    await listener(session, channel, stored, settings)
    except UNSTORABLE:
        logger.exception(
            "inbound message skipped", channel_id=channel.id, id=str(message.get("id"))[:64]
        )


def verified_payload(resources: Resources, body: bytes, signature: str | None) -> Any:
    """The body's JSON once `X-Hub-Signature-256` is verified over the raw body."""
    if not signature_valid(resources.settings.whatsapp_app_secret_value(), body, signature):
        raise SignatureInvalid()
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise PayloadInvalid() from exc


async def handle_signed(
    resources: Resources, body: bytes, signature: str | None, *, simulated: bool = False
) -> None:
    """Verify `X-Hub-Signature-256` over the raw body, then apply it in one transaction that
    also fans out its events (no fan-out job per webhook: the platform sends many)."""
    payload = verified_payload(resources, body, signature)
    async with resources.session(writes=True) as session:
        fan_out_here(session)
        await process_payload(session, payload, resources.settings, simulated=simulated)
        fanned = await webhook_jobs.fan_out_collected(session)
        await session.commit()
    await webhook_jobs.announce_relayed(resources, fanned)
