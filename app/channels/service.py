"""Channel operations: the resolvers REST and GraphQL both call.

Test mode: a channel takes `livemode` from the credential that creates it. A test-mode
credential (a test key, or a user's JWT) lists only test-mode channels, and acting on a
live-mode channel by id gets 403 `livemode_mismatch` (the channel repository, like every
repository of moded rows, enforces it: app/kit/repository.py); live keys see and use both
kinds. Other domains that send through a channel take it with `get_channel_for_use` and read
its token with `access_token_of`.

A phone number id belongs to one organization. In each mode one channel holds it, across
every organization (a unique index decides between concurrent creates): a second
organization's channel for it is 409 `PhoneNumberInUse`. A live channel is verified with the
platform first (its token must read the number) and is never refused because of a test-mode
channel: platform traffic for the number reaches the live holder, and a test-mode holder then
only receives the simulator's traffic (app/conversations/inbound.py). So a test-mode channel is
refused for a number another organization holds live, and an organization may hold its own
number in both modes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from app.access.subject import Subject
from app.agents.repository import AgentRepository
from app.channels.models import Channel
from app.channels.repository import ChannelRepository, holder_of
from app.channels.schemas import ChannelCreate, ChannelUpdate
from app.config import Settings
from app.core.ids import new_id, normalize_id
from app.integrations.whatsapp.client import GraphApiClient, RetryPolicy
from app.integrations.whatsapp.errors import WhatsAppError
from app.kit.crypto import SecretBox, secret_box
from app.kit.errors import Conflict, DomainError, InvalidInput, NotFound
from app.kit.pagination import CursorPage, CursorParams
from app.kit.phone import to_e164

ACCESS_TOKEN_PURPOSE = "channel-access-token"
AGENT = "Agent"
INVALID_AGENT_ID = "Invalid or missing agent_id"
# A verification answers inside an API request: one quick retry of a platform hiccup at most.
VERIFY_RETRY = RetryPolicy(attempts=2, base_delay=0.2, max_delay=1.0)


# A check another domain runs before a channel is deleted, refusing with a DomainError (the
# campaigns domain refuses while one of its campaigns is mid-send). Registered by that domain
# (`guard_deletion`), so this one imports none of its dependents.
DeletionGuard = Callable[[AsyncSession, Subject, str], Awaitable[None]]
_deletion_guards: list[DeletionGuard] = []


def guard_deletion(guard: DeletionGuard) -> DeletionGuard:
    """Registers `guard(session, subject, channel_id)`, run by every channel deletion."""
    if guard not in _deletion_guards:
        _deletion_guards.append(guard)
    return guard


class PhoneNumberInUse(Conflict):
    """Another organization holds the phone number id (in the mode asked for, or live)."""

    def __init__(self) -> None:
        super().__init__("Phone number is already in use", field="phone_number_id")


class PhoneNumberNotVerified(InvalidInput):
    """The platform did not let the channel's access token read the phone number."""

    code = "phone_number_not_verified"

    def __init__(self, phone_number_id: str, error: WhatsAppError) -> None:
        super().__init__(
            f"The access token cannot read phone number {phone_number_id} on the messaging "
            f"platform ({error.describe()}); a live channel needs a token of the business "
            "account that owns the number",
            field="access_token",
        )


class PlatformFailure(DomainError):
    """The messaging platform failed or refused a call made for this request."""

    code = "platform_error"
    status = 502

    def __init__(self, error: WhatsAppError) -> None:
        super().__init__(f"The messaging platform answered: {error.describe()}")
        self.error = error


def access_token_box(secret_key: str) -> SecretBox:
    """The box that seals channel access tokens, keyed from the service's secret key."""
    return secret_box(ACCESS_TOKEN_PURPOSE, secret_key)


def _token_context(channel: Any) -> bytes:
    # A sealed token opens only in the row (and organization) it was sealed for.
    return f"channel:{channel.organization_id}:{channel.id}".encode()


async def create_channel(
    session: AsyncSession,
    subject: Subject,
    data: ChannelCreate,
    box: SecretBox,
    settings: Settings,
) -> Channel:
    """Register a number: refused when held (see the module's docstring), verified with the
    platform when live, then stored; the unique index settles a concurrent create."""
    await _refuse_held(session, subject, data.phone_number_id)
    if subject.livemode:
        await verify_phone_number(settings, data.phone_number_id, data.access_token)
    channel = Channel(
        id=new_id(),
        organization_id=subject.organization_id,
        display_phone_number=to_e164(data.display_phone_number, field="display_phone_number"),
        phone_number_id=data.phone_number_id,
        business_account_id=data.business_account_id,
        name=data.name,
        livemode=subject.livemode,
        messages_per_second=data.messages_per_second,
    )
    channel.access_token_encrypted = box.encrypt(data.access_token, _token_context(channel))
    repository = ChannelRepository(session, subject)
    try:
        async with session.begin_nested():
            repository.add(channel)
            await session.flush()
    except IntegrityError as exc:
        if not repository.is_duplicate(exc):
            raise
        await _refuse_held(session, subject, data.phone_number_id)  # names the winner
        raise PhoneNumberInUse() from exc
    return channel


