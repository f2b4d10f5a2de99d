"""Conversation messages: what the platform reports (inbound messages, delivery statuses).

Statuses only move forward (pending → sent → delivered → read; `failed` ends any state short
of `read`); a duplicate or late status changes nothing, and `read` fills in `delivered`.
Inbound messages are stored once per platform message id: the contact is found by its E.164
number (or created), its open ticket found (or created), the message stored, and
`message.received` emitted (`lead.created`, `ticket.created`, `conversation.started` come
from the contact and ticket services when those are new).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import structlog
from sqlalchemy import inspect
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from app.access.scopes import Scope
from app.access.subject import PrincipalType, Subject
from app.campaigns.meta_limits import record_pricing
from app.channels import service as channels
from app.channels.models import Channel
from app.consent import service as consent
from app.contacts import service as contacts
from app.contacts.models import Contact
from app.contacts.repository import ContactRepository
from app.contacts.schemas import ContactCreate
from app.conversations.models import STATUS_RANK, Direction, Message, MessageStatus
from app.conversations.repository import MessageRepository, message_by_platform_id
from app.conversations.schemas import MessageSend, message_to_public
from app.core.clock import utcnow
from app.core.ids import normalize_id
from app.db.prepared import insert_object
from app.events.service import emit
from app.inbox import service as inbox
from app.inbox.schemas import TicketCreate
from app.integrations.whatsapp.bulk import reply_sender
from app.integrations.whatsapp.client import RetryPolicy
from app.integrations.whatsapp.errors import WhatsAppError
from app.integrations.whatsapp.factory import platform_for
from app.integrations.whatsapp.governed import SendBudget
from app.integrations.whatsapp.types import TemplateMessage, is_user_id
from app.kit.errors import InvalidInput, InvalidState
from app.kit.pagination import CursorPage, CursorParams
from app.kit.phone import to_e164
from app.kit.validation import MAX_NAME_LENGTH, display_name
from app.quick_replies import service as quick_replies
from app.quick_replies.cache import snippet_cache
from app.resources import Resources
from app.templates.repository import TemplateRepository

logger = structlog.get_logger("switchboard.conversations")
PLATFORM_PRINCIPAL = "whatsapp"
# The platform's message types are short lowercase words (text, image, interactive, …).
MESSAGE_TYPE = re.compile(r"[a-z_]{1,16}")
UNSUPPORTED = "unsupported"
MAX_PLATFORM_ID = 128
CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f\x7f]")


def platform_subject(channel: Channel) -> Subject:
    """Who acts when the platform reports something: the channel's organization and mode."""
    return Subject(
        organization_id=channel.organization_id,
        principal_id=PLATFORM_PRINCIPAL,
        principal_type=PrincipalType.API_KEY,
        scopes=frozenset({Scope.FULL_ACCESS}),
        livemode=channel.livemode,
    )


def _timestamp(value: Any) -> datetime:
    try:
        return datetime.fromtimestamp(int(value), tz=UTC)
    except (TypeError, ValueError, OverflowError, OSError):
        return utcnow()


def error_text(errors: Any) -> str | None:
    if not isinstance(errors, list) or not errors or not isinstance(errors[0], dict):
        return None
    first = errors[0]
    data = first.get("error_data")
    details = data.get("details") if isinstance(data, dict) else None
    text = details or first.get("message") or first.get("title") or "failed"
    return f"{text} (code {first.get('code')})"


async def apply_status(
    session: AsyncSession, channel: Channel, status: dict[str, Any], error: str | None
) -> bool | None:
    """One `statuses[]` entry (`error`: its errors as `error_text` reads them). True when the
    message changed; None when no message of the channel has that id (yet:
    app/conversations/statuses.py tries again)."""
    message = await message_by_platform_id(session, channel.id, str(status.get("id", "")))
    if message is None:
        return None
    record_pricing(message, status)
    try:
        new = MessageStatus(str(status.get("status", "")))
    except ValueError:
        return False
    if new not in STATUS_RANK:
        return False
    at = _timestamp(status.get("timestamp"))
    current = MessageStatus(message.status)
    if current in (MessageStatus.FAILED, MessageStatus.RECEIVED):
        return False
    if new is MessageStatus.FAILED:
        if current is MessageStatus.READ:
            return False
        message.status = new.value
        message.failed_at = at
        message.error = error
        await session.flush()
        await emit(session, message, "message.failed", message_to_public(message))
        return True
    if STATUS_RANK[new] <= STATUS_RANK[current]:
        return False  # a duplicate, or a late status overtaken by a later one
    message.status = new.value
    if message.sent_at is None:
        message.sent_at = at
    if new in (MessageStatus.DELIVERED, MessageStatus.READ) and message.delivered_at is None:
        message.delivered_at = at  # read implies delivered, even if that status never came
    if new is MessageStatus.READ:
        message.read_at = at
    await session.flush()
    return True


