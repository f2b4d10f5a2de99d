"""Every query on channels, scoped to one organization."""

from __future__ import annotations

from typing import Any, ClassVar

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from app.channels.models import HOLDS_NUMBER, Channel
from app.channels.schemas import CHANNEL
from app.kit.repository import OrgScopedRepository

# How each backend names the unique key of the number's holders in its error.
_DUPLICATE_MARKERS = ("uq_channels_phone_number_id_livemode", "channels.phone_number_id")


class ChannelRepository(OrgScopedRepository[Channel]):
    model = Channel
    resource = "Channel"
    moded = True
    # Reads never select the sealed token: only `get` (the entity) carries it.
    list_columns: ClassVar = CHANNEL.columns()

    async def get_for_use(self, object_id: str) -> Any | None:
        """Every column of the channel (sealed token included), as a row, for work done
        through it; prepared: every reply reads it."""
        return await self._row_by_id(
            object_id, "get_for_use", lambda: select(*Channel.__table__.columns)
        )

    @staticmethod
    def is_duplicate(exc: IntegrityError) -> bool:
        message = str(exc.orig)
        return any(marker in message for marker in _DUPLICATE_MARKERS)


async def holder_of(
    session: AsyncSession, phone_number_id: str, *, livemode: bool
) -> Channel | None:
    """The channel, of whichever organization, that holds the number in that mode (platform
    identifiers are not scoped by organization: this is how one is found to be taken)."""
    return await session.scalar(
        select(Channel).where(
            Channel.phone_number_id == phone_number_id,
            Channel.livemode == livemode,
            HOLDS_NUMBER,  # the partial index's own condition, so SQLite uses it too
        )
    )


async def lock_channel(session: AsyncSession, channel_id: str) -> None:
    """Hold the channel's row until the transaction ends (PostgreSQL; SQLite's writers are
    one at a time already): work that must see each other's writes takes it first."""
    await session.execute(select(Channel.id).where(Channel.id == channel_id).with_for_update())
