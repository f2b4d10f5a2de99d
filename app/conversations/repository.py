"""Every query on conversation messages. Platform callbacks name a channel, not an
organization: their lookups are by channel (which belongs to exactly one organization)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, ClassVar

from sqlalchemy import ColumnElement, bindparam, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from app.conversations.models import Direction, Message
from app.conversations.schemas import MESSAGE
from app.db import lists
from app.db.prepared import constant
from app.kit.repository import Filter, OrgScopedRepository


async def known_message_ids(
    session: AsyncSession, channel_id: str, platform_message_ids: Sequence[str]
) -> set[str]:
    """Which of these platform message ids name messages of the channel."""
    return await lists.present(
        session, Message.platform_message_id, platform_message_ids, Message.channel_id == channel_id
    )


async def message_by_platform_id(
    session: AsyncSession, channel_id: str, platform_message_id: str
) -> Message | None:
    return await session.scalar(
        select(Message).where(
            Message.channel_id == channel_id, Message.platform_message_id == platform_message_id
        )
    )


class MessageRepository(OrgScopedRepository[Message]):
    model = Message
    resource = "Message"
    moded = True
    list_columns: ClassVar = MESSAGE.columns()

    @staticmethod
    def of_ticket(ticket_id: str) -> Filter:
        return Filter("ticket", _of_ticket, {"ticket_id": ticket_id})

    async def recent_for_tickets(self, ticket_ids: Sequence[str], limit: int) -> list[Any]:
        """Up to `limit` newest messages of each ticket, in one statement whatever the count."""
        if not ticket_ids:
            return []
        rank = (
            func.row_number()
            .over(
                partition_by=Message.ticket_id,
                order_by=(Message.created_at.desc(), Message.id.desc()),
            )
            .label("rank")
        )
        ranked = (
            self.scoped(select(*self.list_columns, rank))
            .where(Message.ticket_id.in_(list(ticket_ids)))
            .subquery()
        )
        statement = (
            select(*(ranked.c[column.key] for column in self.list_columns))
            .where(ranked.c.rank <= limit)
            .order_by(ranked.c.ticket_id, ranked.c.created_at.desc(), ranked.c.id.desc())
        )
        return list((await self._execute(statement)).all())

    async def last_inbound_at(self, ticket_id: str) -> datetime | None:
        read = self._prepared(
            ("last_inbound_at",),
            lambda: select(func.max(Message.created_at).label("last")).where(
                self._org_bound(),
                _of_ticket(),
                Message.direction == constant(Direction.INBOUND.value),
            ),
        )
        row = await read.first(self.session, self._bound({"ticket_id": ticket_id}))
        last: datetime | None = row.last if row is not None else None
        return last


def _of_ticket() -> ColumnElement[bool]:
    return Message.ticket_id == bindparam("ticket_id")
