"""Channel operations: the resolvers REST and GraphQL both call.

Test mode: a channel takes `livemode` from the credential that creates it. A test-mode
credential (a test key, or a user's JWT) lists only test-mode channels, and acting on a
live-mode channel by id gets 403 `LiveChannelForbidden` (CONTRACT §2); live keys see and use
both kinds. Other domains that send through a channel take it with `get_channel_for_use`,
which applies the same rule, and read its token with `access_token_of`.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from app.auth.subject import Subject
from app.channels.models import Channel
from app.channels.repository import ChannelRepository
from app.channels.schemas import ChannelCreate, ChannelUpdate
from app.kit.crypto import SecretBox, secret_box
from app.kit.errors import Conflict, InsufficientScope
from app.kit.ids import new_id
from app.kit.pagination import CursorPage, CursorParams
from app.kit.phone import to_e164

ACCESS_TOKEN_PURPOSE = "channel-access-token"


class LiveChannelForbidden(InsufficientScope):
    """A test-mode credential acting on a live-mode channel. Rendered like every 403 (the
    credential lacks a right), with a code of its own."""

    code = "livemode_mismatch"

    def __init__(self) -> None:
        super().__init__(
            "A test-mode credential cannot act on a live-mode channel; use a live API key"
        )


def access_token_box(secret_key: str) -> SecretBox:
    """The box that seals channel access tokens, keyed from the service's secret key."""
    return secret_box(ACCESS_TOKEN_PURPOSE, secret_key)


def _token_context(channel: Any) -> bytes:
    # A sealed token opens only in the row (and organization) it was sealed for.
    return f"channel:{channel.organization_id}:{channel.id}".encode()


def _check_mode(subject: Subject, channel: Any) -> None:
    if channel.livemode and not subject.livemode:
        raise LiveChannelForbidden()


async def create_channel(
    session: AsyncSession, subject: Subject, data: ChannelCreate, box: SecretBox
) -> Channel:
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
    repository = ChannelRepository(session, subject.organization_id)
    repository.add(channel)
    try:
        await session.flush()
    except IntegrityError as exc:
        if repository.is_duplicate(exc):
            raise Conflict(
                "A channel with this phone_number_id already exists in the organization",
                field="phone_number_id",
            ) from exc
        raise
    return channel


async def get_channel(session: AsyncSession, subject: Subject, channel_id: str) -> Any:
    row = await ChannelRepository(session, subject.organization_id).get_row_or_404(channel_id)
    _check_mode(subject, row)
    return row


async def list_channels(
    session: AsyncSession, subject: Subject, params: CursorParams
) -> CursorPage[Any]:
    """Newest first; a test-mode credential sees the test-mode channels only."""
    repository = ChannelRepository(session, subject.organization_id)
    filters = () if subject.livemode else (repository.test_mode_only(),)
    return await repository.cursor_page(params, *filters)


async def get_channel_for_use(session: AsyncSession, subject: Subject, channel_id: str) -> Channel:
    """The channel entity (sealed token included) for work done through it."""
    channel = await ChannelRepository(session, subject.organization_id).get_or_404(channel_id)
    _check_mode(subject, channel)
    return channel


def access_token_of(channel: Channel, box: SecretBox) -> str:
    """The channel's upstream access token, unsealed (for calls to the platform only)."""
    return box.decrypt(channel.access_token_encrypted, _token_context(channel))


async def update_channel(
    session: AsyncSession, subject: Subject, channel_id: str, data: ChannelUpdate
) -> Channel:
    """Rename a channel or change its send budget; a new `messages_per_second` paces the
    next sends of every campaign and reply on it (each send reads the channel's rate)."""
    channel = await get_channel_for_use(session, subject, channel_id)
    for name, value in data.changes().items():
        setattr(channel, name, value)
    await session.flush()
    return channel


async def delete_channel(session: AsyncSession, subject: Subject, channel_id: str) -> None:
    channel = await get_channel_for_use(session, subject, channel_id)
    from app.campaigns.service import refuse_channel_deletion_in_use  # campaigns import us

    await refuse_channel_deletion_in_use(session, subject, channel.id)
    await ChannelRepository(session, subject.organization_id).delete(channel)
    await session.flush()