async def _refuse_held(session: AsyncSession, subject: Subject, phone_number_id: str) -> None:
    """409 when a channel holds the number in the subject's mode, or another organization's
    holds it live (its own live number may have a test-mode twin; a live channel never
    looks at test-mode holders)."""
    same_mode = await holder_of(session, phone_number_id, livemode=subject.livemode)
    if same_mode is not None:
        if same_mode.organization_id == subject.organization_id:
            raise Conflict(
                "A channel with this phone_number_id already exists in the organization",
                field="phone_number_id",
            )
        raise PhoneNumberInUse()
    if not subject.livemode:
        live = await holder_of(session, phone_number_id, livemode=True)
        if live is not None and live.organization_id != subject.organization_id:
            raise PhoneNumberInUse()


async def verify_phone_number(settings: Settings, phone_number_id: str, access_token: str) -> None:
    """The platform lets `access_token` read the number (Graph API `GET /{phone_number_id}`):
    PhoneNumberNotVerified when it refuses, PlatformFailure when it cannot answer now."""
    async with GraphApiClient(
        settings.graph_api_url,
        access_token,
        retry=VERIFY_RETRY,
        version=settings.graph_api_version,
    ) as client:
        try:
            await client.phone_number(phone_number_id)
        except WhatsAppError as exc:
            if exc.retryable:
                raise PlatformFailure(exc) from exc
            raise PhoneNumberNotVerified(phone_number_id, exc) from exc


async def get_channel(session: AsyncSession, subject: Subject, channel_id: str) -> Any:
    return await ChannelRepository(session, subject).get_row_or_404(channel_id)


async def list_channels(
    session: AsyncSession, subject: Subject, params: CursorParams
) -> CursorPage[Any]:
    """Newest first; a test-mode credential sees the test-mode channels only."""
    return await ChannelRepository(session, subject).cursor_page(params)


async def get_channel_for_use(session: AsyncSession, subject: Subject, channel_id: str) -> Channel:
    """The channel entity (sealed token included) for work done through it."""
    return await ChannelRepository(session, subject).get_or_404(channel_id)


async def channel_for_sending(session: AsyncSession, subject: Subject, channel_id: str) -> Any:
    """`get_channel_for_use` as a row (every column, attribute access), for a send that
    changes nothing of the channel: a prepared read instead of an entity loaded."""
    row = await ChannelRepository(session, subject).get_for_use(channel_id)
    if row is None:
        raise NotFound("Channel")
    return row


def access_token_of(channel: Channel, box: SecretBox) -> str:
    """The channel's upstream access token, unsealed (for calls to the platform only)."""
    return box.decrypt(channel.access_token_encrypted, _token_context(channel))


async def update_channel(
    session: AsyncSession, subject: Subject, channel_id: str, data: ChannelUpdate
) -> Channel:
    """Rename a channel, change its send budget, or name the agent that answers it (an agent
    of the organization: NotFound("Agent") otherwise; null: none). A new
    `messages_per_second` paces the next sends of every campaign and reply on it (each send
    reads the channel's rate)."""
    channel = await get_channel_for_use(session, subject, channel_id)
    changes = data.changes()
    if changes.get("agent_id") is not None:
        changes["agent_id"] = await _agent_of_organization(session, subject, changes["agent_id"])
    for name, value in changes.items():
        setattr(channel, name, value)
    await session.flush()
    return channel


async def _agent_of_organization(session: AsyncSession, subject: Subject, agent_id: str) -> str:
    canonical = normalize_id(agent_id.strip())
    if canonical is None:
        raise InvalidInput(INVALID_AGENT_ID, field="agent_id")
    agent = await AgentRepository(session, subject.organization_id).get(canonical)
    if agent is None:
        raise NotFound(AGENT)
    return agent.id


async def delete_channel(session: AsyncSession, subject: Subject, channel_id: str) -> None:
    channel = await get_channel_for_use(session, subject, channel_id)
    for guard in _deletion_guards:
        await guard(session, subject, channel.id)
    await ChannelRepository(session, subject).delete(channel)
    await session.flush()