def _inbound_text(message: dict[str, Any]) -> tuple[str, str | None]:
    """The message's type and its text (a caption or a button's title where it has one), as
    they can be stored: a type that is not one of the platform's words is `unsupported` (the
    platform's own word for a type it cannot describe), NUL characters are dropped (the
    sender chooses the text; PostgreSQL refuses them)."""
    kind = str(message.get("type", "text"))
    text = None
    part = message.get(kind)
    if isinstance(part, dict):
        reply = part.get("button_reply") or part.get("list_reply")
        found = [part.get(key) for key in ("body", "caption", "text", "title")]
        if isinstance(reply, dict):
            found.append(reply.get("title"))
        text = next((value for value in found if isinstance(value, str)), None)
    if not MESSAGE_TYPE.fullmatch(kind):
        logger.info("inbound message of an unknown type stored as unsupported", type=kind[:64])
        kind = UNSUPPORTED
    return kind, None if text is None else text.replace("\x00", "")


def contact_name(profile_name: Any, phone: str) -> str:
    """A WhatsApp profile name as a contact's name: control characters dropped, white space
    trimmed, cut to the names' limit; the phone number when nothing is left of it."""
    text = CONTROL_CHARACTERS.sub("", profile_name) if isinstance(profile_name, str) else ""
    try:
        return display_name(text.strip()[:MAX_NAME_LENGTH])
    except ValueError:  # nothing but white space
        return phone


