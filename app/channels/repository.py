"""Every query on channels, scoped to one organization."""

from __future__ import annotations

from typing import ClassVar

from sqlalchemy.exc import IntegrityError

from app.channels.models import Channel
from app.kit.repository import OrgScopedRepository

# How each backend names the (organization_id, phone_number_id) unique key in its error.
_DUPLICATE_MARKERS = ("uq_channels_organization_id", "channels.phone_number_id")


class ChannelRepository(OrgScopedRepository[Channel]):
    model = Channel
    resource = "Channel"
    moded = True
    # Reads never select the sealed token: only `get` (the entity) carries it.
    list_columns: ClassVar = (
        Channel.id,
        Channel.organization_id,
        Channel.display_phone_number,
        Channel.phone_number_id,
        Channel.business_account_id,
        Channel.name,
        Channel.livemode,
        Channel.messages_per_second,
        Channel.created_at,
        Channel.updated_at,
    )

    @staticmethod
    def is_duplicate(exc: IntegrityError) -> bool:
        message = str(exc.orig)
        return any(marker in message for marker in _DUPLICATE_MARKERS)