def usable_platform_id(value: Any) -> str | None:
    """A platform id as stored (1 to 128 printable characters), or None."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not 0 < len(value) <= MAX_PLATFORM_ID:
        return None
    return None if CONTROL_CHARACTERS.search(value) else value


async def receive_message(
    session: AsyncSession,
    channel: Channel,
    message: dict[str, Any],
    profile_name: Any,
    user_id: Any = None,
) -> Message | None:
    """One `messages[]` entry (`user_id`: the sender's business-scoped id from `contacts[]`);
    None when it was already stored (a redelivery) or cannot be (no usable id, no usable
    sender: logged)."""
    platform_id = usable_platform_id(message.get("id"))
    if platform_id is None:
        logger.warning(
            "inbound message without a usable id skipped", id=str(message.get("id"))[:64]
        )
        return None
    if await message_by_platform_id(session, channel.id, platform_id):
        return None
    contact = await _sender(session, channel, message, profile_name, user_id)
    if contact is None:
        logger.warning("inbound message from an unusable sender", platform_message_id=platform_id)
        return None
    subject = platform_subject(channel)
    created = await inbox.create_ticket(
        session, subject, TicketCreate(contact_id=UUID(contact.id)), channel
    )
    kind, text = _inbound_text(message)
    stored = Message(
        organization_id=channel.organization_id,
        ticket_id=created.ticket.id,
        channel_id=channel.id,
        livemode=channel.livemode,
        direction=Direction.INBOUND.value,
        kind=kind,
        text=text,
        platform_message_id=platform_id,
        status=MessageStatus.RECEIVED.value,
    )
    stored.created_at = stored.updated_at = _timestamp(message.get("timestamp"))
    try:
        async with session.begin_nested():
            session.add(stored)
            await session.flush()
    except IntegrityError:
        return None  # the same message, processed concurrently by another delivery
    await emit(session, stored, "message.received", message_to_public(stored))
    # Consent is kept by phone number: a sender known only by a business-scoped id has none.
    if kind == "text" and contact.phone_number:
        await consent.apply_keyword(
            session,
            channel,
            phone_number=contact.phone_number,
            ticket_id=created.ticket.id,
            text=text,
            at=stored.created_at,
        )
    return stored


def sender_user_id(message: dict[str, Any], user_id: Any = None) -> str | None:
    """The sender's business-scoped user id: the message's `from_user_id`, else the one its
    `contacts[]` entry gave (`user_id`)."""
    for value in (message.get("from_user_id"), user_id):
        if is_user_id(value):
            return str(value)
    return None


async def _sender(
    session: AsyncSession,
    channel: Channel,
    message: dict[str, Any],
    profile_name: Any,
    user_id: Any,
) -> Any:
    """The contact who wrote: by E.164 number when Meta gives one (`from`), else by the
    business-scoped user id (a user who hides their number), created when new; None when
    the message names neither usably."""
    subject = platform_subject(channel)
    repository = ContactRepository(session, channel.organization_id)
    user_id = sender_user_id(message, user_id)
    sender = message.get("from")
    phone = None
    if isinstance(sender, str | int) and str(sender) and not is_user_id(str(sender)):
        try:
            phone = to_e164(f"+{str(sender).lstrip('+')}")
        except InvalidInput:
            phone = None
    if phone is not None:
        contact = await repository.by_phone_number(phone)
        if contact is None:
            contact = await contacts.create_contact(
                session,
                subject,
                ContactCreate(phone_number=phone, name=contact_name(profile_name, phone)),
            )
        if user_id is not None and contact.platform_user_id is None:
            contact.platform_user_id = user_id
        return contact
    if user_id is None:
        return None
    contact = await repository.by_platform_user_id(user_id)
    if contact is None:
        contact = await contacts.create_platform_user(
            session, subject, user_id, contact_name(profile_name, user_id)
        )
    return contact


async def reply_address(session: AsyncSession, ticket: Any) -> str:
    """Where a reply goes: the contact's phone number, else its business-scoped user id
    (sent in the messages endpoint's `recipient` field). `ticket`: a ticket row, its
    contact's brief joined (app/inbox/schemas.py)."""
    if ticket.contact_phone_number:
        return str(ticket.contact_phone_number)
    contact = await session.get(Contact, ticket.contact_id)
    return str(contact.platform_user_id or "") if contact is not None else ""


# --- replies --------------------------------------------------------------------------------

# WhatsApp's customer-service window: free-form messages only this long after the contact's
# last message; templates at any time.
SERVICE_WINDOW = timedelta(hours=24)


class OutsideServiceWindow(InvalidState):
    code = "outside_service_window"

    def __init__(self) -> None:
        super().__init__(
            "Outside WhatsApp's 24-hour customer service window: the contact has not written "
            "in the last 24 hours; send an approved template instead"
        )


async def list_messages(
    session: AsyncSession, subject: Subject, ticket_id: str, params: CursorParams
) -> CursorPage[Any]:
    """A ticket's messages, newest first."""
    await inbox.get_ticket(session, subject, ticket_id)
    repository = MessageRepository(session, subject)
    ticket = normalize_id(ticket_id) or ticket_id
    return await repository.cursor_page(params, repository.of_ticket(ticket))


async def recent_messages_by_ticket(
    session: AsyncSession, subject: Subject, ticket_ids: Sequence[str], limit: int
) -> dict[str, list[Any]]:
    """The newest messages of each of these tickets (of the organization), in one query."""
    rows = await MessageRepository(session, subject).recent_for_tickets(ticket_ids, limit)
    found: dict[str, list[Any]] = {}
    for row in rows:
        found.setdefault(row.ticket_id, []).append(row)
    return found


async def send_message(
    session: AsyncSession,
    subject: Subject,
    resources: Resources,
    ticket_id: str,
    data: MessageSend,
    *,
    agent_id: str | None = None,
    locked_ticket: Any | None = None,
    channel: Any | None = None,
    emitted: list[tuple[str, dict[str, Any]]] | None = None,
    inbound_at: datetime | None = None,
) -> Message:
    """A reply through the ticket's channel, paced by its send governor (it shares the
    channel's budget with campaigns). Accepted by the platform: `sent` and `message.sent`;
    refused, or still throttled after `send_max_wait_seconds`: stored `failed` with the
    platform's reason and `message.failed`. `agent_id`: the reply is that agent's (its words
    are sent as they are: no quick-reply expansion).

    `locked_ticket`: the ticket's row (`inbox.get_ticket`'s shape) the caller read under
    its lock in this transaction; the ticket is then not read again, and the message is
    written once, after the send (unlocked, it is written first, so a ticket deleted
    meanwhile fails the reply before anything leaves). `channel`: with `locked_ticket`, the
    ticket's channel row (`channels.channel_for_sending`'s shape) the caller read in the
    same statement; it is then not read again. `emitted`: the message's event is
    appended there, for the caller's own `emit_many`, instead of emitted on its own.
    `inbound_at`: when a message of this ticket the caller read arrived (an AI reply's
    answered messages); while that is inside the 24-hour window, the latest is not read."""
    ticket = locked_ticket or await inbox.get_ticket(session, subject, ticket_id)
    if ticket.chat_phone_number_id is None:
        raise InvalidInput("The ticket has no messaging channel to reply through")
    if channel is None:
        channel = await channels.channel_for_sending(session, subject, ticket.chat_phone_number_id)
    repository = MessageRepository(session, subject)
    text = data.text
    template: TemplateMessage | None = None
    if text is not None:
        if text.startswith("/") and agent_id is None:
            cache = snippet_cache(resources.redis)
            text = await quick_replies.expand_quick_reply(session, subject, text, cache) or text
        last = inbound_at
        if last is None or utcnow() - last > SERVICE_WINDOW:
            last = await repository.last_inbound_at(ticket.id)
        if last is None or utcnow() - last > SERVICE_WINDOW:
            raise OutsideServiceWindow()
    else:
        template = await _approved_template(session, subject, channel, data)
    message = Message(
        organization_id=subject.organization_id,
        ticket_id=ticket.id,
        channel_id=channel.id,
        livemode=channel.livemode,
        direction=Direction.OUTBOUND.value,
        kind="text" if template is None else "template",
        text=text,
        template_name=template.name if template else None,
        status=MessageStatus.PENDING.value,
        agent_id=agent_id,
    )
    if locked_ticket is None:
        session.add(message)
        await session.flush()
    token = channels.access_token_of(channel, channels.access_token_box(resources.secret_key))
    async with platform_for(
        livemode=channel.livemode,
        access_token=token,
        business_account_id=channel.business_account_id,
        display_phone_number=channel.display_phone_number,
        settings=resources.settings,
        session=session,
        sender=resources.per_loop(reply_sender) if channel.livemode else None,
        retry=RetryPolicy(),
        budget=SendBudget(
            resources.send_governor,
            channel.id,
            channel.messages_per_second,
            resources.settings.send_max_wait_seconds,
        ),
    ) as platform:
        to = await reply_address(session, ticket)
        try:
            if template is None:
                sent = await platform.send_text(channel.phone_number_id, to, text or "")
            else:
                sent = await platform.send_template(channel.phone_number_id, to, template)
        except WhatsAppError as exc:
            message.status = MessageStatus.FAILED.value
            message.failed_at = utcnow()
            message.error = exc.describe()
            await _recorded(session, message, "message.failed", emitted)
            return message
    message.platform_message_id = sent.message_id
    message.status = MessageStatus.SENT.value
    message.sent_at = utcnow()
    await _recorded(session, message, "message.sent", emitted)
    return message


async def _recorded(
    session: AsyncSession,
    message: Message,
    event_type: str,
    emitted: list[tuple[str, dict[str, Any]]] | None,
) -> None:
    """The sent (or failed) message written, and its event emitted or handed to the caller."""
    if inspect(message).transient:  # written once, now (`locked_ticket`): no unit of work
        await insert_object(session, message)
    else:
        await session.flush()
    if emitted is None:
        await emit(session, message, event_type, message_to_public(message))
    else:
        emitted.append((event_type, message_to_public(message)))


async def _approved_template(
    session: AsyncSession, subject: Subject, channel: Channel, data: MessageSend
) -> TemplateMessage:
    found = await TemplateRepository(session, subject).approved(
        channel.business_account_id, data.template_name or "", data.template_language
    )
    if found is None:
        raise InvalidInput(
            f"No APPROVED template named {data.template_name} for this channel",
            field="template_name",
        )
    return TemplateMessage(found.name, found.language, list(data.body_parameters))
